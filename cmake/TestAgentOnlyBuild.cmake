# ctest -R agent_only_build: cmake -P with SOURCE, BUILD and PYTHON set. Builds the agent-only
# tree for PYTHON and imports perftracker._agent from it; any failure fails the test.
file(REMOVE_RECURSE ${BUILD})
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE} -B ${BUILD} -G Ninja
                        -DCMAKE_BUILD_TYPE=Release -DPERFTRACKER_AGENT_ONLY=ON
                        -DPERFTRACKER_WERROR=OFF -DPython3_EXECUTABLE=${PYTHON}
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "agent-only configure failed (${rc})")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BUILD} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "agent-only build failed (${rc})")
endif()
foreach(f python/perftracker/_boot/sitecustomize.py python/perftracker/agent.py
          src/perftracker/sources/nccl/libperftracker_nccl_profiler.so)
  if(NOT EXISTS ${BUILD}/${f})
    message(FATAL_ERROR "agent-only build lacks ${f}")
  endif()
endforeach()
# No sanitizer runtime in this tree: a clean environment for the import.
execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=LD_PRELOAD PYTHONPATH=${BUILD}/python
                        ${PYTHON} -c "import perftracker._agent as a; print('agent', a.__file__)"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "importing the agent-only build's extension failed: ${err}")
endif()
message(STATUS "${out}")
