#!/usr/bin/env bash
# Sets perftracker up on a fresh Debian 12 machine and runs the main job: installs the
# build and test dependencies, builds (Release) into build/, then runs the bundled live demo
# (examples/live: a real 4-rank torch job whose rank 2 turns into a straggler after 80 steps)
# under `perftracker run`, which notices the slowdown, profiles a window on every rank and
# prints the diagnosis (about 40 s on a 2-core machine).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/deps.sh

perftracker_install_deps
# Warnings stay warnings here (a user's compiler may warn where ours does not);
# scripts/test.sh builds with -Werror.
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DPERFTRACKER_WERROR=OFF
cmake --build build -j "$(nproc)"

demo=(build/src/perftracker/cli/perftracker run --report-dir perftracker-reports
      --slowdown-ratio 0.15 --window-seconds 10 --
      /usr/bin/python3 examples/live/train.py --fault slow_compute --fault-rank 2)
echo
echo "\$ ${demo[*]}"
"${demo[@]}"
