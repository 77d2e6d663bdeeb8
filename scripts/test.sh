#!/usr/bin/env bash
# Runs every test: installs the dependencies (as scripts/setup.sh does), builds with
# AddressSanitizer + UndefinedBehaviorSanitizer into build-asan/, and runs all unit and
# end-to-end tests with CTest. Extra arguments go to ctest (e.g. -L e2e, -R kineto).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/deps.sh

start=$SECONDS
perftracker_install_deps
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DPERFTRACKER_SANITIZE=ON
cmake --build build-asan -j "$(nproc)"
built=$SECONDS

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
rc=0
ctest --test-dir build-asan --output-on-failure -j "$(nproc)" "$@" \
  | tee build-asan/ctest-summary.log || rc=$?

echo
echo "==== perftracker test summary ===="
grep -E "tests passed|tests failed out of|Total Test time" build-asan/ctest-summary.log || true
grep -A100 "The following tests FAILED" build-asan/ctest-summary.log || true
echo "build (ASan+UBSan): $((built - start)) s, tests: $((SECONDS - built)) s"
if [ "$rc" -eq 0 ]; then echo "RESULT: all tests passed"; else echo "RESULT: FAILED (ctest exit $rc)"; fi
exit "$rc"
