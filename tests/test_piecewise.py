"""Piece-wise code generation: a static innermost extent is computed in column chunks over which
every cat/pad/slice boundary is decided, so a pass-through piece is a plain vector copy and the
rotated piece of a RoPE does its math on its own columns only. Measured by the static cost model
against a straightforward hand-written kernel at the same tile."""
import re

import pytest
import torch
from hypothesis import event, given, note, settings
import torch.nn.functional as F
import triton

import ir
import triton_exec
from ir.examples import rope, rope_inputs
from perf_modules import perf_module
from programs import assert_close, assert_matches_eager, programs
from test_triton_programs import check_geometry
from triton_exec import cost
from triton_exec.codegen import Chunk, Group, plan_chunks
from triton_exec.launch import noop_launches


# PTX instructions per [ROWS, COLS] tile of the seed RoPE's forward kernel (bf16, its heuristic
# config: a program is LOOP = 4 tiles, one per index of the batch its loop walks), as achieved
# plus 10%: a regression guard. PTX differs between Triton versions.
SEED_ROPE_PTX_BOUND = {"3.6": 187, "3.9": 185}


def seed_forward_record():
    """The seed RoPE's forward kernel at the seed's rows per batch (B=8, H=16, T=1024, hs=32,
    n=8, bf16): its code and tile are the seed's, a loop over LOOP=4 of the batch in each
    program (B=256 only adds programs; at B=4, one block, the loop's start folds to 0)."""
    x, cos, sin = (torch.empty(8, 16, 1024, 32, dtype=torch.bfloat16),
                   torch.empty(1024, 8, dtype=torch.bfloat16),
                   torch.empty(1024, 8, dtype=torch.bfloat16))
    jfn = ir.jit(rope, executors=["triton"])
    with noop_launches():
        jfn(x, cos, sin, 8)
    (record,) = triton_exec.last_kernels(jfn)
    return record, (x, cos, sin, 8)


def test_seed_rope_forward_moves_1_5x_the_bytes_per_instruction_of_a_hand_written_kernel():
    record, args = seed_forward_record()
    assert record.lowered.chunks           # computed piece-wise
    assert record.lowered.loop.dim == 0 and record.config.loop == 4
    ours = record.cost(arch=90)
    static_cost = perf_module("static_cost")
    case = static_cost.Case("seed", rope, args, hand=static_cost._rope_hand(False))
    hand = static_cost.hand_row(case, record).cost
    # ours covers LOOP of the hand-written kernel's tiles per program
    assert hand.bytes_moved * 4 == ours.bytes_moved and hand.counted == ours.counted
    assert ours.bytes_per_warp_instruction >= 1.5 * hand.bytes_per_warp_instruction, (
        ours.summary(), hand.summary())
    # every load and store still as wide as the gcd rule allows: 16 B, and 8 B where the
    # rotation moves by half of n = 8
    widths = record.access_widths()
    assert set(widths["st"]) == {16} and set(widths["ld"]) == {16, 8}


def test_seed_rope_ptx_instruction_count_stays_below_its_bound():
    record, _ = seed_forward_record()
    version = ".".join(triton.__version__.split(".")[:2])
    bound = SEED_ROPE_PTX_BOUND.get(version) or max(b for b in SEED_ROPE_PTX_BOUND.values() if b)
    count = cost.ptx_instructions(record.ptx()) / record.config.loop
    assert count <= bound, f"{count} PTX instructions per [ROWS, COLS] tile, bound {bound}"


def test_pass_through_piece_is_a_plain_vector_copy():
    fn = lambda a, b: torch.cat((a * 2, b), dim=-1)  # noqa: E731
    a, b = torch.randn(4, 8).bfloat16(), torch.randn(4, 24).bfloat16()
    jfn = ir.jit(fn, executors=["triton"])
    torch.testing.assert_close(jfn(a, b), fn(a, b))
    (record,) = triton_exec.last_kernels(jfn)
    assert [(c.start, c.stop) for c in record.lowered.chunks] == [(0, 8), (8, 24), (24, 32)]
    chunks = record.source.split("# Columns ")[1:]
    for chunk in chunks[1:]:        # b's columns: load, store; no conversion, no select
        assert "tl.where" not in chunk and "float32" not in chunk and "mask=in_rows" in chunk
        assert len(re.findall(r"tl\.load", chunk)) == 1
    assert set(record.access_widths()["ld"]) == {16} and set(record.access_widths()["st"]) == {16}


def group(extent, itemsize=2):
    return Group([], [], {}, (4, extent), (4, extent), 16 // itemsize, None, True, False, [])


@pytest.mark.parametrize("extent,boundaries,chunks", [
    (32, {4, 8}, [(0, 8, 8), (8, 16, 24), (24, 8, 32)]),    # 4 inside the first 8: kept there
    (32, {32}, None),                                        # the extent: nothing splits
    (48, {5}, [(0, 8, 8), (8, 32, 40), (40, 8, 48)]),        # unaligned: the 8 around it
    (1024, {1000}, [(0, 512, 512), (512, 256, 768), (768, 128, 896), (896, 128, 1000),
                    (1000, 16, 1016), (1016, 8, 1024)]),
    (20, {8}, [(0, 8, 8), (8, 8, 16), (16, 4, 20)]),          # the edge: a masked chunk
    (2048, {8}, None),                                       # too wide to unroll
])
def test_plan_chunks(extent, boundaries, chunks):
    planned = plan_chunks(group(extent), boundaries)
    assert planned == (None if chunks is None else [Chunk(*c) for c in chunks])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("fn,shapes", [
    (lambda x: F.pad(x, (8, 8)), [(3, 16)]),
    (lambda x: F.pad(x, (3, 5)), [(3, 16)]),
    (lambda x: F.pad(x, (0, 0, 4, 4)), [(3, 8, 2)]),
    (lambda a, b: torch.cat((a, b * 2, a), dim=-1), [(5, 8), (5, 16)]),
    (lambda a, b: torch.cat((a[:, 3:], b), dim=-1), [(5, 11), (5, 9)]),
    (lambda x: x[:, 8:] + F.pad(x[:, :8], (0, 8)), [(2, 24)]),
])
def test_chunked_kernels_match_eager(fn, shapes, dtype):
    g = torch.Generator().manual_seed(0)
    args = [torch.randn(s, generator=g).to(dtype) for s in shapes]
    jfn = ir.jit(fn, executors=["triton"])
    assert_close(jfn(*args), fn(*args))
    assert all(r.lowered.chunks for r in triton_exec.last_kernels(jfn))


def test_rope_on_a_fused_qkv_tensor_backward_is_as_wide_as_its_forward():
    """The backward's domain is qkv's columns: each head's gradient read through a reshape.
    Split at the head size (the reshape's divisions fold over each head's columns), its loads
    and stores are 16 B wherever the forward's are (8 B where the rotation moves by n / 2)."""
    from ir.examples import rope_qkv
    B, T, H, hs, n = 2, 16, 4, 32, 8
    g = torch.Generator().manual_seed(0)
    qkv = torch.randn(B, T, 3 * H * hs, generator=g).bfloat16()
    cos, sin = torch.randn(2, T, n, generator=g).bfloat16().unbind(0)
    jfn = ir.jit(rope_qkv, executors=["triton"])
    a, b = qkv.clone().requires_grad_(), qkv.clone().requires_grad_()
    q, k = jfn(a, cos, sin, H, H, hs, n)
    eq, ek = rope_qkv(b, cos, sin, H, H, hs, n)
    gq, gk = (torch.randn(q.shape, generator=g).bfloat16() for _ in range(2))
    (got,) = torch.autograd.grad((q, k), a, (gq, gk))
    (want,) = torch.autograd.grad((eq, ek), b, (gq, gk))
    torch.testing.assert_close(got, want, rtol=2e-2, atol=4e-2)
    records = triton_exec.last_kernels(jfn)
    (fwd,) = [r for r in records if r.direction == "forward"]
    (bwd,) = [r for r in records if r.direction == "backward"]
    f_widths, b_widths = fwd.access_widths(), bwd.access_widths()
    assert set(b_widths["ld"]) == set(f_widths["ld"]) == {16, 8}
    assert set(b_widths["st"]) == set(f_widths["st"]) == {16}
    # the gradient of q and k read 16 B a time, but for the rotated half's partners
    widths = [(a.label, a.width) for a in bwd.lowered.accesses if a.kind == "load"]
    assert all(w == 8 for label, w in widths if "cos" in label)
    assert {w for label, w in widths if "sin" in label} == {4}
    # about as lean per byte as the forward (its 2-byte loads took 16x the instructions per byte)
    assert bwd.cost().bytes_per_warp_instruction >= 0.5 * fwd.cost().bytes_per_warp_instruction


@pytest.mark.parametrize("mode", ["constant values", "symbolic values"])
@settings(max_examples=25)
@given(program=programs(max_ops=4, op_names=("cat", "pad", "index", "arith", "cast", "unary")))
def test_generated_cats_pads_and_slices_match_eager(program, mode):
    """Static boundaries (constant mode: chunked where a boundary meets the vector, aligned or
    not) and runtime ones (symbolic mode: whole tiles), against eager."""
    note(program.describe())
    jfn = ir.jit(program.fn, executors=["triton"], cache=mode)
    assert_matches_eager(program, jfn(*program.inputs))
    for record in triton_exec.last_kernels(jfn):
        check_geometry(record)
        event(f"{mode}: {'chunked' if record.lowered.chunks else 'whole'}")
