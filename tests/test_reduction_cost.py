"""perf/reduction_cost.py: our SwiGLU forward and backward kernels at Llama-3-8B shapes (bf16,
[4096, 14336]), compiled offline for sm_90, move at least as many bytes per warp-instruction as
Liger-Kernel's `swiglu` kernels, every access at its proven width (16 B). Liger's kernels are
compiled from its wheel where ../shared/wheels has it; elsewhere the higher of its numbers
measured with Liger-Kernel 0.8.5 on Triton 3.6 and 3.9 stands in."""

import importlib.util
import sys
from pathlib import Path

import pytest

PERF = Path(__file__).resolve().parent.parent / "perf"
# Liger-Kernel 0.8.5's _swiglu_forward_kernel / _swiglu_backward_kernel (16384 columns, 32 warps):
# 8.67 and 9.74 B/warp-instr compiled by Triton 3.6, 9.14 and 10.09 by Triton 3.9
LIGER_MEASURED = {"swiglu forward": 9.14, "swiglu backward": 10.09}


def load():
    spec = importlib.util.spec_from_file_location("perf_reduction_cost", PERF / "reduction_cost.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module         # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("key", sorted(LIGER_MEASURED))
def test_swiglu_moves_at_least_ligers_bytes_per_warp_instruction(key, tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_EXEC_CACHE_DIR", str(tmp_path))
    module = load()
    [(name, _, fn, args, backward)] = [c for c in module.cases() if c[1] == key]
    [ours] = module.ours(fn, args, backward)
    assert ours.cost is not None, ours.note
    assert ours.widths["ld"] == {16: ours.widths["ld"][16]} and ours.widths["ld"][16] > 0
    assert ours.widths["st"] == {16: ours.widths["st"][16]} and ours.widths["st"][16] > 0
    [liger] = module.liger_rows_apart(key)
    bar = liger.bytes_per_issued if liger.cost is not None else LIGER_MEASURED[key]
    assert ours.bytes_per_issued >= bar, (name, ours.kernel, ours.cost.summary(), bar)
