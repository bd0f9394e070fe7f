"""The fusible ops models use, one by one against eager over edge values (NaN, ±inf, ±0, tiny,
huge), forward and gradient, in both executors and cache modes: gelu (both approximations),
silu, erf, pow by a number, clamp (bounds None, crossed or NaN; clamp_min/clamp_max), masked_fill,
chunk/split/unbind. A SwiGLU written with chunk is one kernel forward and one backward, and one
cache entry serves every batch and sequence size in symbolic mode."""
import contextlib
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, note, settings
from hypothesis import strategies as st

import ir
import triton_exec
from semantics import EXAMPLES, assert_bits_equal, grid, jit, laid_out, outcome
from test_semantics_unary import assert_within_ulps, domain_values, ulp

ACTIVATIONS = {
    "gelu": lambda x: F.gelu(x), "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": lambda x: F.silu(x), "erf": lambda x: torch.erf(x)}
FLOATS = [torch.float32, torch.bfloat16]


@contextlib.contextmanager
def eager_kernels():
    """eager's own (ATen) CPU kernels: eager's CPU hands fp32/bf16 gelu of more than one element
    to oneDNN, whose gelu(inf) is NaN and which overflows to inf from 1.7e38 up; eager's kernel
    (as its CUDA one and its one-element and fp16/fp64 CPU paths) gives inf and the value."""
    enabled = torch.backends.mkldnn.enabled
    torch.backends.mkldnn.enabled = False
    try:
        yield
    finally:
        torch.backends.mkldnn.enabled = enabled


def leaf(t):
    return t.detach().clone().requires_grad_()


def value_and_grad(fn, x, g):
    x = leaf(x)
    y = fn(x)
    (gx,) = torch.autograd.grad(y, x, g)
    return y.detach(), gx


def normal(actual, expected, x):
    """Where a bf16 result is compared: bf16 subnormals (input, result, ours or eager's) are
    rounded by Triton's interpreter its own way (see test_semantics_unary)."""
    if expected.dtype != torch.bfloat16:
        return torch.ones_like(expected, dtype=torch.bool)
    tiny = torch.finfo(torch.bfloat16).tiny
    return (((expected.abs() >= tiny) & (actual.abs() >= tiny)) | (expected == actual)) & (
        (x.abs() >= tiny) | (x == 0))


def assert_near_eager(actual, expected, x, cancellation):
    """NaN exactly where eager has NaN, infinities exactly, finite values within 8 ulp of the
    dtype plus `cancellation` (what a formula's cancellation, 1 + erf(x) or 1 - tanh(x)**2 near
    -1, makes of a last-bit difference between eager's libm and ours)."""
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    nan = expected.isnan()
    assert torch.equal(actual.isnan(), nan), f"NaN differs:\n{actual}\n{expected}"
    inf = expected.isinf()
    assert torch.equal(actual[inf], expected[inf]), f"inf differs:\n{actual}\n{expected}"
    finite = ~(nan | inf) & normal(actual, expected, x)
    bound = 8 * ulp(expected).double() + cancellation
    error = (actual.double() - expected.double()).abs()
    bad = finite & ~(error <= bound)
    assert not bool(bad.any()), (f"at x = {x[bad].tolist()[:4]}: got {actual[bad].tolist()[:4]}, "
                                 f"eager {expected[bad].tolist()[:4]}")


def cancellation(op, x):
    """gelu's 1 + erf / 1 + tanh and its gradient's 1 - tanh**2 cancel for negative x: a last
    bit of erf or tanh (2**-24 near 1) then moves the result by about 2**-22 * (|x| + |x|**3 /
    8) (beyond |x| = 8 both saturate exactly)."""
    if not op.startswith("gelu"):
        return torch.zeros_like(x, dtype=torch.float64)
    a = x.double().abs().clamp(max=8.0)
    return 2.0**-22 * (a + a**3 / 8)


@pytest.mark.parametrize("op", sorted(ACTIVATIONS))
@settings(max_examples=max(EXAMPLES // 2, 10))
@given(values=domain_values(), where=grid, dtype=st.sampled_from(FLOATS), data=st.data())
def test_activations_and_their_gradients_over_the_whole_domain(op, values, where, dtype, data):
    executor, mode = where
    x = data.draw(laid_out(torch.tensor(values).to(dtype)))
    g = data.draw(laid_out((torch.rand(len(values), generator=torch.Generator().manual_seed(
        len(values))) * 4 - 2).to(dtype)))
    note(f"{op} {dtype} {executor} {mode}: x={x.tolist()} g={g.tolist()}")
    fn = ACTIVATIONS[op]
    y, gx = value_and_grad(jit(fn, executor, mode), x, g)
    # a fused bf16 activation and its gradient (eager's gelu_backward, silu_backward kernels) are
    # computed in fp32 and rounded once: compared with eager's fp32 results rounded, by eager's
    # own kernels (eager's CPU bf16 erf is not that: erf(-8.3e-7) is -7.7e-7 there); erf's
    # gradient is eager's chain of ops in the dtype (2 / sqrt(pi) * exp(-x ** 2) * grad, x ** 2
    # rounded first); the torch executor runs eager's ops
    ref = torch.float32 if executor == "triton" else dtype
    with eager_kernels() if executor == "triton" else contextlib.nullcontext():
        ey, egx = (t.to(dtype) for t in value_and_grad(fn, x.to(ref), g.to(ref)))
    if op == "erf":
        egx = value_and_grad(fn, x, g)[1]
    assert_near_eager(y, ey, x, cancellation(op, x))
    assert_near_eager(gx, egx, x, cancellation(op, x) * g.double().abs())


POW_EXPONENTS = (0, 1, 2, 3, 4, 5, 0.5, -0.5, -1, -2, 2.5, -1.5, 1 / 3, 1.0, 2.0, -3)


@pytest.mark.parametrize("e", POW_EXPONENTS)
@settings(max_examples=10)
@given(values=domain_values(), where=grid, dtype=st.sampled_from(FLOATS),
       form=st.sampled_from(["x ** e", "torch.pow(x, e)", "x.pow(e)"]), data=st.data())
def test_pow_by_a_number_and_its_gradient(e, values, where, dtype, form, data):
    executor, mode = where

    def power(exponent):
        namespace = {"torch": torch}
        exec(f"def f(x):\n    return {form.replace('e', repr(exponent))}\n", namespace)
        return namespace["f"]

    x = data.draw(laid_out(torch.tensor(values).to(dtype)))
    g = (torch.rand(len(values), generator=torch.Generator().manual_seed(1)) * 4 - 2).to(dtype)
    note(f"{form} e={e} {dtype} {executor} {mode}: {x.tolist()}")
    y, gx = value_and_grad(jit(power(e), executor, mode), x, g)
    # a fused kernel takes a float exponent as fp32, as eager on CUDA converts it (eager on CPU
    # keeps it double: x ** (1 / 3) of 3.9e12 is 5 fp32 ulps away)
    fp32 = isinstance(e, float) and executor == "triton"
    ey, egx = value_and_grad(power(torch.tensor(e).item() if fp32 else e), x, g)
    # eager rounds x * x * x twice in bf16 (we once): 2 ulps there
    compared = normal(y, ey, x)
    assert_within_ulps(y[compared], ey[compared], 4 if dtype == torch.float32 else 2)
    # the gradient, grad * (e * x ** (e - 1)): eager rounds each of its ops to the dtype
    nan, inf = egx.isnan(), egx.isinf()
    assert torch.equal(gx.isnan(), nan) and torch.equal(gx[inf], egx[inf]), f"{gx}\n{egx}"
    rtol = 1e-5 if dtype == torch.float32 else 2e-2
    compared = ~(nan | inf) & normal(gx, egx, x)
    torch.testing.assert_close(gx[compared], egx[compared], rtol=rtol, atol=0)


@settings(max_examples=EXAMPLES)
@given(e=st.sampled_from([0, 1, 2, 3, 5, 7, -1, -2, 0.5, 2.0]),
       dtype=st.sampled_from([torch.int32, torch.int8, torch.uint8, torch.int16]),
       values=st.lists(st.integers(-300, 300), min_size=1, max_size=12), where=grid)
def test_pow_of_integers_wraps_and_refuses_as_eager(e, dtype, values, where):
    executor, mode = where
    x = torch.tensor(values).to(dtype)
    fn = (lambda e: lambda x: x ** e)(e)
    expected = outcome(fn, x)
    note(f"x ** {e} {dtype} {executor} {mode}: {x.tolist()} -> {expected}")
    actual = outcome(jit(fn, executor, mode), x)
    if isinstance(expected, type):      # a negative integer power: eager's RuntimeError
        assert actual is expected
        with pytest.raises(RuntimeError, match="Integers to negative integer powers"):
            jit(fn, executor, mode)(x)
        return
    if expected.is_floating_point():
        assert_within_ulps(actual, expected, 4)
    else:
        assert_bits_equal(actual, expected)


EDGES = (0.0, -0.0, math.nan, math.inf, -math.inf, 0.5, -0.5, 1.5, -2.0, 3.0)
CLAMPS = ("x.clamp({lo}, {hi})", "torch.clamp(x, min={lo})", "torch.clamp(x, max={hi})",
          "x.clamp(None, {hi})", "torch.clip(x, {lo}, {hi})", "torch.clamp_min(x, {lo})",
          "x.clamp_max({hi})", "x.clamp(min={hi}, max={lo})")


@settings(max_examples=EXAMPLES)
@given(form=st.sampled_from(CLAMPS), lo=st.sampled_from(EDGES), hi=st.sampled_from(EDGES),
       values=st.lists(st.sampled_from(EDGES), min_size=1, max_size=12), where=grid,
       dtype=st.sampled_from(FLOATS), data=st.data())
def test_clamp_bits_and_gradient_at_its_bounds(form, lo, hi, values, where, dtype, data):
    """Bounds either None, crossed (eager gives max) or NaN; the gradient passes where
    min <= x <= max (the bounds included), zero elsewhere and where x or a bound is NaN."""
    executor, mode = where
    namespace = {"torch": torch, "nan": math.nan, "inf": math.inf}
    exec(f"def f(x):\n    return {form.format(lo=lo, hi=hi)}\n", namespace)
    fn = namespace["f"]
    x = data.draw(laid_out(torch.tensor(values).to(dtype)))
    g = torch.linspace(-2, 2, len(values)).to(dtype)
    note(f"{form.format(lo=lo, hi=hi)} {dtype} {executor} {mode}: {x.tolist()}")
    y, gx = value_and_grad(jit(fn, executor, mode), x, g)
    ey, egx = value_and_grad(fn, x, g)
    assert_bits_equal(y, ey)
    assert_bits_equal(gx, egx)


FILL_VALUES = (0.0, -0.0, math.nan, -math.inf, 1.7, -3, True, 2, 1e10)


@settings(max_examples=EXAMPLES)
@given(dtype=st.sampled_from(FLOATS + [torch.int32, torch.int8, torch.bool, torch.float16]),
       shape=st.sampled_from([(3, 4), (1, 4), (4,)]),
       mask_shape=st.sampled_from([(3, 4), (4,), (3, 1), (2, 3, 4), (1,)]),
       value=st.sampled_from(FILL_VALUES), form=st.sampled_from(["method", "function"]),
       where=grid, data=st.data())
def test_masked_fill_converts_broadcasts_and_refuses_as_eager(dtype, shape, mask_shape, value,
                                                               form, where, data):
    executor, mode = where
    gen = torch.Generator().manual_seed(len(mask_shape))
    x = data.draw(laid_out((torch.rand(shape, generator=gen) * 8 - 4).to(dtype)))
    mask = data.draw(laid_out(torch.rand(mask_shape, generator=gen) < 0.5))
    fn = ((lambda x, m: x.masked_fill(m, value)) if form == "method"
          else (lambda x, m: torch.masked_fill(x, m, value)))
    expected = outcome(fn, x, mask)
    note(f"{dtype}{list(shape)} mask{list(mask_shape)} value={value} {executor} {mode}")
    actual = outcome(jit(fn, executor, mode), x, mask)
    if isinstance(expected, type):      # eager's error: a shape or a value it cannot store
        assert actual is expected
        return
    assert_bits_equal(actual, expected)
    if dtype.is_floating_point:         # x's gradient: zero where filled
        g = torch.rand(expected.shape, generator=gen).to(dtype)
        xa, xb = leaf(x), leaf(x)
        (got,) = torch.autograd.grad(jit(fn, executor, mode)(xa, mask), xa, g)
        (want,) = torch.autograd.grad(fn(xb, mask), xb, g)
        torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("executor, mode", [("triton", "constant values"),
                                            ("triton", "symbolic values")])
def test_masked_fill_by_a_tensor_value_gets_its_gradient(executor, mode):
    def f(x, mask, v):
        return x.masked_fill(mask, v) * 2

    jfn = jit(f, executor, mode)
    gen = torch.Generator().manual_seed(0)
    x, v = torch.randn(4, 6, generator=gen), torch.tensor(1.25)
    mask = torch.rand(6, generator=gen) < 0.5
    (xa, va), (xb, vb) = (leaf(x), leaf(v)), (leaf(x), leaf(v))
    out, expected = jfn(xa, mask, va), f(xb, mask, vb)
    assert_bits_equal(out.detach(), expected.detach())
    g = torch.randn(4, 6, generator=gen)
    got, want = torch.autograd.grad(out, (xa, va), g), torch.autograd.grad(expected, (xb, vb), g)
    torch.testing.assert_close(got, want)
    assert "forward" in kernel_directions(jfn) and "backward" in kernel_directions(jfn)


SPLITS = ("x.chunk({n}, {d})", "torch.chunk(x, {n}, dim={d})", "x.split({n}, {d})",
          "torch.split(x, {n}, dim={d})", "x.split({sections}, {d})",
          "torch.split(x, {sections}, {d})", "x.unbind({d})", "torch.unbind(x, dim={d})")


@settings(max_examples=EXAMPLES)
@given(form=st.sampled_from(SPLITS), shape=st.lists(st.integers(0, 5), min_size=1, max_size=3),
       n=st.integers(0, 6), cuts=st.lists(st.integers(0, 6), max_size=3), where=grid,
       data=st.data())
def test_chunk_split_unbind_are_eagers_views_and_errors(form, shape, n, cuts, where, data):
    """Every piece as eager's (values, shape, strides, offset: a view of the input), its
    gradients, and eager's error for chunk(0), split(0) of a non-empty dim, sections that do
    not sum to the size."""
    executor, mode = where
    d = data.draw(st.integers(-len(shape), len(shape) - 1), label="dim")
    cuts = sorted(min(c, shape[d]) for c in cuts)
    sections = [b - a for a, b in zip([0] + cuts, cuts + [shape[d]])]
    if data.draw(st.booleans(), label="wrong sections"):
        sections[-1] += 1
    namespace = {"torch": torch}
    source = form.format(n=n, d=d, sections=sections)
    exec(f"def f(x):\n    return {source}\n", namespace)
    fn = namespace["f"]
    x = data.draw(laid_out(torch.randn(shape, generator=torch.Generator().manual_seed(n))))
    note(f"{source} on {list(shape)} {executor} {mode}")
    expected = outcome(fn, x)
    actual = outcome(jit(fn, executor, mode), x)
    if isinstance(expected, type):
        assert actual is expected
        return
    assert_bits_equal(actual, expected)
    for a, e in zip(actual, expected):
        if e.numel() == 0:
            continue
        assert (a.stride(), a.storage_offset()) == (e.stride(), e.storage_offset())
        assert a.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    if not expected:
        return
    xa, xb = leaf(x), leaf(x)
    pieces_a, pieces_b = jit(fn, executor, mode)(xa), fn(xb)
    used = data.draw(st.sets(st.integers(0, len(expected) - 1), min_size=1), label="pieces used")
    gs = [torch.randn(expected[k].shape) for k in sorted(used)]
    (got,) = torch.autograd.grad([pieces_a[k] for k in sorted(used)], xa, gs)
    (want,) = torch.autograd.grad([pieces_b[k] for k in sorted(used)], xb, gs)
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def swiglu_chunk(x):
    a, b = x.chunk(2, -1)
    return F.silu(a) * b


def swiglu_slices(x):
    n = x.shape[-1] // 2
    return F.silu(x[..., :n]) * x[..., n:]


def kernel_directions(jfn):
    return sorted(k.direction for k in triton_exec.last_kernels(jfn))


@pytest.mark.parametrize("fn", [swiglu_chunk, swiglu_slices])
@pytest.mark.parametrize("dtype", FLOATS)
def test_swiglu_is_one_kernel_forward_and_one_backward_for_every_size(fn, dtype):
    """SwiGLU, F.silu(a) * b with a, b = x.chunk(2, -1) (or slices): one forward kernel, one
    backward kernel, matching eager; in symbolic mode (B, T) = (2, 16), (3, 32), (5, 24) share
    one cache entry."""
    jfn = ir.jit(fn, executors=["triton"], cache="symbolic values")
    tol = {} if dtype == torch.float32 else dict(rtol=2e-2, atol=4e-2)
    gen = torch.Generator().manual_seed(0)
    for B, T in ((2, 16), (3, 32), (5, 24)):
        x = torch.randn(B, T, 64, generator=gen).to(dtype)
        xa, xb = leaf(x), leaf(x)
        out, expected = jfn(xa), fn(xb)
        torch.testing.assert_close(out, expected, **tol)
        g = torch.randn(out.shape, generator=gen).to(dtype)
        torch.testing.assert_close(torch.autograd.grad(out, xa, g)[0],
                                   torch.autograd.grad(expected, xb, g)[0], **tol)
        assert kernel_directions(jfn) == ["backward", "forward"]
    stats = ir.cache_stats(jfn)
    assert (stats.misses, stats.hits) == (1, 2)
    with torch.no_grad():
        torch.testing.assert_close(jfn(x), fn(x), **tol)
    assert kernel_directions(jfn) == ["forward"]
    assert not ir.explain(jfn, x).as_dict()["left_to_torch"]


def many_new_ops(x, mask):
    a, b = x.chunk(2, -1)
    return (F.gelu(a) + F.gelu(b, approximate="tanh") * torch.erf(a) + a.abs() ** 2.5 + b ** -1
            + a.clamp(-1, 1) + b.masked_fill(mask, 0.5) ** 0.5 + F.silu(a) * b)


@pytest.mark.parametrize("dtype", FLOATS)
def test_the_new_ops_compile_for_sm90_with_16_byte_accesses(dtype):
    """libdevice's erf, tanh, exp and pow compile (offline, sm_90), forward and backward, and
    the chunk pieces, the mask and the stores keep 16-byte accesses."""
    jfn = ir.jit(many_new_ops, executors=["triton"])
    gen = torch.Generator().manual_seed(0)
    x = leaf(torch.randn(4, 8, 128, generator=gen).to(dtype))
    mask = torch.rand(8, 64, generator=gen) > 0.5
    torch.testing.assert_close(jfn(x, mask), many_new_ops(x, mask), equal_nan=True,
                               **({} if dtype == torch.float32 else dict(rtol=2e-2, atol=4e-2)))
    records = triton_exec.last_kernels(jfn)
    assert sorted(k.direction for k in records) == ["backward", "forward"]
    for record in records:
        widths = record.access_widths(arch=90)
        assert set(widths["ld"]) == set(widths["st"]) == {16}, (record.direction, widths)


@pytest.mark.parametrize("executor, mode", [("triton", "constant values"),
                                            ("torch", "symbolic values")])
def test_iterating_over_a_tensor_unbinds_it_as_eager(executor, mode):
    def f(x):
        a, b = x
        return a * b + sum(row for row in x)

    x = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(0))
    xa, xb = leaf(x), leaf(x)
    out, expected = jit(f, executor, mode)(xa), f(xb)
    torch.testing.assert_close(out, expected)
    g = torch.randn(3, 4)
    torch.testing.assert_close(torch.autograd.grad(out, xa, g)[0],
                               torch.autograd.grad(expected, xb, g)[0])
    with pytest.raises(TypeError, match="0-d"):
        jit(lambda t: [u for u in t], executor, mode)(torch.tensor(1.0))
