# PERFTRACKER_AGENT_ONLY=ON (see CMakeLists.txt): the agent, CUPTI and the NCCL plugin, no tests.
find_package(Threads REQUIRED)
find_package(nlohmann_json QUIET)
if(NOT nlohmann_json_FOUND)
  # A header-only library: a copy of its include directory on CMAKE_PREFIX_PATH will do.
  find_path(PERFTRACKER_NLOHMANN_INCLUDE nlohmann/json.hpp)
  if(NOT PERFTRACKER_NLOHMANN_INCLUDE)
    message(FATAL_ERROR "perftracker: nlohmann-json not found. Install it with: sudo apt-get "
                        "install nlohmann-json3-dev, or put its include/ on CMAKE_PREFIX_PATH")
  endif()
  add_library(nlohmann_json::nlohmann_json INTERFACE IMPORTED)
  target_include_directories(nlohmann_json::nlohmann_json INTERFACE ${PERFTRACKER_NLOHMANN_INCLUDE})
endif()

set(PERFTRACKER_BENCHMARKS OFF)
function(perftracker_test name)  # tests need the full build
endfunction()

set(PERFTRACKER_SRC ${PROJECT_SOURCE_DIR}/src)
add_subdirectory(src/perftracker/core)
add_subdirectory(src/perftracker/sources/python)
add_subdirectory(src/perftracker/sources/cupti)
add_subdirectory(src/perftracker/sources/nccl)
add_subdirectory(src/perftracker/detect)
add_subdirectory(src/perftracker/agent)
