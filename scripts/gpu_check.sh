#!/usr/bin/env bash
# The GPU-path checks of docs/gpu-sources.md, on a machine with an NVIDIA GPU, the driver and
# a CUDA build of torch in `python3`: builds the agent for that Python (agent-only build),
# probes the host (NVML, CUPTI, NCCL plugin), then runs tests/e2e/live_job.py on the GPU
# under `perftracker run`:
#   A  4 ranks sharing the GPUs, gloo, rank 2 doing extra GPU work in Block2.forward
#   B  1 rank with NCCL (the profiler plugin is loaded by NCCL), a manual window
#   C  1 rank whose own torch.profiler records while a window opens (CUPTI backs off)
#   D  4 ranks, every rank reading each block's output with .item() (host_sync: the real
#      scenario scenarios/real/real-host-sync-all.json, expected PT-SYNC-CRITICAL)
# Every step goes on when one fails; everything lands in OUTDIR (log.txt, reports/).
#
#   scripts/gpu_check.sh PERFTRACKER_BINARY OUTDIR [extra cmake args for the agent build]
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PT=$(realpath "$1")
OUT=$(realpath -m "$2")
shift 2
mkdir -p "$OUT/reports"
exec > >(tee "$OUT/log.txt") 2>&1
step() { echo; echo "=== $* ($(date +%T))"; }
PY=$(command -v python3)

step "machine"
nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv
uname -r; g++ --version | head -1; cmake --version | head -1; "$PY" --version
"$PY" - <<'EOF'
import glob, os, torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())
print("nccl", torch.cuda.nccl.version())
import nvidia
for base in nvidia.__path__:
    for p in sorted(glob.glob(os.path.join(base, "*", "lib", "libcupti.so*")) +
                    glob.glob(os.path.join(base, "*", "lib", "libnccl.so*"))):
        print("lib", p)
EOF

step "agent-only build for $PY"
BUILD=build-gpu
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPERFTRACKER_AGENT_ONLY=ON \
  -DPERFTRACKER_WERROR=OFF -DPython3_EXECUTABLE="$PY" "$@" && cmake --build "$BUILD" -j 16
PLUGIN=$(realpath "$BUILD/src/perftracker/sources/nccl/libperftracker_nccl_profiler.so")
export PERFTRACKER_PYTHON_DIR=$(realpath "$BUILD/python")
export PERFTRACKER_NCCL_PLUGIN=$PLUGIN
ls -l "$PERFTRACKER_PYTHON_DIR/perftracker" "$PLUGIN"

step "perftracker probe"
"$PT" probe --interval-ms 500

step "A: 4 ranks on the GPU, gloo, slow GPU work on rank 2"
timeout 200 "$PT" run --report-dir "$OUT/reports/A" --window-seconds 5 --slowdown-ratio 0.15 \
  --trigger-at-seconds 40 --max-windows 2 -- \
  "$PY" tests/e2e/live_job.py --device cuda --fault slow_compute --fault-rank 2 \
  --width 1024 --batch 8192 --slow-repeats 40 --steps 2500 --fault-after-steps 150
echo "A exit $?"

step "B: 1 rank, NCCL with the profiler plugin, manual window"
NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV timeout 120 "$PT" run --report-dir "$OUT/reports/B" \
  --window-seconds 4 --trigger-at-seconds 10 --max-windows 1 -- \
  "$PY" tests/e2e/live_job.py --device cuda --backend nccl --world-size 1 --fault-rank 0 --sync allreduce \
  --width 1024 --batch 8192 --steps 3000 --step-sleep-ms 5 2>&1 | grep -v "^$" | tail -120
echo "B exit $?"

step "C: torch.profiler records while a window opens (CUPTI has one client)"
timeout 90 "$PT" run --report-dir "$OUT/reports/C" --window-seconds 3 --trigger-at-seconds 8 \
  --max-windows 1 -- "$PY" tests/e2e/live_job.py --device cuda --world-size 1 --fault-rank 0 \
  --width 1024 --batch 8192 --steps 2500 --step-sleep-ms 5 --torch-profiler 4:14
echo "C exit $?"

step "D: per-block .item() on every rank (host_sync)"
timeout 200 "$PT" run --report-dir "$OUT/reports/D" --window-seconds 5 --slowdown-ratio 0.15 \
  --max-windows 1 -- "$PY" tests/e2e/live_job.py --device cuda --fault host_sync \
  --width 1024 --batch 8192 --steps 2500 --fault-after-steps 150
echo "D exit $?"
ls -lR "$OUT/reports"
