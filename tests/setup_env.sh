#!/usr/bin/env bash
# Builds the project's virtual environments in the repo root from nothing; idempotent.
#   .venv            torch, the pinned Triton 3.6.0 (the GPU machine's), hypothesis, pytest, ...
#   .venv-triton39   the newest Triton the package index serves (3.9.0 today) over .venv: only
#                    Triton is installed in it; everything else comes from .venv's site-packages
# torch is pinned: an unpinned torch pulls a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

REQUIREMENTS="torch==2.13.0 triton==3.6.0 hypothesis==6.170.27 pytest==9.2.0 numpy==2.4.6 matplotlib==3.11.2"
# tests/test_dynamo.py's models (transformers' classes built from configs: nothing downloaded)
REQUIREMENTS="$REQUIREMENTS transformers==5.23.0 huggingface_hub==2.4.0 tokenizers==0.23.3 safetensors==0.8.0"
# tests/test_litgpt.py's models (LitGPT's GPT built from its Configs). Installed without their
# dependencies: litgpt 0.5.12 asks for huggingface_hub<0.35 (transformers above needs 2.x; the
# model code does not import it) and lightning's fsspec[http] pulls aiohttp; what importing
# litgpt needs is these pins plus the packages above
NO_DEPS="litgpt==0.5.12 lightning==2.6.6 pytorch-lightning==2.6.6 lightning-utilities==0.15.3"
NO_DEPS="$NO_DEPS torchmetrics==1.9.0 psutil==7.1.3"
# tests/test_timm.py's models (timm's classes built from small configs: nothing downloaded).
# Without torchvision: its PyPI wheels for torch 2.13 are CUDA builds whose import fails on the
# CPU torch, and resolving it would replace the pinned torch (tests/timm_import.py); timm's other
# dependencies (pyyaml, huggingface_hub, safetensors) come with transformers above
NO_DEPS="$NO_DEPS timm==1.0.31"
STAMP=.venv/.setup-done
# pyproject.toml's hash and the checkout's path: a changed project (e.g. its entry points) or a
# .venv now serving another checkout (its editable install points at the old path) installs again
WANTED="$REQUIREMENTS + no deps: $NO_DEPS; pyproject $(sha256sum pyproject.toml | cut -c1-16); at $(pwd -P)"
HAVE="$(cat "$STAMP" 2>/dev/null || true)"
NEWEST_TRITON="triton==3.9.0"

if [[ "$HAVE" == "$WANTED" ]]; then
    echo "setup_env: .venv is up to date"
else
    if [[ ! -x .venv/bin/python ]]; then
        echo "setup_env: creating .venv"
        python3 -m venv .venv
    fi
    if [[ "${HAVE%%;*}" != "${WANTED%%;*}" ]]; then
        echo "setup_env: installing $REQUIREMENTS, then without dependencies $NO_DEPS"
        # shellcheck disable=SC2086
        .venv/bin/python -m pip install -q $REQUIREMENTS
        # shellcheck disable=SC2086
        .venv/bin/python -m pip install -q --no-deps $NO_DEPS
    fi
    echo "setup_env: installing the project (editable)"
    # the distribution's name before it was triton-exec: two would both claim ir and triton_exec
    .venv/bin/python -m pip uninstall -q -y triton-exec-demo 2>/dev/null || true
    .venv/bin/python -m pip install -q -e . --no-deps
    echo "$WANTED" > "$STAMP"
fi

VENV39=.venv-triton39
if [[ -L .venv ]]; then     # .venv links to a shared venv (a git worktree): so does this one
    VENV39="$(readlink -f .venv)-triton39"
    ln -sfn "$VENV39" .venv-triton39
fi
if [[ -f "$VENV39/.setup-done" && "$(cat "$VENV39/.setup-done")" == "$NEWEST_TRITON" ]]; then
    echo "setup_env: .venv-triton39 is up to date"
else
    echo "setup_env: creating $VENV39 ($NEWEST_TRITON over .venv)"
    rm -rf "$VENV39"
    python3 -m venv "$VENV39"
    "$VENV39"/bin/python -m pip install -q --no-deps "$NEWEST_TRITON"
    echo "$NEWEST_TRITON" > "$VENV39/.setup-done"
fi
# .venv's packages after the venv's own (a .pth line is appended to sys.path): its Triton wins.
# The real path: a path through a worktree's .venv link dies with that worktree.
base=$(readlink -f "$(.venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")")
own=$("$VENV39"/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
if [[ "$(cat "$own/zz_base_venv.pth" 2>/dev/null || true)" != "$base" ]]; then
    echo "setup_env: $VENV39 reads .venv's packages from $base"
    echo "$base" > "$own/zz_base_venv.pth.$$" && mv "$own/zz_base_venv.pth.$$" "$own/zz_base_venv.pth"
fi
echo "setup_env: done"
