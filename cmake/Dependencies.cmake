# Every dependency is checked up front; a missing one names the Debian package to install
# (dynolog's cryptic-build-error lesson). scripts/setup.sh installs them all.
function(perftracker_require found what package)
  if(NOT ${found})
    message(FATAL_ERROR "perftracker: ${what} not found. Install it with: "
                        "sudo apt-get install ${package}   (or run scripts/setup.sh)")
  endif()
endfunction()

find_package(Threads REQUIRED)
find_package(GTest QUIET)
perftracker_require(GTest_FOUND "GoogleTest" "libgtest-dev libgmock-dev")
find_package(benchmark QUIET)
perftracker_require(benchmark_FOUND "Google Benchmark" "libbenchmark-dev")
find_package(CLI11 QUIET)
perftracker_require(CLI11_FOUND "CLI11" "libcli11-dev")
find_package(fmt QUIET)
perftracker_require(fmt_FOUND "fmt" "libfmt-dev")
find_package(nlohmann_json QUIET)
perftracker_require(nlohmann_json_FOUND "nlohmann-json" "nlohmann-json3-dev")
find_package(ZLIB QUIET)
perftracker_require(ZLIB_FOUND "zlib" "zlib1g-dev")
find_package(Protobuf QUIET)
perftracker_require(Protobuf_FOUND "protobuf" "libprotobuf-dev protobuf-compiler")
# Not simdjson, though DESIGN.md named it: the Kineto importer's hand-written streaming field
# scanner parses each event once in place (no padded copy) at >= 300 MB/s per core with flat
# memory (docs/performance.md, "Import"), so simdjson would be an unused dependency.
