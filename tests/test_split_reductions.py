"""Column reductions over many rows with few column programs run in two levels (issue 28:
"outer-dim reductions by blocks of rows with a second pass", `triton_exec.split_reductions`):
random programs of a fused producer, a sum/mean/amax/amin over the leading dim(s) of [8192, C]
or [B, T, C] (C from 32 to 80: one column program unsplit) and an op after it, in
fp32/fp16/bf16, over laid-out inputs, against eager within the README's tolerance; the hand-written
RMSNorm's weight gradient, through one backward for the whole trace and through a unit per
fusion group; each split is two kernels, the first with a program per chunk of 256 rows (32 for
8192 rows) and the second one program; sibling splits (a layer norm's weight and bias gradients)
merge. Left whole: few rows, runtime sizes (symbolic values), amax/amin whose result needs grad,
enough column programs already, reductions whose result comes back to the rows (an outer-dim
softmax: one kernel); the decoder layer's counts (`test_backward_partition`).
At Llama-3-8B's RMSNorm backward (compiled, launched as no-ops): 256 + 16 programs for the
weight gradient, where the whole column plan has 16."""
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, note, settings
from hypothesis import strategies as st

import ir
import triton_exec
from semantics import laid_out
from test_reductions import (TOLERANCE, assert_close_as_contract, handwritten_rms_norm,
                             torch_reductions)
from triton_exec import cost, split_reductions
from triton_exec.launch import noop_launches

ROWS = 8192
CHUNKS = ROWS // split_reductions.MIN_CHUNK_ROWS    # 32: the cap on chunks binds at one
                                                    # column program
REDUCE = {"sum": torch.sum, "mean": torch.mean, "amax": torch.amax, "amin": torch.amin}
BEFORE = {"mul": lambda a, b: a * b, "silu": lambda a, b: F.silu(a) + b[0]}
AFTER = {"none": lambda y: y, "double": lambda y: y * 2, "add": lambda y: y + 1.0}
FLOATS = [torch.float32, torch.float16, torch.bfloat16]


def program(reduction, before, after, dims):
    def fn(a, b):
        return AFTER[after](REDUCE[reduction](BEFORE[before](a, b), dims))
    return fn


def assert_gradient_close(actual, expected, rows: int):
    """Twice the values' tolerance (README's "Numerical contract": an fp16/bf16 gradient
    accumulated from two uses is rounded twice in eager's autograd)."""
    tol = 2 * TOLERANCE[expected.dtype] * (max(1.0, math.sqrt(rows) / 8)
                                           if expected.dtype == torch.float32 else 1.0)
    torch.testing.assert_close(actual, expected, rtol=tol, atol=tol, equal_nan=True)


def _tensor(shape, dtype, seed):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


@st.composite
def large_cases(draw):
    cols = draw(st.integers(32, 80))
    batch = draw(st.sampled_from([1, 2, 4, 8]))
    dims, shape = draw(st.sampled_from([((0,), (ROWS, cols)),
                                        ((0, 1), (batch, ROWS // batch, cols))]))
    dtype = draw(st.sampled_from(FLOATS))
    seed = draw(st.integers(0, 2 ** 16))
    a = draw(laid_out(_tensor(shape, dtype, seed)))
    return (draw(st.sampled_from(sorted(REDUCE))), draw(st.sampled_from(sorted(BEFORE))),
            draw(st.sampled_from(sorted(AFTER))), dims, a, _tensor(shape, dtype, seed + 1))


def column_kernels(jf, direction="forward"):
    return [k for k in triton_exec.last_kernels(jf)
            if k.direction == direction and k.lowered.column_rows is not None]


@settings(max_examples=8)
@given(large_cases())
def test_large_column_reductions_are_two_kernels_as_eager(case):
    reduction, before, after, dims, a, b = case
    note(f"{reduction} {before} {after} dims={dims} {a.dtype} {tuple(a.shape)} "
         f"strides {a.stride()}")
    fn = program(reduction, before, after, dims)
    jf = ir.jit(fn, executors=["triton"])
    assert_close_as_contract(jf(a, b), fn(a, b), ROWS)
    kernels = triton_exec.last_kernels(jf)
    assert torch_reductions(jf) == [] and len(kernels) == 2
    assert [cost.programs(k) for k in kernels] == [CHUNKS, 1]


@pytest.mark.parametrize("shape, dtype, whole_backward", [
    ((ROWS, 64), torch.bfloat16, "1"), ((4, ROWS // 4, 64), torch.float32, "1"),
    ((ROWS, 64), torch.float32, "0"), ((4, ROWS // 4, 64), torch.bfloat16, "0")])
def test_rms_norm_weight_gradient_is_split_as_eager(shape, dtype, whole_backward, monkeypatch):
    """Through one backward for the whole trace, and through a unit per fusion group (the
    forward's split sum differentiated by its groups)."""
    monkeypatch.setenv("IR_WHOLE_BACKWARD", whole_backward)

    def fn(x, w):
        return handwritten_rms_norm(x, w), (x * w).sum(tuple(range(x.ndim - 1))) * 2
    x, w = _tensor(shape, dtype, 0), _tensor(shape[-1:], dtype, 1)
    leaves = [t.clone().requires_grad_() for t in (x, w)]
    refs = [t.clone().requires_grad_() for t in (x, w)]
    jf = ir.jit(fn, executors=["triton"])
    outs, expected = jf(*leaves), fn(*refs)
    gs = [_tensor(e.shape, dtype, 2 + k) for k, e in enumerate(expected)]
    got = torch.autograd.grad(outs, leaves, gs)
    want = torch.autograd.grad(expected, refs, gs)
    for o, e in zip(outs, expected):
        assert_close_as_contract(o.detach(), e.detach(), ROWS)
    for a, e in zip(got, want):
        assert_gradient_close(a, e, ROWS)
    assert [cost.programs(k) for k in column_kernels(jf)] == [CHUNKS, 1]
    backward = [cost.programs(k) for k in column_kernels(jf, "backward")]
    assert CHUNKS in backward and 1 in backward and max(backward) == CHUNKS


def test_sibling_splits_merge():
    """A layer norm's weight and bias gradients: both levels of both sums in one kernel each."""
    def fn(x, w, b):
        return F.layer_norm(x, x.shape[-1:], w, b)
    args = [_tensor(s, torch.float32, k) for k, s in enumerate([(ROWS, 64), (64,), (64,)])]
    leaves = [t.clone().requires_grad_() for t in args]
    refs = [t.clone().requires_grad_() for t in args]
    jf = ir.jit(fn, executors=["triton"])
    g = _tensor((ROWS, 64), torch.float32, 3)
    for a, e in zip(torch.autograd.grad(jf(*leaves), leaves, g),
                    torch.autograd.grad(fn(*refs), refs, g)):
        assert_gradient_close(a, e, ROWS)
    assert [cost.programs(k) for k in column_kernels(jf, "backward")] == [CHUNKS, 1]


@pytest.mark.parametrize("shape, mode, needs_grad", [
    ((512, 64), "constant values", False),          # few rows
    ((ROWS, 8), "constant values", False),          # few elements per program
    ((ROWS, 64), "symbolic values", False),         # runtime rows
    ((ROWS, 64), "constant values", True),          # amax's result needs grad
])
def test_reductions_left_whole(shape, mode, needs_grad):
    x = _tensor(shape, torch.float32, 0).requires_grad_(needs_grad)
    fn = program("amax", "mul", "double", (0,))
    jf = ir.jit(fn, executors=["triton"], cache=mode)
    assert_close_as_contract(jf(x, x).detach(), fn(x, x).detach(), shape[0])
    assert [cost.programs(k) for k in column_kernels(jf)] == [1]


@pytest.mark.parametrize("fn", [lambda x: torch.softmax(x, 0), lambda x: torch.logsumexp(x, 0),
                                lambda x: x.var(0)], ids=["softmax", "logsumexp", "var"])
def test_reductions_whose_result_comes_back_to_the_rows_are_left_whole(fn):
    """An outer-dim softmax's max and sum (and a variance's mean, with the sum of squares of the
    same sizes): one column-plan kernel forward and one backward, as at small sizes."""
    x = _tensor((ROWS, 64), torch.float32, 0)
    leaf, ref = x.clone().requires_grad_(), x.clone().requires_grad_()
    jf = ir.jit(fn, executors=["triton"])
    out, expected = jf(leaf), fn(ref)
    assert_close_as_contract(out.detach(), expected.detach(), ROWS)
    g = _tensor(expected.shape, torch.float32, 1)
    assert_gradient_close(torch.autograd.grad(out, leaf, g)[0],
                          torch.autograd.grad(expected, ref, g)[0], ROWS)
    assert [cost.programs(k) for k in column_kernels(jf)] == [1]
    assert [cost.programs(k) for k in column_kernels(jf, "backward")] in ([1], [])


def test_enough_column_programs_are_left_whole():
    """[1024, 34000] summed over its rows: 133 programs of 256 columns already (compiled
    only)."""
    jf = ir.jit(lambda x: x.sum(0) * 2, executors=["triton"])
    with noop_launches():
        jf(torch.empty(1024, 34000, dtype=torch.bfloat16))
    assert [cost.programs(k) for k in triton_exec.last_kernels(jf)] == [133]


def test_chunking_rule():
    chunking = split_reductions.chunking
    assert chunking((), (4096,), (4096,)) == (0, 16)        # 256 programs of 256 rows
    assert chunking((), (4, 2048), (64,)) == (1, 8)         # [4, 8, 256, 64]
    assert chunking((), (64, 128), (4096,)) == (0, 32)      # [32, 2, 128, 4096]
    assert chunking((), (32, 512), (4096,)) == (1, 1)       # [32, 512, 4096]: the batch dim
    assert chunking((2,), (ROWS,), (64,)) == (0, 32)        # a middle dim, 2 x 32 programs
    assert chunking((), (ROWS,), (64,)) == (0, 32)
    assert chunking((), (8191,), (64,)) is None             # prime: no chunk of whole rows
    assert chunking((), (1000,), (512,)) is None            # 256000 elements per program
    assert chunking((), (1000, 4), (512,)) == (0, 10)       # 10 chunks of 400 rows
    assert chunking((), (4096,), (64,)) == (0, 16)
    assert chunking((), (2048,), (64,)) is None             # 131072 elements per program
    assert chunking((200,), (4096,), (64,)) is None         # 200 programs already


def test_llama_rms_norm_backward_weight_gradient_fills_the_gpu():
    """reduction_cost's case: transformers' RMSNorm at [4096, 4096] bf16 (compiled only)."""
    def rms_norm(x, w):
        xf = x.to(torch.float32)
        return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)
    x = torch.empty(4096, 4096, dtype=torch.bfloat16, requires_grad=True)
    w = torch.empty(4096, dtype=torch.bfloat16, requires_grad=True)
    jf = ir.jit(rms_norm, executors=["triton"])
    with noop_launches():
        out = jf(x, w)
        torch.autograd.grad(out, [x, w], torch.empty_like(out))
    assert [cost.programs(k) for k in column_kernels(jf, "backward")] == [256, 16]
