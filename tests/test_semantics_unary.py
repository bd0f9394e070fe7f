"""Class 6: unary ops over their whole domain. Each fused unary op matches eager to a few ulp of
fp32 for values tiny, small, moderate, large and huge, negative, ±0, ±inf and NaN (NaN exactly
where eager has NaN, signed zeros and infinities exactly); fp16/bf16 inputs, computed in fp32
and rounded once, to one ulp of their dtype. relu, maximum and minimum keep eager's signed zeros
and NaNs bit for bit. sigmoid and silu divide through the GPU's reciprocal instruction (1 ulp),
which the interpreter computes exactly: with a reciprocal one ulp off either way they stay within
3 fp32 ulps of the exact quotient."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, note, settings
from hypothesis import strategies as st

from semantics import EXAMPLES, assert_bits_equal, grid, jit, laid_out
from triton_exec import kernel_math

UNARY = {name: (lambda fn: lambda x: fn(x))(fn) for name, fn in {
    "neg": torch.neg, "abs": torch.abs, "exp": torch.exp, "log": torch.log, "sin": torch.sin,
    "cos": torch.cos, "tanh": torch.tanh, "sigmoid": torch.sigmoid, "sqrt": torch.sqrt,
    "rsqrt": torch.rsqrt, "relu": torch.relu, "silu": F.silu}.items()}
ULPS = 4        # fp32 ulps allowed (libdevice: <= 2 for these; eager's own error is ~1)
RANGES = {      # (lowest, highest) magnitude, drawn log-uniformly, either sign
    "tiny": (1e-38, 1e-6), "small": (1e-6, 1.0), "moderate": (1.0, 20.0),
    "large": (20.0, 100.0), "huge": (100.0, 3e38)}
SPECIAL = (0.0, -0.0, math.inf, -math.inf, math.nan)


@st.composite
def domain_values(draw):
    n = draw(st.integers(1, 16))
    values = []
    for _ in range(n):
        kind = draw(st.sampled_from(sorted(RANGES) + ["special"]))
        if kind == "special":
            values.append(draw(st.sampled_from(SPECIAL)))
            continue
        lo, hi = RANGES[kind]
        magnitude = math.exp(draw(st.floats(math.log(lo), math.log(hi))))
        values.append(magnitude if draw(st.booleans()) else -magnitude)
    return values


def ulp(t: torch.Tensor) -> torch.Tensor:
    """The spacing of t's dtype at |t| (the smallest subnormal at 0)."""
    a = t.abs()
    return torch.nextafter(a, torch.full_like(a, math.inf)) - a


def assert_within_ulps(actual, expected, ulps):
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    nan = expected.isnan()
    assert torch.equal(actual.isnan(), nan), f"NaN differs:\n{actual}\n{expected}"
    exact = expected.isinf() | (expected == 0)
    if expected.dtype == torch.bfloat16:    # bf16 subnormal results: eager's CPU kernels and
        tiny = torch.finfo(torch.bfloat16).tiny     # Triton's interpreter round them their own
        exact &= ~((expected == 0) & (actual.abs() < tiny))     # way (not bit-exact here)
    exact_ok = (actual == expected) & (torch.signbit(actual) == torch.signbit(expected))
    assert bool((exact_ok | ~exact | nan).all()), f"inf/±0 differ:\n{actual}\n{expected}"
    finite = ~(nan | exact)
    if expected.dtype == torch.bfloat16:
        finite &= expected.abs() >= tiny
    error = (actual.double() - expected.double()).abs()
    bound = ulps * ulp(expected).double()
    bad = finite & (error > bound)
    assert not bool(bad.any()), (f"more than {ulps} ulp at {expected[bad].tolist()[:4]}: "
                                 f"got {actual[bad].tolist()[:4]}")


@settings(max_examples=EXAMPLES)
@given(op=st.sampled_from(sorted(UNARY)), values=domain_values(), where=grid,
       dtype=st.sampled_from([torch.float32, torch.float32, torch.bfloat16, torch.float16]),
       data=st.data())
def test_unary_ops_over_their_whole_domain(op, values, where, dtype, data):
    executor, mode = where
    x = data.draw(laid_out(torch.tensor(values).to(dtype)))
    note(f"{op} {dtype} {executor} {mode}: {x.tolist()}")
    expected = UNARY[op](x)
    actual = jit(UNARY[op], executor, mode)(x)
    assert_within_ulps(actual, expected, ULPS if dtype == torch.float32 else 1)


SIGNED = (0.0, -0.0, math.nan, 1.0, -1.0)


@settings(max_examples=EXAMPLES)
@given(a=st.lists(st.sampled_from(SIGNED), min_size=5, max_size=5),
       b=st.lists(st.sampled_from(SIGNED), min_size=5, max_size=5), where=grid,
       op=st.sampled_from(["torch.maximum(x, y)", "torch.minimum(x, y)", "torch.relu(x)",
                           "x.clamp(min=0.0)", "x.clamp(max=-0.0)", "-x", "x * -1", "torch.abs(x)",
                           "torch.where(x > y, x, y)"]))
def test_signed_zeros_and_nans_as_eager(a, b, where, op):
    executor, mode = where
    namespace = {"torch": torch}
    exec(f"def f(x, y):\n    return {op}\n", namespace)
    f = namespace["f"]
    x, y = torch.tensor(a), torch.tensor(b)
    note(f"{op} {executor} {mode}: {a} {b}")
    assert_bits_equal(jit(f, executor, mode)(x, y), f(x, y))


def test_the_issue_example():
    x = torch.tensor([1e-6, -1e-6, 1e-30, 20.0, -100.0, 1e30, -0.0])
    assert_within_ulps(jit(UNARY["tanh"], "triton", "constant values")(x), torch.tanh(x), 2)


def reciprocal_one_ulp_off(direction: float):
    """`kernel_math.rcp` under the interpreter at the instruction's error bound: a finite nonzero
    result moved one ulp towards `direction` (0 and inf stay exact, as the instruction's)."""
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    def rcp(x, _semantic=None):
        with np.errstate(all="ignore"):
            exact = np.float32(1) / x.handle.data
        moved = np.nextafter(exact, np.float32(direction))
        data = np.where(np.isfinite(exact) & (exact != 0), moved, exact).astype(np.float32)
        return tl.core.tensor(TensorHandle(data, x.handle.dtype), x.type)
    return rcp


def exact_quotients(x: torch.Tensor) -> dict:
    """sigmoid and silu as eager's CUDA kernels divide, exactly (IEEE), by 1 + exp(-x) in fp32,
    exp the one the interpreter's kernels call (numpy's), rounded to x's dtype."""
    xf = x.float().numpy()
    with np.errstate(all="ignore"):
        d = np.float32(1) + np.exp(-xf)
        found = {"sigmoid": np.float32(1) / d, "silu": xf / d}
    return {op: torch.from_numpy(q).to(x.dtype) for op, q in found.items()}


# the 1/4 scaling keeps the reciprocal of 1 + exp(-x) normal down to its overflow at -88.72
SCALED = st.lists(st.floats(-89.0, -86.0), min_size=1, max_size=8)


@settings(max_examples=EXAMPLES)
@given(op=st.sampled_from(["sigmoid", "silu"]), values=domain_values(), scaled=SCALED,
       dtype=st.sampled_from([torch.float32, torch.bfloat16, torch.float16]),
       direction=st.sampled_from([math.inf, -math.inf]), mode=st.sampled_from(
           ["constant values", "symbolic values"]))
def test_sigmoid_and_silu_within_3_ulps_of_the_exact_quotient_with_the_reciprocal_one_ulp_off(
        op, values, scaled, dtype, direction, mode):
    """The README's bound: within 3 fp32 ulps of eager's quotient (the same 1 + exp(-x) divided
    exactly), ±0, ±inf and NaN exactly; fp16/bf16 within one ulp of the dtype."""
    x = torch.tensor(values + scaled).to(dtype)
    note(f"{op} {dtype} {mode} rcp towards {direction}: {x.tolist()}")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(kernel_math, "rcp", reciprocal_one_ulp_off(direction))
        actual = jit(UNARY[op], "triton", mode)(x)
    assert_within_ulps(actual, exact_quotients(x)[op], 3 if dtype == torch.float32 else 1)
