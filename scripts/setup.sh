#!/usr/bin/env bash
# Sets perftracker up on a fresh Debian 12 machine and runs the main job: installs the
# build and test dependencies, builds (Release) into build/, and diagnoses the bundled
# example (a 4-rank torch job with a straggler on rank 2).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/deps.sh

perftracker_install_deps
# Warnings stay warnings here (a user's compiler may warn where ours does not);
# scripts/test.sh builds with -Werror.
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DPERFTRACKER_WERROR=OFF
cmake --build build -j "$(nproc)"

echo
echo "\$ build/src/perftracker/cli/perftracker diagnose examples/straggler"
build/src/perftracker/cli/perftracker diagnose examples/straggler
