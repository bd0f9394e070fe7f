#!/usr/bin/env bash
# The demo (the README's main-job command): sets up .venv, then on the seed's RoPE (small through
# the Triton interpreter on a CPU, the seed's size on a GPU) prints the prologue, the computation
# traces, the generated kernel, its vector widths and the access widths from PTX (offline sm_90),
# then the small GPT jitted as a module (a training step vs eager, its fusion groups and kernel
# counts), and writes the autotune report. Extra arguments go to `python -m triton_exec demo`
# (e.g. --out DIR, default perf/out/report).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash tests/setup_env.sh
exec .venv/bin/python -m triton_exec demo "$@"
