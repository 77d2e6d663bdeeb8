# ctest -R agent_python3: cmake -P with SOURCE, BUILD and PYTHON set. Builds the agent-only
# tree for PYTHON (another CPython than the full build's, e.g. pyenv's) with warnings as
# errors, then runs the agent's Python tests on that interpreter (those needing torch skip
# themselves when it lacks torch). Any failure fails the test.
# The tree compiles through ccache when it is installed (CMakeLists.txt, PERFTRACKER_CCACHE).
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE} -B ${BUILD} -G Ninja
                        -DCMAKE_BUILD_TYPE=Release -DPERFTRACKER_AGENT_ONLY=ON
                        -DPERFTRACKER_WERROR=ON -DPython3_EXECUTABLE=${PYTHON}
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "agent-only configure for ${PYTHON} failed (${rc})")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BUILD} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "agent-only build for ${PYTHON} failed (${rc})")
endif()
foreach(t test_profiler.py test_agent.py test_fork.py test_torch_api.py test_host_load.py)
  # No sanitizer runtime in this tree: a clean environment for the interpreter.
  execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=LD_PRELOAD --unset=PYTHONHOME
                          PYTHONPATH=${BUILD}/python PYTHONDONTWRITEBYTECODE=1
                          ${PYTHON} -m unittest discover -s ${SOURCE}/python/tests -p ${t}
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${t} failed on ${PYTHON} (${rc})")
  endif()
endforeach()
