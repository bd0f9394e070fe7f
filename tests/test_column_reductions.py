"""Reductions over outer dims fused with their neighbours (issue 28 item 1): random programs of
an elementwise producer (with a weight broadcast along the rows), a reduction over the leading
dims or a middle one (sum, mean, amax, amin; keepdim or not) and an elementwise op after it, in fp32/fp16/bf16,
over laid-out inputs of 1 to a few thousand rows, in both cache modes, against eager within the
README's tolerance (summation order only: fp32 accumulation, rounded once), forward and gradient;
NaN/inf as eager; empty row sets as eager. Each program is one kernel (no torch reduction), and
the norm weights' gradients and GQA's repeated k/v gradients are fused."""
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, note, settings
from hypothesis import strategies as st

import ir
import triton_exec
from semantics import laid_out
from test_reductions import TOLERANCE, handwritten_rms_norm, torch_reductions

COLUMN = {
    "sum": lambda x, dims, keep: x.sum(dims, keepdim=keep),
    "mean": lambda x, dims, keep: x.mean(dims, keepdim=keep),
    "amax": lambda x, dims, keep: x.amax(dims, keepdim=keep),
    "amin": lambda x, dims, keep: torch.amin(x, dims, keepdim=keep),
}
BEFORE = {"none": lambda x, w: x, "weight": lambda x, w: x * w,
          "silu": lambda x, w: F.silu(x) + w}
AFTER = {"none": lambda y: y, "add": lambda y: y + 1.0, "sqrt": lambda y: torch.sqrt(y.abs())}
FLOATS = [torch.float32, torch.float16, torch.bfloat16]


def program(reduction, before, after, dims, keep):
    def fn(x, w):
        return AFTER[after](COLUMN[reduction](BEFORE[before](x, w), dims, keep))
    return fn


def assert_close_as_contract(actual, expected, rows: int):
    """The output dtype's tolerance (fp32: scaled by sqrt of the rows summed); NaN where eager
    has NaN."""
    tol = TOLERANCE[expected.dtype] * (max(1.0, math.sqrt(rows) / 8)
                                       if expected.dtype == torch.float32 else 1.0)
    torch.testing.assert_close(actual, expected, rtol=tol, atol=tol, equal_nan=True)


@st.composite
def column_cases(draw, max_rows=3000):
    reduction = draw(st.sampled_from(sorted(COLUMN)))
    dims = draw(st.sampled_from([(0,), (0, 1), (1,)]))     # leading dims, or a middle one
    rows = draw(st.one_of(st.integers(1, 40), st.integers(41, max_rows)))
    cols = draw(st.integers(1, 70))
    shape = {(0,): (rows, cols), (0, 1): (draw(st.integers(1, 4)), max(1, rows // 4), cols),
             (1,): (draw(st.integers(1, 3)), max(1, rows // 3), cols)}[dims]
    dtype = draw(st.sampled_from(FLOATS))
    seed = draw(st.integers(0, 2 ** 16))
    x = draw(laid_out(torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)))
    w = torch.randn(cols, generator=torch.Generator().manual_seed(seed + 1)).to(dtype)
    return (reduction, draw(st.sampled_from(sorted(BEFORE))), draw(st.sampled_from(sorted(AFTER))),
            dims, draw(st.booleans()), x, w,
            draw(st.sampled_from(["constant values", "symbolic values"])))


def _rows(x, dims):
    return math.prod(x.shape[d] for d in dims)


@settings(max_examples=20)
@given(column_cases())
def test_random_column_reductions_are_one_kernel_as_eager(case):
    reduction, before, after, dims, keep, x, w, mode = case
    note(f"{reduction} {before} {after} dims={dims} keep={keep} {x.dtype} {tuple(x.shape)} "
         f"strides {x.stride()} {mode}")
    fn = program(reduction, before, after, dims, keep)
    jf = ir.jit(fn, executors=["triton"], cache=mode)
    assert_close_as_contract(jf(x, w), fn(x, w), _rows(x, dims))
    assert torch_reductions(jf) == [] and len(triton_exec.last_kernels(jf)) == 1


@settings(max_examples=10)
@given(column_cases(max_rows=200))
def test_random_column_reduction_gradients_match_eager(case):
    reduction, before, after, dims, keep, x, w, mode = case
    if reduction in ("amax", "amin") and x.dtype != torch.float32:
        x, w = x.float(), w.float()     # ties of rounded values split the gradient
    note(f"{reduction} {before} {after} dims={dims} keep={keep} {x.dtype} {tuple(x.shape)} {mode}")
    fn = program(reduction, before, after, dims, keep)
    jf = ir.jit(fn, executors=["triton"], cache=mode)
    leaves = [t.detach().clone().requires_grad_() for t in (x, w)]
    refs = [t.detach().clone().requires_grad_() for t in (x, w)]
    out, expected = jf(*leaves), fn(*refs)
    g = torch.randn(expected.shape, generator=torch.Generator().manual_seed(1)).to(x.dtype)
    got = torch.autograd.grad(out, leaves, g, allow_unused=True)
    want = torch.autograd.grad(expected, refs, g, allow_unused=True)
    assert_close_as_contract(out.detach(), expected.detach(), _rows(x, dims))
    for a, e in zip(got, want):     # the weight's gradient sums the rows once more
        assert (a is None) == (e is None)
        if e is not None:
            assert_close_as_contract(a / 2, e / 2, 4 * _rows(x, dims))


def test_nan_inf_and_empty_row_sets_as_eager():
    x = torch.tensor([[1.0, math.nan, -math.inf, 2.0], [math.inf, 0.0, -math.inf, -1.0],
                      [3.0, 1.0, 5.0, math.nan]])
    for name in COLUMN:
        fn = program(name, "none", "none", (0,), False)
        torch.testing.assert_close(ir.jit(fn, executors=["triton"])(x, x[0]), fn(x, x[0]),
                                   equal_nan=True)
    empty, w = torch.randn(0, 5), torch.ones(5)
    for mode in ("constant values", "symbolic values"):
        fn = program("sum", "weight", "add", (0,), True)
        torch.testing.assert_close(ir.jit(fn, executors=["triton"], cache=mode)(empty, w),
                                   fn(empty, w))
        fn = program("amax", "none", "none", (0,), False)
        with pytest.raises(IndexError):
            fn(empty, w)
        with pytest.raises(IndexError):
            ir.jit(fn, executors=["triton"], cache=mode)(empty, w)


def test_symbolic_rows_compile_once():
    fn = program("sum", "weight", "add", (0, 1), False)
    jf = ir.jit(fn, executors=["triton"], cache="symbolic values")
    for b, t in [(2, 3), (5, 7), (3, 40)]:
        x, w = torch.randn(b, t, 24), torch.randn(24)
        assert_close_as_contract(jf(x, w), fn(x, w), b * t)
    assert ir.cache_stats(jf).misses == 1 and torch_reductions(jf) == []


def test_norm_weight_gradient_is_fused():
    x, w = torch.randn(2, 9, 64, requires_grad=True), torch.randn(64, requires_grad=True)
    jf = ir.jit(handwritten_rms_norm, executors=["triton"])
    out = jf(x, w)
    got = torch.autograd.grad(out, (x, w), torch.ones_like(out))
    want = torch.autograd.grad(handwritten_rms_norm(x, w), (x, w), torch.ones_like(out))
    for a, e in zip(got, want):
        assert_close_as_contract(a, e, 18)
    backward = [passes[-1] for passes in ir.last_backward_traces(jf).values()]
    assert not [e for t in backward for e in t.eqns if e.prim.name == "sum"]


def test_repeat_kv_gradient_is_fused():
    def repeat_kv(k):       # transformers' GQA repeat: its gradient sums a middle dim
        b, h, t, d = k.shape
        return k[:, :, None].expand(b, h, 3, t, d).reshape(b, h * 3, t, d) * 2
    k = torch.randn(2, 2, 5, 8, requires_grad=True)
    jf = ir.jit(repeat_kv, executors=["triton"])
    out = jf(k)
    g = torch.randn(out.shape)
    assert_close_as_contract(torch.autograd.grad(out, k, g)[0],
                             torch.autograd.grad(repeat_kv(k), k, g)[0], 3)
    backward = [passes[-1] for passes in ir.last_backward_traces(jf).values()]
    assert not [e for t in backward for e in t.eqns if e.prim.name == "sum"]
