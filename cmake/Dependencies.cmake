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
find_package(gRPC CONFIG QUIET)
perftracker_require(gRPC_FOUND "gRPC" "libgrpc++-dev protobuf-compiler-grpc")
find_program(PERFTRACKER_GRPC_CPP_PLUGIN grpc_cpp_plugin)
perftracker_require(PERFTRACKER_GRPC_CPP_PLUGIN "grpc_cpp_plugin" "protobuf-compiler-grpc")
find_package(SQLite3 QUIET)
perftracker_require(SQLite3_FOUND "SQLite" "libsqlite3-dev")
find_package(prometheus-cpp CONFIG QUIET)
perftracker_require(prometheus-cpp_FOUND "prometheus-cpp" "prometheus-cpp-dev")
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(HTTPLIB IMPORTED_TARGET cpp-httplib)
endif()
perftracker_require(HTTPLIB_FOUND "cpp-httplib" "libcpp-httplib-dev")
# The HTTP server drives TLS handshakes itself (non-blocking, off the handler threads).
find_package(OpenSSL QUIET)
perftracker_require(OpenSSL_FOUND "OpenSSL" "libssl-dev")

# libpq: the PostgreSQL store (server/postgres/), which lets several servers share one
# database. Optional: without it perftracker builds with the SQLite store only, and
# `--store postgresql://...` says how to get it.
if(PkgConfig_FOUND)
  pkg_check_modules(LIBPQ IMPORTED_TARGET libpq)
endif()
if(LIBPQ_FOUND)
  set(PERFTRACKER_POSTGRES ON)
else()
  set(PERFTRACKER_POSTGRES OFF)
  message(STATUS "perftracker: libpq not found: building without the PostgreSQL store, its "
                 "tests skipped (sudo apt-get install libpq-dev postgresql)")
endif()
