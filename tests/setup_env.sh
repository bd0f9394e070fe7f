#!/usr/bin/env bash
# Builds the project's virtual environment (.venv in the repo root) from nothing; idempotent.
# torch is pinned: an unpinned torch pulls a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

REQUIREMENTS="torch==2.13.0 triton==3.6.0 hypothesis pytest numpy matplotlib"
STAMP=.venv/.setup-done
# pyproject.toml's hash: a changed project (e.g. its entry points) is installed again
WANTED="$REQUIREMENTS; pyproject $(sha256sum pyproject.toml | cut -c1-16)"
HAVE="$(cat "$STAMP" 2>/dev/null || true)"

if [[ "$HAVE" == "$WANTED" ]]; then
    echo "setup_env: .venv is up to date"
    exit 0
fi
if [[ ! -x .venv/bin/python ]]; then
    echo "setup_env: creating .venv"
    python3 -m venv .venv
fi
if [[ "${HAVE%%;*}" != "$REQUIREMENTS" ]]; then
    echo "setup_env: installing $REQUIREMENTS"
    # shellcheck disable=SC2086
    .venv/bin/python -m pip install -q $REQUIREMENTS
fi
echo "setup_env: installing the project (editable)"
.venv/bin/python -m pip install -q -e . --no-deps
echo "$WANTED" > "$STAMP"
echo "setup_env: done"
