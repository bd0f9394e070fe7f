"""2-D tiles for transposes: a load contiguous along an outer dim of the output (NHWC read into
NCHW, `x.permute(0, 2, 1).contiguous()`) is wide along the tile's rows, the stores along its
columns, each access's width and axis stated by the analysis (`Access.axis`).

Over generated permutes of rank 2-4 with elementwise work before and after (an operand in the
output's layout, a per-channel scale broadcast along the others), in fp32 and bf16 and both
cache modes, on inputs laid out contiguous, at an offset, permuted or strided: the values and
gradients are eager's bit for bit, every access's width is the compiled kernel's (sm_90, read
per access from the LLVM IR; `test_record_widths.check_widths`), and on contiguous inputs
without size-1 dims each load and store is as wide as the contiguous extent on its own side
allows: 16 bytes where it is a multiple of the vector, the loads along the rows and the stores
along the columns (an output ending in 2 is tiled by pairs, whose transposed loads the analysis
leaves to Triton). The soak (150 examples passed on Triton 3.6):
TRANSPOSE_EXAMPLES=300 HYPOTHESIS_PROFILE=explore bash tests/run.sh tests/test_transpose_tiles.py
"""
import math
import os

import pytest
import torch
from hypothesis import event, given, note, settings
from hypothesis import strategies as st

import ir
import triton_exec
from triton_exec import autotune, launch
from programs import transpose_program, transposes
from semantics import assert_bits_equal, laid_out
from test_record_widths import check_widths

EXAMPLES = int(os.environ.get("TRANSPOSE_EXAMPLES", "8"))
MODES = ("constant values", "symbolic values")


def _pow2(n: int) -> int:
    return n & -n


def _expected_width(extent: int, itemsize: int) -> int:
    """The widest access along a contiguous extent: 16 bytes, or as many elements as divide it."""
    return 1 if extent == 1 else math.gcd(16 // itemsize, _pow2(extent))


@settings(max_examples=EXAMPLES)
@given(case=transposes(), mode=st.sampled_from(MODES), contiguous=st.booleans(), data=st.data())
def test_transposes_are_wide_on_both_sides(case, mode, contiguous, data):
    shape, perm, dtype, scaled, added = case
    g = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=g).to(dtype)
    x = x if contiguous else data.draw(laid_out(x))
    gamma = torch.randn(shape[-1], generator=g).to(dtype)
    out_shape = tuple(shape[p] for p in perm)
    other = torch.randn(out_shape, generator=g).to(dtype)
    note(f"{shape} {perm} {dtype} stride {x.stride()} scaled {scaled} added {added} {mode}")
    fn = transpose_program(perm, scaled, added)
    jfn = ir.jit(fn, executors=["triton"], cache=mode)
    x.requires_grad_()
    expected, result = fn(x, gamma, other), jfn(x, gamma, other)
    assert_bits_equal(result, expected)
    dy = torch.randn(out_shape, generator=g).to(dtype)
    (want,) = torch.autograd.grad(expected, x, dy)
    (got,) = torch.autograd.grad(result, x, dy)
    assert_bits_equal(got, want)
    for record in triton_exec.last_kernels(jfn):
        event(f"{record.direction}: row axis {record.lowered.row_axis is not None}")
        for seen in check_widths(record):
            event(seen)
    forward = [r for r in triton_exec.last_kernels(jfn) if r.direction == "forward"]
    # size-1 dims move nothing; an output ending in 2 is tiled by pairs (`pairs`), whose
    # transposed loads the analysis leaves to Triton (`check_widths`)
    if not contiguous or min(shape) == 1 or out_shape[-1] == 2 or len(forward) != 1:
        return
    (record,) = forward
    assert record.vector_width == record.analysis_width, record.source
    itemsize = x.element_size()
    for access in record.lowered.accesses:
        if access.tensor == "x":            # contiguous along its innermost dim
            assert access.width == _expected_width(shape[-1], itemsize), (access, record.source)
            if access.width > 1:
                assert access.axis == "rows" and record.lowered.row_axis is not None
        elif access.kind == "store":        # contiguous along the output's inner dims (more
            # than the innermost where they are also contiguous in x: merged)
            assert access.width % _expected_width(out_shape[-1], itemsize) == 0, (
                access, record.source)
            assert access.axis == "cols"


def convnext_tail(shortcut, y, gamma):
    """ConvNeXt's block tail: the NHWC branch scaled per channel, added to the NCHW shortcut."""
    return shortcut + (y * gamma).permute(0, 3, 1, 2)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_convnext_tail_is_one_2d_tile_at_16_bytes(dtype, mode):
    g = torch.Generator().manual_seed(0)
    shortcut = torch.randn(2, 32, 8, 8, generator=g).to(dtype)
    y = torch.randn(2, 8, 8, 32, generator=g).to(dtype)
    gamma = torch.randn(32, generator=g).to(dtype)
    jfn = ir.jit(convnext_tail, executors=["triton"], cache=mode)
    assert_bits_equal(jfn(shortcut, y, gamma), convnext_tail(shortcut, y, gamma))
    (record,) = triton_exec.last_kernels(jfn)
    assert record.lowered.row_axis == 1            # ROWS walk the channels fastest
    axes = record.lowered.vector_axis
    assert axes["load 1 y (plain)"] == "rows" and axes["store 3 t3 (output)"] == "cols"
    widths = record.access_widths(arch=90)
    assert set(widths["ld"]) == {16} and set(widths["st"]) == {16}, widths
    assert record.vector_width == record.analysis_width


def test_a_2d_tile_keeps_rows_for_its_loads_along_the_rows():
    """The launch heuristic and the autotuner's space keep ROWS at least the widest load along
    the rows (a thread holds a vector along them), COLS at most `TRANSPOSE_COLS`."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 4, 64, 32, generator=g).bfloat16()
    jfn = ir.jit(lambda x: (x * 2).permute(0, 3, 1, 2).contiguous(), executors=["triton"])
    assert_bits_equal(jfn(x), (x * 2).permute(0, 3, 1, 2).contiguous())
    (record,) = triton_exec.last_kernels(jfn)
    row_width = max(a.width for a in record.lowered.accesses if a.axis == "rows")
    assert row_width == 8 and record.config.rows >= 8
    assert record.config.cols <= launch.TRANSPOSE_COLS
    space = autotune.config_space(record.config, 2 * 32 * 4, 8, 64, min_rows=row_width)
    assert len(space) > 1 and all(c.rows >= row_width for c in space)
    assert any(c.rows < row_width for c in autotune.config_space(record.config, 2 * 32 * 4, 8, 64))


def test_a_broadcast_scale_does_not_make_a_2d_tile():
    """A per-channel scale broadcast over an NCHW tensor is contiguous along the channels, an
    outer dim, but small (read from cache): the rows keep their order, the tile its columns."""
    x, w = torch.randn(2, 8, 4, 16), torch.randn(8)
    fn = lambda x, w: x * w[:, None, None] + 1       # noqa: E731
    jfn = ir.jit(fn, executors=["triton"])
    assert_bits_equal(jfn(x, w), fn(x, w))
    (record,) = triton_exec.last_kernels(jfn)
    assert record.lowered.row_axis is None
    assert record.vector_width == record.analysis_width


CHANNELS_LAST = {
    "contiguous copy": lambda x, s, w: (x * 2 + 1).contiguous(),
    "plus an NCHW operand": lambda x, s, w: x * 2 + s,
    "scaled per channel": lambda x, s, w: x * w[:, None, None] + s,
    "NHWC view": lambda x, s, w: x.permute(0, 2, 3, 1) * 2,
}


@settings(max_examples=EXAMPLES)
@given(name=st.sampled_from(sorted(CHANNELS_LAST)), dtype=st.sampled_from([torch.float32,
                                                                            torch.bfloat16]),
       shape=st.tuples(st.integers(1, 2), st.sampled_from([8, 16, 32]), st.sampled_from([2, 4, 8]),
                       st.sampled_from([8, 16])),
       mode=st.sampled_from(MODES))
def test_channels_last_inputs_get_the_2d_tile(name, dtype, shape, mode):
    """A channels_last NCHW input is contiguous along the channels, an outer dim of an NCHW
    output: ROWS walk the channels (`row_axis` 1), its loads are 16 bytes along the rows and the
    stores along the columns, each width stated (`Access.axis`) and compiled as stated; read
    as NHWC (a permuted view that is contiguous) the columns walk the channels. It had no row
    axis: the analysis said 1 and Triton widened the loads on its own."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=g).to(dtype).contiguous(memory_format=torch.channels_last)
    s = torch.randn(shape, generator=g).to(dtype)
    w = torch.randn(shape[1], generator=g).to(dtype)
    fn = CHANNELS_LAST[name]
    note(f"{name} {shape} {dtype} {mode}")
    jfn = ir.jit(fn, executors=["triton"], cache=mode)
    assert_bits_equal(jfn(x, s, w).contiguous(), fn(x, s, w).contiguous())
    (record,) = triton_exec.last_kernels(jfn)
    assert record.vector_width == record.analysis_width, record.source
    (load,) = [a for a in record.lowered.accesses if a.tensor == "x"]
    assert load.width * x.element_size() == 16, (load, record.source)
    assert load.axis == ("cols" if name == "NHWC view" else "rows")
    if name != "NHWC view":
        assert record.lowered.row_axis == 1, record.source
    widths = record.access_widths(arch=90)
    assert set(widths["st"]) == {16}, widths
