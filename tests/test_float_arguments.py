"""Float arguments: runtime values in "symbolic values" mode (one entry serves every value; kernels
receive them as scalar arguments), constants of the trace in "constant values" mode."""
import logging
import math

import pytest
import torch
from hypothesis import assume, given, settings, strategies as st

import ir
import triton_exec

SYMBOLIC, CONSTANT = "symbolic values", "constant values"
VALUES = [0.5, 0.25, -1.5, 0.0, -0.0, 3.0, 1e30, float("inf"), float("-inf"), float("nan")]


def program(x, s: float, y):
    a = x * s + (1 - s)
    b = torch.clamp(y, min=s * 2.0) + (y > s)       # a fp32 comparison with s stays runtime
    return a, b, x.bfloat16() * (s / 3), -s * y


def check(jfn, fn, *args):
    for got, expected in zip(jfn(*args), fn(*args)):
        if got.dtype == torch.bfloat16:     # the interpreter truncates float -> bf16
            torch.testing.assert_close(got.float(), expected.float(), rtol=2e-2, atol=1e-2,
                                       equal_nan=True)
        else:
            torch.testing.assert_close(got, expected, equal_nan=True)


def test_one_entry_serves_every_float_value_in_symbolic_mode():
    jfn = ir.jit(program, executors=["triton"], cache=SYMBOLIC)
    g = torch.Generator().manual_seed(0)
    for s in VALUES:
        x, y = torch.randn(4, 8, generator=g), torch.randn(4, 8, generator=g)
        check(jfn, program, x, s, y)
    assert (ir.cache_stats(jfn).misses, ir.cache_stats(jfn).hits) == (1, len(VALUES) - 1)
    records = triton_exec.last_kernels(jfn)
    assert len(records) == 2
    params = {p.name: p.kind for r in records for p in r.lowered.params}
    assert params["s"] == "float"           # the kernel receives s as a scalar argument
    assert "def computation(x, s, y):" in str(ir.last_traces(jfn)[-1])
    assert "if type(s) is not float: return False" in str(ir.last_prologue(jfn))
    for r in records:                       # no value of s baked into a kernel
        assert "0.5" not in r.source and "nan" not in r.source


@settings(max_examples=25)
@given(s=st.floats(allow_nan=True, allow_infinity=True, width=32),
       shape=st.sampled_from([(3, 5), (2, 8), (16,)]))
def test_symbolic_floats_match_eager_for_any_value(s, shape):
    # eager refuses a finite clamp bound past fp32's range (`s * 2.0`): not checked at run time
    # in symbolic mode (README, "Not supported yet")
    assume(not math.isfinite(s * 2.0) or abs(s * 2.0) <= torch.finfo(torch.float32).max)
    jfn = ir.jit(program, executors=["triton"], cache=SYMBOLIC)
    x, y = torch.randn(shape), torch.randn(shape)
    check(jfn, program, x, s, y)
    check(jfn, program, x, 0.5, y)      # the same entry, another value
    assert ir.cache_stats(jfn).misses == 1


def test_constant_mode_keeps_floats_constant():
    jfn = ir.jit(program, executors=["triton"], cache=CONSTANT)
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    for s in (0.5, 0.25, 0.5):
        check(jfn, program, x, s, y)
    assert (ir.cache_stats(jfn).misses, ir.cache_stats(jfn).hits) == (2, 1)
    assert all(p.kind != "float" for r in triton_exec.last_kernels(jfn) for p in r.lowered.params)
    assert "0.5" in triton_exec.last_kernels(jfn)[0].source


def test_control_flow_on_a_float_guards_the_branch(caplog):
    def f(x, s: float):
        if s > 0:
            return x * s
        return x - s

    jfn = ir.jit(f, executors=["triton"], cache=SYMBOLIC)
    x = torch.randn(8)
    with caplog.at_level(logging.INFO, logger="ir.recompiles"):
        for s in (0.5, 2.0, -1.0, -3.0, float("nan"), float("nan"), 1.5):
            torch.testing.assert_close(jfn(x, s), f(x, s), equal_nan=True)
    assert ir.cache_stats(jfn).misses == 3      # s > 0, s <= 0, NaN (pinned: it compares false)
    assert any("guard s > 0 failed: s = -1.0" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_narrow_float_comparison_specializes_the_value(dtype):
    def f(x, s: float):
        return (x > s).to(x.dtype) + x * s

    jfn = ir.jit(f, executors=["triton"], cache=SYMBOLIC)
    x = torch.randn(4, 8).to(dtype)
    for s in (0.3, 0.3, 0.7):
        torch.testing.assert_close(jfn(x, s).float(), f(x, s).float(), rtol=2e-2, atol=2e-2)
    assert ir.cache_stats(jfn).misses == 2       # rounded to the dtype as eager does: pinned
    found = ir.explain(jfn, x, 0.7).as_dict()["specialized"]
    assert [(s["of"], s["value"]) for s in found] == [("s", 0.7)]


def test_a_float_an_opaque_op_needs_is_specialized():
    def f(x, s: float):
        return torch.nn.functional.leaky_relu(x, s) * s

    jfn = ir.jit(f, executors=["triton"], cache=SYMBOLIC)
    x = torch.randn(4, 8)
    for s in (0.1, 0.1, 0.2):
        torch.testing.assert_close(jfn(x, s), f(x, s))
    assert ir.cache_stats(jfn).misses == 2
    (item,) = [s for s in ir.explain(jfn, x, 0.2).specialized if s["of"] == "s"]
    assert item["value"] == 0.2 and "leaky_relu" in item["cause"]


def test_float_arithmetic_in_the_function_runs_on_the_host():
    def f(x, s: float, n: int):
        scale = (s * n - 1.0) / (2 + s)
        return x * scale + n * 0.5

    jfn = ir.jit(f, executors=["triton"], cache=SYMBOLIC)
    x = torch.randn(3, 8)
    for s, n in ((0.5, 2), (1.5, 3), (-0.25, 7)):
        torch.testing.assert_close(jfn(x, s, n), f(x, s, n))
    assert ir.cache_stats(jfn).misses == 1
    assert not math.isnan(jfn(x, 0.0, 1).sum().item())


def test_a_float_the_host_computes_from_a_size_is_a_kernel_argument():
    def f(x):
        return x * x.size(-1) ** -0.5 + 1

    jfn = ir.jit(f, executors=["triton"], cache=SYMBOLIC)
    for shape in ((3, 16), (5, 64)):
        x = torch.randn(shape)
        torch.testing.assert_close(jfn(x), f(x))
    assert ir.cache_stats(jfn).misses == 1
    (record,) = triton_exec.last_kernels(jfn)
    assert any(p.kind == "float" for p in record.lowered.params)
    assert ir.explain(jfn, x).left_to_torch == []
