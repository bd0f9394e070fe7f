"""Reductions fused with their neighbours (issue 28): random programs of an elementwise op, a
reduction (sum, mean, amax, amin over the last dim or the last two, keepdim or not; softmax,
log_softmax, logsumexp, var/std with a correction, rms_norm, layer_norm) and an elementwise op
after it, in fp32/fp16/bf16, over laid-out inputs of 1 to a few thousand elements per row, in
both cache modes, against eager within the README's tolerance (summation order only: fp32
accumulation, rounded once), forward and gradient; NaN/inf and empty rows as eager; softmax
edge rows (all -inf, huge logits); the hand-written RMSNorm (with its residual add) and softmax
are one kernel; rows longer than a block and rows of runtime length (symbolic mode, one entry
for every length) are looped in one kernel; reductions over dims apart run on torch, correctly
(outer dims: test_column_reductions.py)."""
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, note, settings
from hypothesis import strategies as st

import ir
import triton_exec
from semantics import assert_bits_equal, laid_out

REDUCTIONS = {
    "sum": lambda x, keep, two: x.sum((-2, -1) if two else -1, keepdim=keep),
    "mean": lambda x, keep, two: x.mean((-2, -1) if two else -1, keepdim=keep),
    "amax": lambda x, keep, two: x.amax((-2, -1) if two else -1, keepdim=keep),
    "amin": lambda x, keep, two: torch.amin(x, -1, keepdim=keep),
    "softmax": lambda x, keep, two: torch.softmax(x, -1),
    "log_softmax": lambda x, keep, two: F.log_softmax(x, dim=-1),
    "logsumexp": lambda x, keep, two: torch.logsumexp(x, -1, keepdim=keep),
    "var": lambda x, keep, two: x.var(-1, keepdim=keep),
    "std0": lambda x, keep, two: torch.std(x, -1, correction=0, keepdim=keep),
    "rms_norm": lambda x, keep, two: F.rms_norm(x, x.shape[-1:], eps=1e-6),
    "layer_norm": lambda x, keep, two: F.layer_norm(x, x.shape[-2:] if two else x.shape[-1:]),
}
BEFORE = {"none": lambda x: x, "mul": lambda x: x * 1.5, "exp": lambda x: torch.exp(x * 0.25)}
AFTER = {"none": lambda y: y, "add": lambda y: y + 1.0, "tanh": torch.tanh}
FLOATS = [torch.float32, torch.float16, torch.bfloat16]
# fp32 accumulation rounded once: eager's result and ours differ by summation order, up to
# about an ulp of the output dtype (fp32: a few ulps of the row's magnitude)
TOLERANCE = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def program(reduction, before, after, keep, two):
    def fn(x):
        return AFTER[after](REDUCTIONS[reduction](BEFORE[before](x), keep, two))
    return fn


def assert_close_as_contract(actual, expected, length: int):
    """Within the tolerance of the output dtype, scaled by sqrt(row length) for fp32 sums;
    NaN exactly where eager has NaN, infinities equal."""
    tol = TOLERANCE[expected.dtype] * (max(1.0, math.sqrt(length) / 8)
                                       if expected.dtype == torch.float32 else 1.0)
    torch.testing.assert_close(actual, expected, rtol=tol, atol=tol, equal_nan=True)


@st.composite
def reduction_cases(draw, max_row=300):
    reduction = draw(st.sampled_from(sorted(REDUCTIONS)))
    two = reduction in ("sum", "mean", "amax", "layer_norm") and draw(st.booleans())
    rows = draw(st.integers(1, 5))
    row = draw(st.one_of(st.integers(1, 40), st.integers(41, max_row)))
    shape = (rows, draw(st.integers(1, 4)), row) if two or draw(st.booleans()) else (rows, row)
    dtype = draw(st.sampled_from(FLOATS))
    x = draw(laid_out(torch.randn(shape, generator=torch.Generator().manual_seed(
        draw(st.integers(0, 2 ** 16)))).to(dtype)))
    return (reduction, draw(st.sampled_from(sorted(BEFORE))), draw(st.sampled_from(sorted(AFTER))),
            draw(st.booleans()), two, x, draw(st.sampled_from(["constant values",
                                                                "symbolic values"])))


def _row_length(x, two):
    return x.shape[-1] * (x.shape[-2] if two else 1)


@settings(max_examples=40)
@given(reduction_cases())
def test_random_reduction_programs_match_eager(case):
    reduction, before, after, keep, two, x, mode = case
    note(f"{reduction} {before} {after} keep={keep} two={two} {x.dtype} {tuple(x.shape)} "
         f"strides {x.stride()} {mode}")
    fn = program(reduction, before, after, keep, two)
    jf = ir.jit(fn, executors=["triton"], cache=mode)
    got = jf(x)
    assert_close_as_contract(got, fn(x), _row_length(x, two))
    if mode == "constant values" or not two:    # symbolic: several runtime reduced dims are
        assert torch_reductions(jf) == []       # left to torch; else every reduction fused


@settings(max_examples=20)
@given(reduction_cases(max_row=120))
def test_random_reduction_gradients_match_eager(case):
    reduction, before, after, keep, two, x, mode = case
    if reduction in ("amax", "amin") and x.dtype != torch.float32:
        x = x.float()       # ties of rounded values split the gradient: compare in fp32
    note(f"{reduction} {before} {after} keep={keep} two={two} {x.dtype} {tuple(x.shape)} {mode}")
    fn = program(reduction, before, after, keep, two)
    jf = ir.jit(fn, executors=["triton"], cache=mode)
    leaf, ref = x.detach().clone().requires_grad_(), x.detach().clone().requires_grad_()
    out, expected = jf(leaf), fn(ref)
    g = torch.randn(expected.shape, generator=torch.Generator().manual_seed(1)).to(x.dtype)
    (gx,), (ge,) = torch.autograd.grad(out, leaf, g), torch.autograd.grad(expected, ref, g)
    assert_close_as_contract(out.detach(), expected.detach(), _row_length(x, two))
    # a gradient sums the row once more: twice the forward's tolerance
    assert_close_as_contract(gx / 2, ge / 2, 4 * _row_length(x, two))


@pytest.mark.parametrize("row", [1000, 4099])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rows_of_thousands(row, dtype):
    x = torch.randn(3, row).to(dtype)
    for name in ("sum", "softmax", "rms_norm", "var"):
        fn = program(name, "none", "none", False, False)
        assert_close_as_contract(ir.jit(fn, executors=["triton"])(x), fn(x), row)


def kernels_of(fn, *args, mode="constant values"):
    jf = ir.jit(fn, executors=["triton"], cache=mode)
    return jf(*args), triton_exec.last_kernels(jf), jf


def torch_reductions(jf) -> list:
    """The reductions of the last call's final trace that torch runs."""
    final = ir.last_traces(jf)[-1]
    return [e.prim.name for e in final.eqns if e.prim.name in ("sum", "amax", "amin")]


def handwritten_rms_norm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def residual_rms_norm(x, r, w):
    return handwritten_rms_norm(x + r, w)


@pytest.mark.parametrize("mode", ["constant values", "symbolic values"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_handwritten_rms_norm_is_one_kernel(dtype, mode):
    x, r, w = (torch.randn(s).to(dtype) for s in ((2, 7, 96), (2, 7, 96), (96,)))
    for fn, args in ((handwritten_rms_norm, (x, w)), (residual_rms_norm, (x, r, w))):
        out, kernels, jf = kernels_of(fn, *args, mode=mode)
        assert_close_as_contract(out, fn(*args), 96)
        assert len(kernels) == 1 and torch_reductions(jf) == []
        assert "tl.reduce" in kernels[0].source


def test_softmax_and_log_softmax_are_one_kernel_each():
    x = torch.randn(5, 33)
    for fn in (lambda x: torch.softmax(x * 2, -1), lambda x: F.log_softmax(x, -1) + 1):
        out, kernels, jf = kernels_of(fn, x)
        assert len(kernels) == 1 and torch_reductions(jf) == []
        assert_close_as_contract(out, fn(x), 33)


def test_rms_norm_backward_reductions_are_fused():
    x, w = torch.randn(4, 64, requires_grad=True), torch.randn(64, requires_grad=True)
    jf = ir.jit(handwritten_rms_norm, executors=["triton"])
    out = jf(x, w)
    gx, gw = torch.autograd.grad(out, (x, w), torch.ones_like(out))
    ex, ew = torch.autograd.grad(handwritten_rms_norm(x, w), (x, w), torch.ones_like(out))
    assert_close_as_contract(gx, ex, 64)
    assert_close_as_contract(gw, ew, 64)
    backward = [k for k in triton_exec.last_kernels(jf) if k.direction == "backward"]
    assert any("tl.reduce" in k.source for k in backward)


EDGE_ROWS = {
    "all -inf": [-math.inf] * 5,
    "one +inf": [1.0, math.inf, 2.0, 0.0, -1.0],
    "-inf and finite": [-math.inf, 0.5, -math.inf, 1.0, 3.0],
    "huge logits": [3e38, -3e38, 1e38, 0.0, 3e38],
    "nan": [1.0, math.nan, 2.0, -math.inf, 0.0],
    "tiny": [1e-40, -1e-41, 0.0, -0.0, 1e-45],
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("name", ["softmax", "log_softmax", "logsumexp", "sum", "mean", "amax",
                                  "amin", "var"])
def test_edge_rows_as_eager(name, dtype):
    x = torch.tensor(list(EDGE_ROWS.values())).clamp(torch.finfo(dtype).min,
                                                      torch.finfo(dtype).max).to(dtype)
    fn = program(name, "none", "none", False, False)
    got, expected = ir.jit(fn, executors=["triton"])(x), fn(x)
    assert torch.equal(got.isnan(), expected.isnan()), (got, expected)
    assert torch.equal(got.isinf() & (got > 0), expected.isinf() & (expected > 0))
    assert torch.equal(got.isinf() & (got < 0), expected.isinf() & (expected < 0))
    finite = expected.isfinite()
    assert_close_as_contract(got[finite], expected[finite], 5)


def long_edge_rows(length: int) -> torch.Tensor:
    """The edge rows tiled to `length` (each value in every block of a looped row), and rows
    whose edge comes late: +inf, NaN or a finite max after a block of finite values or -inf
    (the running max turns infinite, or finite, between blocks)."""
    tiled = torch.tensor(list(EDGE_ROWS.values())).repeat(1, -(-length // 5))[:, :length]
    late = torch.randn(4, length, generator=torch.Generator().manual_seed(0))
    late[0, -3], late[1, -3], late[2, :17000], late[3, -2] = math.inf, math.nan, -math.inf, 50.0
    return torch.cat([tiled, late])


def assert_edges_as_eager(got, expected, length):
    assert torch.equal(got.isnan(), expected.isnan()), (got, expected)
    assert torch.equal(got.isinf() & (got > 0), expected.isinf() & (expected > 0))
    assert torch.equal(got.isinf() & (got < 0), expected.isinf() & (expected < 0))
    finite = expected.isfinite()
    assert_close_as_contract(got[finite], expected[finite], length)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", ["softmax", "log_softmax", "logsumexp"])
def test_long_edge_rows_as_eager_with_the_sum_in_the_max_loop(name, dtype):
    """Rows past ROW_LIMIT: the sum of exp(x - max) is summed in its max's loop (online), so a
    softmax reads the row twice (sum, outputs), a logsumexp once, with eager's NaN where the max
    is infinite (inf - inf) and -inf, inf and NaN as eager's; gradients too."""
    length = 16385 + 1000
    x = long_edge_rows(length).clamp(torch.finfo(dtype).min, torch.finfo(dtype).max).to(dtype)
    fn = program(name, "none", "none", False, False)
    leaf, ref = x.clone().requires_grad_(), x.clone().requires_grad_()
    got, kernels, jf = kernels_of(fn, leaf)
    expected = fn(ref)
    forward = [k for k in kernels if k.direction == "forward"]
    # eager's bf16 logsumexp rounds exp(x - max) to bf16 before summing: a loop of its own
    online = dtype == torch.float32 or name != "logsumexp"
    assert [k.source.count("for col_start") for k in forward] == [
        (1 if name == "logsumexp" else 2) if online else 2], forward[0].source
    assert_edges_as_eager(got.detach(), expected.detach(), length)
    g = torch.randn(expected.shape, generator=torch.Generator().manual_seed(1)).to(dtype)
    (gx,), (ge,) = torch.autograd.grad(got, leaf, g), torch.autograd.grad(expected, ref, g)
    # logsumexp's gradient is exp(x - max) / sum, eager's exp(x - result): apart where the
    # result rounds log(sum) away (|x| near fp32's max; README: Numerical contract)
    rows = x.abs().amax(-1) < 1e30 if name == "logsumexp" else slice(None)
    assert_edges_as_eager(gx[rows] / 2, ge[rows] / 2, 4 * length)


@pytest.mark.parametrize("mode", ["constant values", "symbolic values"])
def test_empty_reductions_as_eager(mode):
    x = torch.randn(3, 0)
    for fn in (lambda x: x.sum(-1), lambda x: x.mean(-1, keepdim=True),
               lambda x: torch.logsumexp(x, -1)):
        torch.testing.assert_close(ir.jit(fn, executors=["triton"], cache=mode)(x), fn(x),
                                   equal_nan=True)
    for fn in (lambda x: x.amax(-1), lambda x: x.amin(-1)):
        with pytest.raises(type(_raised(fn, x))):
            ir.jit(fn, executors=["triton"], cache=mode)(x)


def _raised(fn, x):
    try:
        fn(x)
    except Exception as e:  # noqa: BLE001
        return e
    raise AssertionError("eager did not raise")


def test_reductions_over_dims_apart_run_on_torch():
    x = torch.randn(6, 5, 3)
    out, kernels, jf = kernels_of(lambda x: (x * 2).sum((0, 2)) + 1, x)
    assert torch_reductions(jf) == ["sum"]
    torch.testing.assert_close(out, (x * 2).sum((0, 2)) + 1)


@pytest.mark.parametrize("dtype, mode", [(torch.float32, "symbolic values"),
                                         (torch.bfloat16, "constant values")])
def test_rows_longer_than_a_block_are_looped_in_one_kernel(dtype, mode):
    x = torch.randn(2, 16385 + 1000).to(dtype)
    x[1, 17000] = math.inf
    for name in ("softmax", "log_softmax", "logsumexp", "rms_norm", "var", "amax"):
        fn = program(name, "exp" if name == "var" else "none", "add", False, False)
        out, kernels, jf = kernels_of(fn, x, mode=mode)
        assert len(kernels) == 1 and torch_reductions(jf) == [], name
        assert "for col_start" in kernels[0].source
        assert_close_as_contract(out, fn(x), x.shape[-1])


@settings(max_examples=10, deadline=None)
@given(length=st.sampled_from([7, 300, 16385 + 1000]), sign=st.sampled_from([1.0, -1.0]),
       dtype=st.sampled_from([torch.float32, torch.bfloat16]),
       mode=st.sampled_from(["constant values", "symbolic values"]))
def test_a_loads_fill_outside_the_row_serves_every_reading_of_it(length, sign, dtype, mode):
    """A max, a min and a sum of one load (its `other` outside the row is the first's neutral
    value: the others fill their own), and a pad of it, whose padding is the load's 0: on rows of
    one sign, where a lane outside the row holding another reduction's neutral value would win."""
    def fn(x):
        return (x.amax(-1) + x.amin(-1) * 2 + x.sum(-1) * 3,
                F.pad(x, (0, 3)).amax(-1), F.pad(x, (2, 0)).amin(-1))
    x = (sign * (torch.rand(3, length) + 0.5)).to(dtype)
    out, kernels, jf = kernels_of(fn, x, mode=mode)
    assert torch_reductions(jf) == []
    if dtype == torch.float32:      # the max's fill is its load's
        assert any("other=float('-inf')" in k.source for k in kernels), kernels[0].source
    for got, expected in zip(out, fn(x)):
        assert_close_as_contract(got, expected, length)


def test_symbolic_row_lengths_compile_once():
    # every size is symbolic, the row's length too: the row is walked in blocks of COLS
    jf = ir.jit(residual_rms_norm, executors=["triton"], cache="symbolic values")
    for shape in [(2, 40), (5, 40), (3, 24), (2, 300)]:
        x, r, w = torch.randn(shape), torch.randn(shape), torch.randn(shape[-1])
        assert_close_as_contract(jf(x, r, w), residual_rms_norm(x, r, w), shape[-1])
        assert torch_reductions(jf) == [] and len(triton_exec.last_kernels(jf)) == 1
    assert ir.cache_stats(jf).misses == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_torch_executor_keeps_eager_ops_bit_for_bit(dtype):
    # no executor fuses the decompositions: the trace keeps torch.softmax, F.layer_norm, ...
    x = torch.randn(4, 33).to(dtype)
    w, b, t = torch.randn(33).to(dtype), torch.randn(33).to(dtype), torch.randint(0, 33, (4,))
    for fn in (lambda x: torch.softmax(x * 2, -1), lambda x: F.log_softmax(x, -1),
               lambda x: torch.logsumexp(x, -1), lambda x: x.var(-1),
               lambda x: torch.std(x, -1, correction=0), lambda x: F.rms_norm(x, (33,), w),
               lambda x: F.layer_norm(x, (33,), w, b),
               lambda x: F.cross_entropy(x, t, label_smoothing=0.1)):
        leaf, ref = x.clone().requires_grad_(), x.clone().requires_grad_()
        out, expected = ir.jit(fn, executors=["torch"])(leaf), fn(ref)
        assert_bits_equal(out, expected)
        assert_bits_equal(torch.autograd.grad(out, leaf, torch.ones_like(out)),
                          torch.autograd.grad(expected, ref, torch.ones_like(expected)))
