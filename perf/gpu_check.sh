#!/usr/bin/env bash
# The GPU check: one script for one H100/H200 with no network (torch 2.11, Triton 3.6,
# Python 3.12; the project copied in as a working tree, not installed; nothing is pip-installed).
#
#   bash perf/gpu_check.sh            # logs and the report under $OUT (default perf/out)
#
# Steps, each under its own time limit (the limits add up to 595 s, so the whole fits in 10 minutes):
#   nvidia-smi and versions; CUDA correctness (perf/cuda_check.py: the RoPE, pad/cat/slice and
#   random programs on CUDA tensors vs eager, fp16/bf16 chains bit for bit; compiled Triton); the benchmarks (rope, padcat,
#   overhead, the small GPT's training step, the decoder layer against eager and inductor); one autotune report of the seed's RoPE; the pytest
#   suite's correctness cases.
# A step that fails or runs out of time is reported and the next one runs; the exit status is
# the number of failed steps.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT="${OUT:-perf/out}"
mkdir -p "$OUT"
PY="${PYTHON:-python}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export TRITON_EXEC_CACHE_DIR="${TRITON_EXEC_CACHE_DIR:-$OUT/cache}"   # kernels + tuning winners
unset TRITON_INTERPRET
failed=0
summary="$OUT/summary.txt"
: > "$summary"

step() {   # step NAME SECONDS COMMAND...
    local name=$1 limit=$2 start rc
    shift 2
    start=$(date +%s)
    echo "== $name (limit ${limit}s): $*" | tee -a "$summary"
    timeout --kill-after=10 "$limit" "$@" > "$OUT/$name.log" 2>&1
    rc=$?
    local took=$(( $(date +%s) - start ))
    if [[ $rc -eq 0 ]]; then
        echo "   ok in ${took}s -> $OUT/$name.log" | tee -a "$summary"
    else
        [[ $rc -eq 124 || $rc -eq 137 ]] && rc="$rc (timed out)"
        echo "   FAILED rc=$rc in ${took}s -> $OUT/$name.log" | tee -a "$summary"
        tail -n 15 "$OUT/$name.log" | sed 's/^/   | /' | tee -a "$summary"
        failed=$((failed + 1))
    fi
}

echo "gpu_check $(date -u +%Y-%m-%dT%H:%M:%SZ) in $PWD, OUT=$OUT" | tee -a "$summary"
step nvidia-smi 15 nvidia-smi
step versions 30 "$PY" -c "import sys, torch, triton; print(sys.version); print('torch', torch.__version__, 'triton', triton.__version__); print(torch.cuda.get_device_name(), torch.cuda.get_device_capability())"
# correctness on CUDA: heuristic configs (no tuning), so that it is quick
step cuda_check 100 env TRITON_EXEC_AUTOTUNE=0 "$PY" perf/cuda_check.py --examples 20
# benchmarks: tuning on (the executor's default on a GPU), a smaller config space (4: the
# heuristic and its narrower VECs for bf16). The step limits are estimates: never yet run on a GPU.
# Liger-Kernel's RoPE (a row of the forward + backward table): its wheel, installed with
# --no-deps into $OUT/liger (not into the environment), from ../shared/wheels or shared/wheels
liger_wheel=$(ls ../shared/wheels/liger_kernel-*.whl shared/wheels/liger_kernel-*.whl 2>/dev/null | head -1)
liger_path=""
if [[ -n "$liger_wheel" ]] && "$PY" -m pip install -q --no-deps --target "$OUT/liger" "$liger_wheel" \
        > "$OUT/liger_install.log" 2>&1; then
    liger_path="$OUT/liger"
fi
step bench_rope 135 env TRITON_EXEC_AUTOTUNE_MAX_CONFIGS=4 PYTHONPATH="$PYTHONPATH${liger_path:+:$liger_path}" "$PY" perf/rope.py
step bench_padcat 80 env TRITON_EXEC_AUTOTUNE_MAX_CONFIGS=4 "$PY" perf/padcat.py
step bench_overhead 50 env TRITON_EXEC_AUTOTUNE_MAX_CONFIGS=4 "$PY" perf/overhead.py --seed-size
# the GPT's forward + backward with heuristic configs (tuning its ~30 kernels would not fit)
step bench_gpt 60 env TRITON_EXEC_AUTOTUNE=0 "$PY" perf/gpt.py
# the Llama-style decoder layer: memory-bound kernels per call against eager's, and its forward
# and forward + backward against eager and inductor (values, times)
step bench_decoder_layer 60 env TRITON_EXEC_AUTOTUNE=0 "$PY" perf/decoder_layer.py
# whole models through eager, inductor and torch.compile with our backend (perf/models.py: a
# Llama-3-8B-shaped layer, bf16); opt-in, as its inductor compiles do not fit the 9 minutes
if [[ "${GPU_CHECK_MODELS:-0}" == 1 ]]; then
    step bench_models 120 env TRITON_EXEC_AUTOTUNE=0 "$PY" perf/models.py --calls 3
fi
step report 40 "$PY" -m triton_exec report --out "$OUT/report"
# the test suite's correctness cases (interpreter, CPU tensors) with what time is left
# (pytest-xdist spreads it over 8 processes where it is installed, as on the H200 image)
xdist=$("$PY" -c "import xdist" 2>/dev/null && echo "-n 8")
step pytest 25 env TRITON_INTERPRET=1 "$PY" -m pytest -q --maxfail=5 -m "not slow" -p no:cacheprovider $xdist

for log in bench_rope bench_padcat bench_overhead bench_gpt bench_decoder_layer bench_models; do
    [[ -f "$OUT/$log.log" ]] && { echo; echo "---- $log"; grep -E '^(\||##|[A-Z])' "$OUT/$log.log"; } >> "$summary"
done
echo "gpu_check done: $failed failed step(s); summary in $summary"
exit "$failed"
