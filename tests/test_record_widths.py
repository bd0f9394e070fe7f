"""A kernel record's widths are what the compiled kernel does: over random programs of reshapes
that split and merge dims (the innermost included), pads, cats, slices and stacks, with wide
inner dims, in fp32 and bf16 and both cache modes, each access's width from the vectorization
analysis (`record.analysis_width`) equals the width of the `ld.global`/`st.global` that the
offline sm_90 compile makes of that access (`record.vector_width`, matched by source line), in
both directions. The one allowed difference: a load whose address does not walk the columns
linearly, for which the analysis says 1, and which Triton may still prove wider: along the
tile's rows where the analysis does not state it (a transposed read through a reshape), or, on
Triton 3.9 but not 3.6, through `cols % n` with n of known divisibility (a symbolic reshape
merging inner dims). A load contiguous along the rows of a transpose's 2-D tile is stated along
the rows (`Access.axis`) and must match.

Each compiled access is attributed to the access that emitted it by its own source line (the
LLVM IR's debug locations), whatever code motion the writer does: loop kernels, whose loads of
inputs broadcast along the loop's dim are hoisted above `tl.static_range`, are checked over the
generated broadcast programs of `test_broadcast_loop` (they shifted the pairs when widths were
paired with the accesses in lowering order), column chunks by the RoPE, pair tiling by
`test_interleaved_rope`. There a load may also be wider than the analysis says, never narrower:
a slice whose shift a cat's piece undoes (`cat((x[..., :2] * b, x[..., 2:] + b))` reads x at the
output's columns) is taken as narrowed by each boundary it passes.

The soak: WIDTH_EXAMPLES=500 HYPOTHESIS_PROFILE=explore bash tests/run.sh tests/test_record_widths.py
"""
import os
from unittest import mock

import torch
from hypothesis import event, given, note, settings
from hypothesis import strategies as st

import ir
import triton_exec
from programs import (assert_close, assert_matches_eager, programs, transpose_program,
                      transposes)
from test_broadcast_loop import OPS as BROADCAST_OPS, broadcast_programs
from triton_exec import index, launch

EXAMPLES = int(os.environ.get("WIDTH_EXAMPLES", "15"))
OPS = ("split_merge", "reshape", "pad", "cat", "index", "stack", "layout", "arith", "expand")


@st.composite
def wide_shapes(draw):
    """Shapes whose inner dims allow wide accesses: the innermost a multiple of 2 to 64."""
    rank = draw(st.integers(1, 3))
    inner = draw(st.sampled_from([2, 4, 6, 8, 12, 16, 24, 32, 64]))
    return tuple(draw(st.integers(1, 4)) for _ in range(rank - 1)) + (inner,)


def check_widths(record, shifts_undone: bool = False) -> list[str]:
    """What each access's width came to (for `event`); raises where the analysis and the
    compiled kernel disagree other than by a load vectorized along the rows (or, with
    `shifts_undone`, a load wider than the analysis says: see the module's docstring)."""
    analysis, compiled = record.analysis_width, record.vector_width
    seen = []
    for access in record.lowered.accesses:
        want, got = analysis[access.label], compiled[access.label]
        if got == want:
            seen.append(f"{access.kind} width {want}: as the analysis says")
            continue
        if shifts_undone and access.kind == "load" and got > want and got % want == 0:
            seen.append("a load whose slice shift a cat undoes, wider than the analysis says")
            continue
        widened = access.kind == "load" and want == 1 and not access.along_cols and got > 1
        assert widened, (f"{access.label}: the analysis says {want}, the kernel does {got}"
                         f"\n{record.source}")
        seen.append("a load not walking the columns linearly, widened by Triton")
    return seen


@settings(max_examples=EXAMPLES)
@given(program=programs(max_ops=3, op_names=OPS, base_shapes=wide_shapes(),
                        main_dtypes=(torch.float32, torch.bfloat16),
                        input_dtypes=(torch.float32, torch.bfloat16)),
       mode=st.sampled_from(["constant values", "symbolic values"]))
def test_recorded_widths_are_the_compiled_widths(program, mode):
    note(program.describe())
    jfn = ir.jit(program.fn, executors=["triton"], cache=mode)
    assert_matches_eager(program, jfn(*program.inputs))
    for record in triton_exec.last_kernels(jfn):
        for seen in check_widths(record):
            event(seen)


@st.composite
def transposable_shapes(draw):
    """Rank 2-4 shapes whose dims (outer ones included) allow wide accesses along any of them:
    a permute of them makes a transpose's 2-D tile (`Lowered.row_axis`)."""
    return tuple(draw(st.sampled_from([2, 4, 6, 8, 16, 24, 32]))
                 for _ in range(draw(st.integers(2, 4))))


@settings(max_examples=EXAMPLES)
@given(program=programs(max_ops=3, min_ops=2, op_names=("layout",) * 3 + ("arith", "pad", "cat", "copy"),
                        base_shapes=transposable_shapes(),
                        main_dtypes=(torch.float32, torch.bfloat16),
                        input_dtypes=(torch.float32, torch.bfloat16)),
       mode=st.sampled_from(["constant values", "symbolic values"]))
def test_2d_tiles_report_each_access_its_own_width(program, mode):
    """Random programs of permutes, pads, cats and elementwise work: the 2-D tiles of their
    transposes (loads wide along the rows) state each access's compiled width, as every other
    kernel does."""
    note(program.describe())
    jfn = ir.jit(program.fn, executors=["triton"], cache=mode)
    assert_matches_eager(program, jfn(*program.inputs))
    for record in triton_exec.last_kernels(jfn):
        if record.lowered.cols == index.Const(1):   # a domain ending in 1 that the inner-dim
            # merge cannot drop (a permute or reshape in the group): the tile's columns are
            # the 1, and Triton may vectorize the stores along the rows by as much as the
            # launch's runtime values allow, which the analysis does not state (issue 29)
            event("a domain ending in 1, not merged")
            continue
        rows = [a for a in record.lowered.accesses if a.axis == "rows"]
        event("a 2-D tile" if record.lowered.row_axis is not None else "no 2-D tile")
        if rows:
            event("loads wide along the rows")
        for seen in check_widths(record):
            event(seen)


@settings(max_examples=max(EXAMPLES // 2, 6))
@given(case=transposes(), mode=st.sampled_from(["constant values", "symbolic values"]))
def test_transposes_2d_tiles_report_each_access_its_own_width(case, mode):
    """Generated permutes with elementwise work (`programs.transposes`): their 2-D tiles, loads
    wide along the rows and stores along the columns, state each access's compiled width."""
    shape, perm, dtype, scaled, added = case
    g = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=g).to(dtype)
    gamma = torch.randn(shape[-1], generator=g).to(dtype)
    other = torch.randn([shape[p] for p in perm], generator=g).to(dtype)
    note(f"{shape} {perm} {dtype} scaled {scaled} added {added} {mode}")
    fn = transpose_program(perm, scaled, added)
    jfn = ir.jit(fn, executors=["triton"], cache=mode)
    assert_close(jfn(x, gamma, other), fn(x, gamma, other))
    for record in triton_exec.last_kernels(jfn):
        event("a 2-D tile" if record.lowered.row_axis is not None else "no 2-D tile")
        for seen in check_widths(record):
            event(seen)


def test_the_issue_example_merge_and_split():
    """reshape([4, 4, 8] -> [4, 32]) and back: the record states what the PTX does (it said 1
    where the PTX had 16-byte loads), and both directions get the gcd rule's width."""
    for shape, to in (((4, 4, 8), (4, 32)), ((4, 32), (4, 4, 8))):
        for mode in ("constant values", "symbolic values"):
            fn = lambda x: x.reshape(to) * 2      # noqa: E731
            jfn = ir.jit(fn, executors=["triton"], cache=mode)
            x = torch.randn(shape)
            torch.testing.assert_close(jfn(x), fn(x))
            (record,) = triton_exec.last_kernels(jfn)
            check_widths(record)
            if mode == "constant values":   # symbolic merges: V = 1 (see the README)
                assert record.vector_width == record.analysis_width


def test_the_check_can_fail():
    """A record whose analysis claims a width the kernel does not have is caught."""
    jfn = ir.jit(lambda x: x[:, 4:] * 2, executors=["triton"])
    jfn(torch.randn(8, 36))
    (record,) = triton_exec.last_kernels(jfn)
    load = record.lowered.accesses[0]
    assert load.width == 4
    load.width = 1      # as the record said before the fix: narrower than the kernel
    try:
        check_widths(record)
    except AssertionError:
        pass
    else:
        raise AssertionError("a wrong width passed")
    finally:
        load.width = 4


def test_a_transposed_load_is_stated_wide_along_the_rows():
    """A load contiguous along the outer index (a transpose's): the analysis states its width
    along the tile's rows (it said 1, and Triton widened it), as the compiled kernel does."""
    jfn = ir.jit(lambda x: x.t() * 2, executors=["triton"])
    x = torch.randn(4, 64)
    torch.testing.assert_close(jfn(x), x.t() * 2)
    (record,) = triton_exec.last_kernels(jfn)
    (load,) = [a for a in record.lowered.accesses if a.kind == "load"]
    assert not load.along_cols and load.axis == "rows" and load.width == 4
    assert record.vector_width == record.analysis_width
    assert check_widths(record) == ["load width 4: as the analysis says",
                                    "store width 4: as the analysis says"]


@settings(max_examples=max(EXAMPLES // 3, 4))
@given(case=broadcast_programs(), block=st.sampled_from([2, 3, 4]),
       mode=st.sampled_from(["constant values", "symbolic values"]))
def test_loop_kernels_report_each_access_its_own_width(case, block, mode):
    """Loads hoisted above the loop and those inside it: each keeps its own compiled width."""
    op, x, b, dim = case
    note(f"{op}: x {tuple(x.shape)} {x.dtype} stride {x.stride()}, b {tuple(b.shape)}, dim {dim}")
    fn = BROADCAST_OPS[op](dim)
    jfn = ir.jit(fn, executors=["triton"], cache=mode)
    with mock.patch.object(launch, "LOOP_BLOCK", block):
        assert_close(jfn(x, b), fn(x, b))
    for record in triton_exec.last_kernels(jfn):
        event("loop kernel" if record.lowered.loop is not None else "no loop")
        for seen in check_widths(record, shifts_undone=op == "rotate"):
            event(seen)


def _readme_rope(x, cos, sin, n: int):
    xr = x[..., :n]
    x1, x2 = xr[..., : n // 2], xr[..., n // 2:]
    roped = xr * cos + torch.cat((-x2, x1), dim=-1) * sin
    return torch.cat((roped.to(x.dtype), x[..., n:]), dim=-1)


def test_the_readme_rope_reports_its_hoisted_loads_by_identity():
    """The README's RoPE: cos and sin are loaded above the loop over the batch, the x slices in
    it; the 4-wide halves of the rotation are reported 4 wide (the compiled widths paired in
    lowering order reported `load 2 x (slice)` as 8 and sin as 4)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 4, 16, 32, generator=g).bfloat16()
    cos, sin = torch.randn(2, 16, 8, generator=g).bfloat16().unbind(0)
    jfn = ir.jit(_readme_rope, executors=["triton"])
    assert torch.equal(jfn(x, cos, sin, 8), _readme_rope(x, cos, sin, 8))
    (record,) = triton_exec.last_kernels(jfn)
    before, _, inside = record.source.partition("for j in tl.static_range(LOOP):")
    assert "tl.load(cos_ptr" in before and "tl.load(x_ptr" in inside
    assert record.vector_width == record.analysis_width
    assert sorted(record.vector_width.values()) == [4, 4] + [8] * 8


@st.composite
def ending_in_one(draw):
    """Programs whose output ends in a dim of 1 ([a, b, 1]: a column vector per row, timm's
    `x[..., None]` gates): a pad or slice of dim -2, elementwise work, an operand of the same
    shape, in fp32 or bf16."""
    # rows enough for a tile whose threads hold several (Triton vectorized those along the rows)
    a, b = draw(st.sampled_from([1, 8, 16])), draw(st.sampled_from([8, 16, 24, 32, 64]))
    lo, hi = draw(st.sampled_from([(1, 1), (2, 2), (0, 4), (4, 4), (1, 0)]))
    sliced = draw(st.booleans())
    dtype = draw(st.sampled_from([torch.float32, torch.bfloat16]))

    def fn(x, y):
        t = torch.nn.functional.pad(x * 2, (0, 0, lo, hi))
        t = t[:, 2:] if sliced else t
        return t + y
    out_b = b + lo + hi - 2 * sliced
    return fn, (a, b, 1), (a, out_b, 1), dtype, f"pad {(lo, hi)} sliced {sliced}"


@settings(max_examples=max(EXAMPLES // 2, 6))
@given(case=ending_in_one(), mode=st.sampled_from(["constant values", "symbolic values"]))
def test_a_domain_ending_in_1_states_its_compiled_widths(case, mode):
    """The trailing 1 merges into the dim before it (any size, runtime included), which the
    columns then walk: every access's width is the compiled one (the tile walked the 1, and
    Triton vectorized the stores along the rows where the analysis said 1)."""
    fn, x_shape, y_shape, dtype, what = case
    note(f"{x_shape} {dtype} {what} {mode}")
    g = torch.Generator().manual_seed(0)
    x, y = (torch.randn(s, generator=g).to(dtype) for s in (x_shape, y_shape))
    jfn = ir.jit(fn, executors=["triton"], cache=mode)
    assert torch.equal(jfn(x, y), fn(x, y))
    for record in triton_exec.last_kernels(jfn):
        assert record.vector_width == record.analysis_width, record.source
