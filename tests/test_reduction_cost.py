"""perf/reduction_cost.py: our SwiGLU forward and backward kernels ([4096, 14336]) and the
RMSNorm backward's kernels (dx, and dw's column sums; [4096, 4096]) at Llama-3-8B shapes, bf16,
compiled offline for sm_90, each move at least as many bytes per warp-instruction as
Liger-Kernel's `swiglu` and `rms_norm` backward kernels, every access at its proven width (16 B
along the rows; a row's [ROWS, 1] value is loaded per lane, 4 B). Liger's kernels are compiled
from its wheel where ../shared/wheels has it; elsewhere the higher of its numbers measured with
Liger-Kernel 0.8.5 on Triton 3.6 and 3.9 stands in."""

import pytest

from perf_modules import perf_module

# Liger-Kernel 0.8.5's kernels at the launch its wrappers make, B/warp-instr on Triton 3.6 / 3.9:
# _swiglu_forward_kernel 8.67 / 9.14, _swiglu_backward_kernel 9.74 / 10.09 (16384 columns, 32
# warps), _rms_norm_backward_kernel 11.07 / 11.07 (4096 columns, 8 warps, a loop over 32 rows
# per program: its loop's code 32 times, the rest once)
LIGER_MEASURED = {"swiglu forward": 9.14, "swiglu backward": 10.09, "rms backward": 11.07}


@pytest.mark.parametrize("key", sorted(LIGER_MEASURED))
def test_each_kernel_moves_at_least_ligers_bytes_per_warp_instruction(key, tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_EXEC_CACHE_DIR", str(tmp_path))
    module = perf_module("reduction_cost")
    [(name, _, fn, args, backward)] = [c for c in module.cases() if c[1] == key]
    ours = module.ours(fn, args, backward)
    [liger] = module.liger_rows_apart(key)
    bar = liger.bytes_per_issued if liger.cost is not None else LIGER_MEASURED[key]
    assert ours
    for row in ours:
        assert row.cost is not None, (row.kernel, row.note)
        elementwise = key.startswith("swiglu")      # no [ROWS, 1] value, no column sums
        assert set(row.widths["ld"]) == {16} if elementwise else {16} <= set(
            row.widths["ld"]) <= {16, 4}, row.widths
        # the dw column sums store a [1, 256] block, two columns per thread: 4 B of bf16, 8 B
        # of the fp32 partial sums over chunks of rows (`triton_exec.split_reductions`)
        assert set(row.widths["st"]) == {16} or not elementwise and row.widths["st"] in (
            {4: 1}, {8: 1}), row.widths
        assert row.bytes_per_issued >= bar, (name, row.kernel, row.cost.summary(), bar)
