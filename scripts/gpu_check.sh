#!/usr/bin/env bash
# The GPU-path checks of docs/gpu-sources.md, in one command on a machine with an NVIDIA GPU,
# its driver and a CUDA build of torch in `python3` (the lent machine: torch 2.11, CUDA 13,
# Python 3.12, CUPTI and NCCL wheels, one H100 / H200). About 5 minutes; each step has its own
# time limit and the next one runs whatever happened:
#
#   machine     nvidia-smi, torch / CUDA / NCCL versions, the CUPTI and NCCL libraries
#   build       the agent for that Python (agent-only build, warnings as errors)
#   torch-api   python/tests/test_torch_api.py on that torch: the entry point each hook
#               chose (the torch 2.x ones: global optimizer step hooks, ...), nothing missing
#   agent       python/tests/test_agent.py on that torch (DDP comm hook, collectives, ...)
#   nvml        `perftracker probe`: the GPUs and their NVML metric values
#   gpu-job     tests/e2e/live_job.py on cuda:0, NCCL with world size 1, under `perftracker
#               run` with a window: CUPTI's kernels, copies and launches in the window's
#               summaries (window-report), the NCCL profiler plugin's operations (nccl-plugin)
#   profiler    the job's own torch.profiler records while a window opens: CUPTI backs off
#               with one line ("GPU tracing skipped")
#   profiler-during  torch.profiler starts while a window traces the GPU: the agent gives
#               CUPTI up first (one line), Kineto finds it free
#   kineto      a torch GPU Kineto trace (scripts/gpu_kineto_trace.py) through `perftracker
#               diagnose`: device work imported, no event lost
#   --full adds the two 4-rank jobs of the first version of this script (slow GPU work on one
#   rank; per-block .item() on every rank), ~6 more minutes.
#
#   scripts/gpu_check.sh [--dry-run] [--full] PERFTRACKER OUTDIR [extra cmake args for the agent]
#   scripts/gpu_check.sh --bundle PERFTRACKER DIR [AGENT_BUILD_DIR]
#
# PERFTRACKER: the perftracker binary, or `build` to build it there (build-gpu-cli/, target
# perftracker; needs the build dependencies of scripts/deps.sh on that machine). A binary
# built elsewhere needs its shared libraries (gRPC, abseil, protobuf, libpq, ...): --bundle
# copies the binary to DIR/perftracker and every library it loads, except glibc's and the C++
# runtime, to DIR/lib (~30 MiB plus the binary), which this script then puts on
# LD_LIBRARY_PATH for perftracker (and so for the jobs it starts). The target's glibc must
# be at least the build machine's (Debian 12: 2.36). --bundle also copies the nlohmann-json
# headers (the agent-only build's one dependency beyond a compiler, CMake and the Python
# headers; the script passes them to that build) and, given an agent-only build folder made
# here for the target's Python, that agent, which the checks use when the agent does not
# build there.
# Everything lands in OUTDIR: log.txt (all output), one <step>.log per step, summary.txt
# (one PASS / FAIL line per check), reports/, kineto/. Exit status 0 when every check passed.
# --dry-run prints the steps' commands into OUTDIR/plan.txt and runs none of them (the test
# gpu_check_script checks it, with `bash -n` and the checks of scripts/gpu_check_verify.py).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2

DRY=0
FULL=0
BUNDLE=0
while [[ $# -gt 0 && $1 == --* ]]; do
  case $1 in
    --dry-run) DRY=1 ;;
    --full) FULL=1 ;;
    --bundle) BUNDLE=1 ;;
    *) echo "gpu_check: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
if [[ $# -lt 2 ]]; then
  echo "usage: scripts/gpu_check.sh [--dry-run] [--full] PERFTRACKER|build OUTDIR [cmake args]" >&2
  exit 2
fi
if [[ $BUNDLE == 1 ]]; then
  [[ -x $1 ]] || { echo "gpu_check: --bundle: $1 is not an executable" >&2; exit 2; }
  mkdir -p "$2/lib" && cp -L "$1" "$2/perftracker" || exit 1
  ldd "$1" | awk '/=> \//{print $3}' |
    grep -v -E '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt|libresolv|libanl|libnsl|libutil|libasan|libubsan)\.so' |
    while read -r lib; do cp -L "$lib" "$2/lib/"; done
  # The agent-only build's one header-only dependency, which that machine may lack.
  for inc in /usr/include /usr/local/include; do
    if [[ -f $inc/nlohmann/json.hpp ]]; then mkdir -p "$2/include" && cp -r "$inc/nlohmann" "$2/include/"; break; fi
  done
  # An agent built here for that machine's Python (an agent-only build folder): used there
  # only when the agent does not build on that machine.
  if [[ $# -ge 3 ]]; then
    [[ -d $3/python/perftracker ]] || { echo "gpu_check: --bundle: $3 is not an agent build folder (no python/perftracker)" >&2; exit 2; }
    mkdir -p "$2/agent/python" "$2/agent/src/perftracker/sources/nccl" &&
      cp -rL "$3/python/perftracker" "$2/agent/python/" &&
      cp -L "$3/src/perftracker/sources/nccl/libperftracker_nccl_profiler.so" "$2/agent/src/perftracker/sources/nccl/" || exit 1
    find "$2/agent" -name __pycache__ -prune -exec rm -rf {} +
  fi
  echo "gpu_check: $2/perftracker and $(find "$2/lib" -type f | wc -l) libraries in $2/lib ($(du -sh "$2" | cut -f1))"
  exit 0
fi
PT_ARG=$1
OUT=$(realpath -m "$2")
shift 2
CMAKE_EXTRA=("$@")
BUNDLE_DIR=$(dirname "$(realpath -m "$PT_ARG")")
if [[ $PT_ARG != build && -f $BUNDLE_DIR/include/nlohmann/json.hpp ]]; then
  CMAKE_EXTRA+=("-DCMAKE_PREFIX_PATH=$BUNDLE_DIR")  # the bundle's nlohmann-json headers
fi
mkdir -p "$OUT/reports" "$OUT/kineto"
PY=${PYTHON:-$(command -v python3 || echo python3)}
BUILD=build-gpu
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
if [[ $DRY == 1 ]]; then
  : > "$OUT/plan.txt"
else
  exec > >(tee "$OUT/log.txt") 2>&1
fi

# step NAME SECONDS CMD...: runs CMD (a bash snippet) with a time limit, its output in
# OUT/NAME.log and on the terminal; records "PASS NAME" / "FAIL NAME (exit N)" unless the
# step's own checks do (quiet=1 before the call: only the log).
step() {
  local name=$1 limit=$2
  shift 2
  if [[ $DRY == 1 ]]; then
    printf '%s (%ss):\n%s\n' "$name" "$limit" "$*" >> "$OUT/plan.txt"
    return 0
  fi
  echo
  echo "=== $name ($(date +%T), at most ${limit}s)"
  timeout --kill-after=10 "$limit" bash -c "$*" 2>&1 | tee "$OUT/$name.log"
  local rc=${PIPESTATUS[0]}
  if [[ ${quiet:-0} != 1 ]]; then
    if [[ $rc == 0 ]]; then echo "PASS $name" >> "$SUMMARY"; else echo "FAIL $name (exit $rc)" >> "$SUMMARY"; fi
  fi
  return "$rc"
}

# verify CHECK ARGS...: scripts/gpu_check_verify.py's check; its last line goes to the summary.
verify() {
  if [[ $DRY == 1 ]]; then
    printf 'verify %s\n' "$*" >> "$OUT/plan.txt"
    return 0
  fi
  local out
  out=$("$PY" scripts/gpu_check_verify.py "$@" 2>&1)
  echo "$out"
  echo "$out" | tail -1 >> "$SUMMARY"
}

quiet=1 step machine 60 "
nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv
uname -r; g++ --version | head -1; cmake --version | head -1; '$PY' --version
'$PY' - <<'EOF'
import glob, os, torch
print('torch', torch.__version__, 'cuda', torch.version.cuda, 'gpus', torch.cuda.device_count())
print('nccl', torch.cuda.nccl.version())
import nvidia
for base in nvidia.__path__:
    for p in sorted(glob.glob(os.path.join(base, '*', 'lib', 'libcupti.so*')) +
                    glob.glob(os.path.join(base, '*', 'lib', 'libnccl.so*'))):
        print('lib', p)
EOF"

step build 300 "
cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release -DPERFTRACKER_AGENT_ONLY=ON \
  -DPERFTRACKER_WERROR=ON -DPython3_EXECUTABLE='$PY' ${CMAKE_EXTRA[*]} > $OUT/cmake.log &&
cmake --build $BUILD -j \$(nproc) &&
ls -l $BUILD/python/perftracker $BUILD/src/perftracker/sources/nccl/libperftracker_nccl_profiler.so"
if [[ $? != 0 && $DRY == 0 && $PT_ARG != build && -d $BUNDLE_DIR/agent/python/perftracker ]]; then
  BUILD=$BUNDLE_DIR/agent
  echo "gpu_check: the agent did not build here (build.log); the GPU checks use the bundle's prebuilt agent in $BUILD"
  echo "NOTE build: the checks below ran the bundle's prebuilt agent" >> "$SUMMARY"
fi

if [[ $PT_ARG == build ]]; then
  step build-perftracker 420 "
cmake -S . -B build-gpu-cli -G Ninja -DCMAKE_BUILD_TYPE=Release -DPERFTRACKER_WERROR=OFF \
  -DPERFTRACKER_BENCHMARKS=OFF > $OUT/cmake-cli.log &&
cmake --build build-gpu-cli -j \$(nproc) --target perftracker"
  PT=$(realpath -m build-gpu-cli/src/perftracker/cli/perftracker)
else
  PT=$(realpath -m "$PT_ARG")
fi
PT_LIB=$(dirname "$PT")/lib
if [[ -d $PT_LIB ]]; then  # a --bundle
  LD_LIBRARY_PATH=$PT_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export LD_LIBRARY_PATH
fi
PERFTRACKER_PYTHON_DIR=$(realpath -m "$BUILD/python")
PERFTRACKER_NCCL_PLUGIN=$(realpath -m "$BUILD/src/perftracker/sources/nccl/libperftracker_nccl_profiler.so")
export PERFTRACKER_PYTHON_DIR PERFTRACKER_NCCL_PLUGIN
TESTENV="PYTHONPATH=$PERFTRACKER_PYTHON_DIR PYTHONDONTWRITEBYTECODE=1"

quiet=1 step probe 60 "'$PT' probe --interval-ms 500"
verify nvml "$OUT/probe.log"

# One rank on cuda:0 with NCCL (world size 1): an explicit all-reduce per step goes through
# NCCL, which loads perftracker's profiler plugin; a window 10 s in records 4 s of it.
quiet=1 step gpu-job 180 "
NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,PROFILE '$PT' run --report-dir $OUT/reports/gpu-job \
  --window-seconds 4 --trigger-at-seconds 10 --max-windows 1 -- \
  '$PY' tests/e2e/live_job.py --device cuda --backend nccl --world-size 1 --fault-rank 0 \
  --sync allreduce --width 1024 --batch 1024 --steps 1500 --step-sleep-ms 5"
verify window-report "$OUT/reports/gpu-job"
verify nccl-plugin "$OUT/reports/gpu-job" "$OUT/gpu-job.log"

# --torch-profiler counts from the job's first step, --trigger-at-seconds from the rank's
# start, and the job needs several seconds before its first step (CUDA, NCCL, the dataset):
# on the H200 (2026-11-27) a window at 8 s opened before a profiler from 4 s. The profiler
# now records from 1 s to 40 s after the first step, and the window opens 20 s in.
quiet=1 step profiler 120 "
'$PT' run --report-dir $OUT/reports/profiler --window-seconds 3 --trigger-at-seconds 20 --slowdown-ratio 100 \
  --max-windows 1 -- '$PY' tests/e2e/live_job.py --device cuda --world-size 1 --fault-rank 0 \
  --width 1024 --batch 1024 --steps 2000 --step-sleep-ms 5 --torch-profiler 1:40"
if [[ $DRY == 1 ]]; then
  echo "grep 'GPU tracing skipped' profiler.log" >> "$OUT/plan.txt"
elif grep -q "GPU tracing skipped" "$OUT/profiler.log"; then
  echo "PASS profiler: CUPTI backed off while torch.profiler recorded" >> "$SUMMARY"
else
  echo "FAIL profiler: no 'GPU tracing skipped' line" >> "$SUMMARY"
fi

# The other order: a torch.profiler session that starts while a window traces the GPU gets
# CUPTI (the agent's tracing stops first, one line), and Kineto initializes without
# CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED (what it printed on the H200, 2026-11-27,
# before the agent yielded). A 20 s window from 3 s after the rank started covers the
# profiler's 6-9 s after the first step.
quiet=1 step profiler-during 120 "
'$PT' run --report-dir $OUT/reports/profiler-during --window-seconds 20 --trigger-at-seconds 3 \
  --slowdown-ratio 100 --max-windows 1 -- '$PY' tests/e2e/live_job.py --device cuda --world-size 1 \
  --fault-rank 0 --width 1024 --batch 1024 --steps 2000 --step-sleep-ms 5 --torch-profiler 6:9"
if [[ $DRY == 1 ]]; then
  echo "grep 'torch.profiler started during a window' profiler-during.log" >> "$OUT/plan.txt"
elif grep -q "MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED" "$OUT/profiler-during.log"; then
  echo "FAIL profiler-during: Kineto found CUPTI taken (MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)" >> "$SUMMARY"
elif grep -q "torch.profiler started during a window" "$OUT/profiler-during.log"; then
  echo "PASS profiler-during: the window's GPU tracing gave CUPTI to torch.profiler" >> "$SUMMARY"
else
  echo "FAIL profiler-during: no 'torch.profiler started during a window' line (did the profiler run inside the window?)" >> "$SUMMARY"
fi

quiet=1 step kineto 180 "
'$PY' scripts/gpu_kineto_trace.py $OUT/kineto &&
'$PT' diagnose --format json $OUT/kineto/rank0.json > $OUT/kineto/diagnose.json"
verify kineto "$OUT/kineto/diagnose.json" "$OUT/kineto/rank0.json"

# The agent's own tests on that torch come after the GPU checks: they need no GPU, and a
# short device lease is better spent on what only that machine can show.
step torch-api 120 "$TESTENV '$PY' -m unittest discover -s python/tests -p test_torch_api.py -v"
step agent 300 "$TESTENV '$PY' -m unittest discover -s python/tests -p test_agent.py -v"

if [[ $FULL == 1 ]]; then
  step slow-rank 240 "
'$PT' run --report-dir $OUT/reports/slow-rank --window-seconds 5 --slowdown-ratio 0.15 \
  --trigger-at-seconds 40 --max-windows 2 -- \
  '$PY' tests/e2e/live_job.py --device cuda --fault slow_compute --fault-rank 2 \
  --width 1024 --batch 1024 --slow-repeats 40 --steps 2500 --fault-after-steps 150"
  step host-sync 240 "
'$PT' run --report-dir $OUT/reports/host-sync --window-seconds 5 --slowdown-ratio 0.15 \
  --max-windows 1 -- '$PY' tests/e2e/live_job.py --device cuda --fault host_sync \
  --width 1024 --batch 1024 --steps 2500 --fault-after-steps 150"
fi

if [[ $DRY == 1 ]]; then
  cat "$OUT/plan.txt"
  exit 0
fi
echo
echo "=== summary ($OUT/summary.txt)"
cat "$SUMMARY"
! grep -q '^FAIL' "$SUMMARY"
