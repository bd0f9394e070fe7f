#!/usr/bin/env bash
# THE test command (what .ci/run calls): sets up the venvs, then runs every test that needs no GPU
# through Triton's interpreter, once on the pinned Triton (.venv) and once on the newest
# (.venv-triton39). Extra arguments go to pytest; TRITON_EXEC_TEST_VENVS=.venv picks one.
# Works from any directory.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash tests/setup_env.sh
for venv in ${TRITON_EXEC_TEST_VENVS:-.venv .venv-triton39}; do
    echo "tests: Triton $("$venv"/bin/python -c 'import triton; print(triton.__version__)')"
    TRITON_INTERPRET=1 "$venv"/bin/python -m pytest -q -m "not gpu" "$@"
done
