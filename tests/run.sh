#!/usr/bin/env bash
# THE test command: sets up .venv, then runs every test that needs no GPU through Triton's interpreter.
# Extra arguments go to pytest. Works from any directory.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash tests/setup_env.sh
TRITON_INTERPRET=1 .venv/bin/python -m pytest -q -m "not gpu" "$@"
