"""Symbolic shapes through broadcasts: programs that combine a tensor with reductions of itself
(`x / x.sum(-1, keepdim=True)`, `x - x.amax(...)`) and with broadcast inputs, traced in
"symbolic values" mode with the Triton executor (the interpreter), match eager on every size
they serve. The passes (fusion, merge) compare symbolic sizes through the trace's own size
relations, never with `==` on proxies."""

import ir
import pytest
import torch
import triton_exec  # noqa: F401  (registers the "triton" executor)
from hypothesis import given, settings, strategies as st

SYMBOLIC = "symbolic values"
REDUCTIONS = ["sum", "mean", "amax", "amin"]


@st.composite
def programs(draw, ndim):
    """Source of `f(x, y)`: x combined with keepdim reductions of itself and with y, which
    broadcasts against x."""
    def term(depth):
        choice = draw(st.sampled_from(["x", "y", "reduce", "reduce", "squeezed"] +
                                      ["binary"] * (depth < 2)))
        if choice in ("x", "y"):
            return choice
        dim = draw(st.integers(-ndim, ndim - 1))
        reduction = draw(st.sampled_from(REDUCTIONS))
        if choice == "reduce":
            return f"x.{reduction}({dim}, keepdim=True)"
        if choice == "squeezed":
            return f"x.{reduction}({dim}).unsqueeze({dim})"
        op = draw(st.sampled_from(["+", "-", "*", "/"]))
        right = term(depth + 1)
        if op == "/":
            right = f"({right}).abs().add(1)"
        return f"({term(depth + 1)} {op} {right})"

    body = term(0)
    if draw(st.booleans()):
        body = f"({body}).exp()"
    return f"def f(x, y):\n    return {body} * 2\n"


@st.composite
def shapes(draw, ndim):
    sizes = draw(st.lists(st.integers(2, 9), min_size=ndim, max_size=ndim))
    keep = draw(st.lists(st.booleans(), min_size=ndim, max_size=ndim))
    y = [s if k else 1 for s, k in zip(sizes, keep)]
    drop = draw(st.integers(0, ndim - 1))     # y may have fewer dims (leading ones dropped)
    return tuple(sizes), tuple(y[drop:]) if all(s == 1 for s in y[:drop]) else tuple(y)


@settings(max_examples=30)
@given(data=st.data())
@pytest.mark.parametrize("ndim", [2, 3])
def test_generated_broadcast_and_reduction_programs(ndim, data):
    source = data.draw(programs(ndim), label="program")
    x_shape, y_shape = data.draw(shapes(ndim), label="shapes")
    ns = {}
    exec(source, ns)
    f = ns["f"]
    j = ir.jit(f, executors=["triton"], cache=SYMBOLIC)
    for scale in (1, 2):        # a second size through the same entry (or a new one)
        shape_x = tuple(s * scale if s != 1 else 1 for s in x_shape)
        shape_y = tuple(s * scale if s != 1 else 1 for s in y_shape)
        x, y = torch.randn(shape_x), torch.randn(shape_y)
        torch.testing.assert_close(j(x, y), f(x, y), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("program", [
    lambda x: x / x.sum(-1, keepdim=True),
    lambda x: x - x.mean(-1, keepdim=True),
    lambda x: x - x.amax(-1, keepdim=True),
    lambda x: (x - x.amax(0, keepdim=True)).exp(),
])
def test_the_issue_examples(program):
    j = ir.jit(program, executors=["triton"], cache=SYMBOLIC)
    for shape in [(4, 8), (6, 16)]:
        x = torch.rand(*shape) + 0.5
        torch.testing.assert_close(j(x), program(x))
    assert ir.cache_stats(j).misses == 1
    assert triton_exec.last_kernels(j)
