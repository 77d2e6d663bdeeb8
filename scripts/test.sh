#!/usr/bin/env bash
# Runs every test: installs the dependencies (as scripts/setup.sh does), builds with
# AddressSanitizer + UndefinedBehaviorSanitizer into build-asan/, and runs all unit and
# end-to-end tests with CTest. Extra arguments go to ctest (e.g. -L e2e, -R kineto).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/deps.sh

start=$SECONDS
perftracker_install_deps
# ccache (CMakeLists.txt, PERFTRACKER_CCACHE): paths under this checkout are hashed relative to
# it, and not the build directory itself, so a clean clone elsewhere (CI's) reuses the objects
# of an earlier build of the same sources. Debug info then names the first build's directory.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DPERFTRACKER_SANITIZE=ON
cmake --build build-asan -j "$(nproc)"
built=$SECONDS

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

# The Kineto importer + offline summarizer + Perfetto export (checked against the Trace Event
# Format) under libFuzzer (ASan + UBSan) for a bounded time,
# seeded with fuzz_corpus/ (hostile times, durations, nesting). Needs clang; skipped
# without it or with PERFTRACKER_FUZZ_SECONDS=0. It runs beside ctest (one process, as a
# busy loop: the tests hold beside two), not after it: ~75 s less wall time
# (docs/performance.md, "Test suite time").
# Prints its one-line result.
run_fuzzer() {
  local seconds=$1
  if [ "$seconds" -le 0 ] || ! command -v clang++ >/dev/null 2>&1; then
    echo "skipped (no clang++ or PERFTRACKER_FUZZ_SECONDS=0)"
    return 0
  fi
  mkdir -p build-fuzz
  if ! { CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=Debug \
           -DPERFTRACKER_WERROR=OFF >build-fuzz/build.log 2>&1 &&
         cmake --build build-fuzz -j "$(nproc)" --target kineto_importer_fuzzer \
           >>build-fuzz/build.log 2>&1; }; then
    echo "FAILED to build (see build-fuzz/build.log)"
    return 1
  fi
  mkdir -p build-fuzz/corpus
  if build-fuzz/src/perftracker/sources/kineto/kineto_importer_fuzzer build-fuzz/corpus \
       src/perftracker/sources/kineto/fuzz_corpus -max_total_time="$seconds" \
       >build-fuzz/fuzz.log 2>&1; then
    echo "passed ($seconds s)"
  else
    echo "FAILED (see build-fuzz/fuzz.log)"
    return 1
  fi
}
mkdir -p build-fuzz
run_fuzzer "${PERFTRACKER_FUZZ_SECONDS:-60}" >build-fuzz/result.txt &
fuzz_pid=$!

rc=0
ctest --test-dir build-asan --output-on-failure -j "$(nproc)" "$@" \
  | tee build-asan/ctest-summary.log || rc=$?
wait "$fuzz_pid" || rc=1
fuzz_result=$(cat build-fuzz/result.txt)

echo
echo "==== perftracker test summary ===="
grep -E "tests passed|tests failed out of|Total Test time" build-asan/ctest-summary.log || true
grep -A100 "The following tests FAILED" build-asan/ctest-summary.log || true
echo "fuzzer (Kineto importer + summarizer + Perfetto export): $fuzz_result"
echo "build (ASan+UBSan): $((built - start)) s, tests: $((SECONDS - built)) s"
if [ "$rc" -eq 0 ]; then echo "RESULT: all tests passed"; else echo "RESULT: FAILED (exit $rc: ctest or the fuzzer)"; fi
exit "$rc"
