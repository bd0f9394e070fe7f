"""A loop over an outer dim inside each program: where an input is broadcast along an outer dim
(a RoPE's cos and sin over the heads), each program covers LOOP indices of
that dim with `for j in tl.static_range(LOOP)`, and what does not depend on the loop's index (the
broadcast input's loads and conversions, per-row index math) runs once, before the loop.

Generated programs with such an input (ranks 2-4, any outer dim, extents LOOP does not divide,
fp32/fp16/bf16/int32, non-contiguous inputs, both cache modes, several LOOP values) match eager
through the interpreter; the RoPE's kernels (forward and backward) have the loop with cos and
sin loaded above it."""
import math
import re
from unittest import mock

import pytest
import torch
from hypothesis import event, given, note, settings, strategies as st

import ir
import triton_exec
from ir.examples import rope
from programs import assert_close
from test_triton_programs import check_geometry
from triton_exec import autotune, launch

DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.int32)
# the broadcast input b combined with x (the loop dim: d): elementwise, a RoPE-like cat, a cat
# along the loop dim (its pieces' masks and selects on the loop's index)
OPS = {
    "mul": lambda d: lambda x, b: x * b,
    "affine": lambda d: lambda x, b: x * 2 + b,
    "where": lambda d: lambda x, b: torch.where(b > 0, x, b),
    "rotate": lambda d: lambda x, b: torch.cat((x[..., :2] * b[..., :2], x[..., 2:] + b[..., 2:]),
                                               -1),
    "cat_along": lambda d: lambda x, b: torch.cat((x.narrow(d, 0, 1) * b,
                                                   x.narrow(d, 1, x.shape[d] - 1) + b), d),
}


def _values(shape, dtype, g):
    if dtype == torch.int32:
        return torch.randint(-4, 5, shape, generator=g, dtype=torch.int32)
    return torch.randn(shape, generator=g).to(dtype)


def _layout(t, how, g):
    """t with the same values in another layout: contiguous, the innermost dim a slice of a
    wider buffer (outer strides not a product of the sizes), or transposed storage."""
    if how == "sliced":
        wide = torch.zeros(*t.shape[:-1], t.shape[-1] + 8, dtype=t.dtype)
        wide[..., 3:3 + t.shape[-1]] = t
        return wide[..., 3:3 + t.shape[-1]]
    if how == "transposed" and t.ndim >= 2:
        return t.transpose(0, -1).contiguous().transpose(0, -1)
    return t


@st.composite
def broadcast_programs(draw):
    """(fn, x, b, loop dim): x of rank 2-4 with a loop candidate dim of extent 2-9 (LOOP often
    does not divide it), b broadcast along it (size 1 there, or left out when it leads), maybe
    along other outer dims too."""
    rank = draw(st.integers(2, 4))
    dim = draw(st.integers(0, rank - 2))
    shape = [draw(st.sampled_from([1, 3, 16, 32])) for _ in range(rank - 1)]
    shape[dim] = draw(st.integers(2, 9))
    # the loop leaves ROWS the other outer dims: rank 2 needs wide rows to fill a tile
    shape.append(draw(st.sampled_from([16, 40, 64, 128] if rank > 2 else [256, 320])))
    while math.prod(shape) > 8192:          # the interpreter's time: a few programs
        shape[max((d for d in range(rank - 1) if d != dim), key=lambda d: shape[d])] //= 2
    b_shape = [1 if d == dim or (d < rank - 1 and draw(st.booleans())) else s
               for d, s in enumerate(shape)]
    if dim == 0 and draw(st.booleans()):
        b_shape = b_shape[1:]                           # left out: broadcast by rank
    op = draw(st.sampled_from(sorted(OPS)))
    dtype = draw(st.sampled_from(DTYPES))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2 ** 16)))
    x = _layout(_values(tuple(shape), dtype, g), draw(st.sampled_from(["plain", "sliced",
                                                                         "transposed"])), g)
    b = _layout(_values(tuple(b_shape), dtype, g), draw(st.sampled_from(["plain", "sliced"])), g)
    return op, x, b, dim


@pytest.mark.parametrize("mode", ["constant values", "symbolic values"])
@settings(max_examples=25)
@given(case=broadcast_programs(), block=st.sampled_from([2, 3, 4, 8]))
def test_broadcast_programs_match_eager(case, block, mode):
    op, x, b, dim = case
    note(f"{op}: x {tuple(x.shape)} {x.dtype} stride {x.stride()}, b {tuple(b.shape)} "
         f"stride {b.stride()}, dim {dim}, LOOP {block}")
    fn = OPS[op](dim)
    jfn = ir.jit(fn, executors=["triton"], cache=mode)
    with mock.patch.object(launch, "LOOP_BLOCK", block):       # the heuristic's LOOP
        assert_close(jfn(x, b), fn(x, b))
        if mode == "symbolic values" and x.shape[dim] > 2:    # the entry serves a smaller extent
            smaller = x.narrow(dim, 0, x.shape[dim] - 1 - x.shape[dim] // 2)
            assert_close(jfn(smaller, b), fn(smaller, b))
    for record in triton_exec.last_kernels(jfn):
        check_geometry(record)
        loop = record.lowered.loop
        event(f"{mode}: " + ("no loop" if loop is None else
                             f"loop, extent {loop.extent} % LOOP {record.config.loop} "
                             f"{'== 0' if loop.extent % record.config.loop == 0 else '!= 0'}"))
        if loop is not None:
            assert "for j in tl.static_range(LOOP):" in record.source
            assert record.config.loop == min(block, loop.extent)


def _before_and_inside(source):
    """The kernel's lines before its loop and those inside it."""
    head, _, body = source.partition("for j in tl.static_range(LOOP):")
    return head, body


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("heads", [8, 6])         # 6: LOOP = 4 does not divide it
def test_rope_loops_over_the_heads_with_cos_and_sin_loaded_once(heads, dtype):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, heads, 64, 128, generator=g).to(dtype)
    cos, sin = torch.randn(2, 64, 128, generator=g).to(dtype).unbind(0)
    jfn = ir.jit(rope, executors=["triton"])
    assert_close(jfn(q, cos, sin, 128), rope(q, cos, sin, 128), rounding=dtype)
    (record,) = triton_exec.last_kernels(jfn)
    assert record.lowered.loop.dim == 1 and record.lowered.loop.extent == heads
    assert record.config.loop == 4
    before, inside = _before_and_inside(record.source)
    assert inside, "the kernel has no loop"
    for name in ("cos", "sin"):
        assert re.search(rf"tl\.load\({name}_ptr", before) and f"{name}_ptr" not in inside
    assert re.search(r"tl\.load\(x_ptr", inside) and "x_ptr +" not in before
    assert "tl.store(" in inside and "tl.store(" not in before
    if dtype == torch.bfloat16:     # cos/sin's conversions run once too
        assert not re.search(r"v\d+ = v\d+\.to\(tl\.float32\)", inside.split("x_ptr")[0])
    # the launch: one program per block of LOOP heads along the grid's second axis
    grid = re.search(r"LAUNCH\(\((\d+), (\d+)\)", record.launcher_source)
    assert int(grid[2]) == -(-heads // 4)


def test_one_symbolic_entry_serves_every_extent_of_the_loop_dim():
    """In "symbolic values" mode the heads are a runtime size: the last block repeats the last
    index past it (`tl.minimum`), so one entry built at 8 heads (LOOP 4) serves 3 and 6."""
    jfn = ir.jit(rope, executors=["triton"], cache="symbolic values")
    for heads in (8, 3, 6):
        g = torch.Generator().manual_seed(heads)
        q = torch.randn(1, heads, 64, 128, generator=g).bfloat16()
        cos, sin = torch.randn(2, 64, 128, generator=g).bfloat16().unbind(0)
        assert_close(jfn(q, cos, sin, 128), rope(q, cos, sin, 128), rounding=torch.bfloat16)
    assert (ir.cache_stats(jfn).misses, ir.cache_stats(jfn).hits) == (1, 2)
    (record,) = triton_exec.last_kernels(jfn)
    assert record.lowered.loop.dim == 1 and record.config.loop == 4
    before, inside = _before_and_inside(record.source)
    assert "cos_ptr" in before and "cos_ptr" not in inside
    assert re.search(r"o1 = tl\.minimum\(o1_start \+ j, h\d+\)", inside)
    assert "i1 < 65536" in str(ir.last_prologue(jfn))       # the grid's second axis


def test_rope_backward_loops_too():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 2, 64, 32, generator=g, dtype=torch.bfloat16)
    cos, sin = torch.randn(2, 64, 8, generator=g, dtype=torch.bfloat16).unbind(0)
    jfn = ir.jit(rope, executors=["triton"])
    a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
    out = jfn(a, cos, sin, 8)
    dy = torch.randn(out.shape, generator=g, dtype=torch.bfloat16)
    (got,) = torch.autograd.grad(out, a, dy)
    (want,) = torch.autograd.grad(rope(b, cos, sin, 8), b, dy)
    assert_close(got, want, rounding=torch.bfloat16)
    records = triton_exec.last_kernels(jfn)
    assert {r.direction for r in records} == {"forward", "backward"}
    for record in records:
        assert record.lowered.loop is not None, record.direction
        before, inside = _before_and_inside(record.source)
        assert "cos_ptr" in before and "cos_ptr" not in inside


def test_no_broadcast_input_no_loop():
    jfn = ir.jit(lambda x, y: x * y + 1, executors=["triton"])
    x, y = torch.randn(4, 8, 32), torch.randn(4, 8, 32)
    assert_close(jfn(x, y), x * y + 1)
    (record,) = triton_exec.last_kernels(jfn)
    assert record.lowered.loop is None and "static_range" not in record.source
    assert record.config.loop is None and "LOOP" not in record.source


def test_too_few_rows_left_keeps_the_whole_tile():
    """A loop leaves ROWS the other outer dims only: where they cannot fill a tile whose threads
    each hold a vector (16 rows of 8 columns, bf16), no loop."""
    jfn = ir.jit(lambda x, b: x * b, executors=["triton"])
    x, b = torch.randn(4, 16, 8).bfloat16(), torch.randn(16, 8).bfloat16()
    assert_close(jfn(x, b), x * b)
    (record,) = triton_exec.last_kernels(jfn)
    assert record.lowered.loop is None


def test_config_space_tries_other_loop_blocks_up_to_the_extent():
    heuristic = launch.LaunchConfig(32, 128, 4, 8, 4)
    space = autotune.config_space(heuristic, 4096, 8, 12, 64, loop_extent=32)
    assert space[0] == heuristic and {c.loop for c in space} == {2, 4, 8}
    few = autotune.config_space(launch.LaunchConfig(32, 128, 4, 8, 3), 4096, 8, 12, 64,
                                loop_extent=3)
    assert {c.loop for c in few} == {2, 3}
    assert autotune._from_public(autotune._public(heuristic)) == heuristic
    plain = launch.LaunchConfig(32, 128, 4, 8)
    assert "LOOP" not in autotune._public(plain)
    assert autotune._from_public(autotune._public(plain)) == plain


def test_forced_tuning_times_each_loop_block(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_EXEC_CACHE_DIR", str(tmp_path))
    autotune.reset_caches()
    g = torch.Generator().manual_seed(2)
    q = torch.randn(1, 8, 64, 128, generator=g).bfloat16()
    cos, sin = torch.randn(2, 64, 128, generator=g).bfloat16().unbind(0)
    jfn = ir.jit(rope, executors=["triton"])
    try:
        with autotune.forced(max_configs=6):    # the heuristic, VEC 1, 2, 4, then LOOP 2 and 8
            assert_close(jfn(q, cos, sin, 128), rope(q, cos, sin, 128), rounding=torch.bfloat16)
    finally:
        autotune.reset_caches()
    (record,) = triton_exec.last_kernels(jfn)
    results = record.tuning.results
    assert [r.config["LOOP"] for r in results] == [4, 4, 4, 4, 2, 8]
    assert not any(r.failed for r in results), [r.error for r in results]
