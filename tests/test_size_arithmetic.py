"""Symbolic size arithmetic: in "symbolic values" mode sizes are IntProxies and Python's number
protocol on them (`+ - * / // % ** & | ^ << >>`, unary `- abs ~`, `round`, `math.floor/ceil/
trunc`, `divmod`, `min`/`max`, comparisons, `math.prod`, float mixing) gives the value eager
gives. Arithmetic alone records host prims and never specializes (one entry serves every size);
forcing a value (`int()`, `float()`, `bool()`, a comparison in control flow) guards it."""

import math

import ir
import pytest
import torch
from hypothesis import given, settings, strategies as st

SYMBOLIC = "symbolic values"


@st.composite
def expressions(draw, depth=0):
    """(Python source over the sizes `a`, `b`, whether it forces a value): a size expression
    whose every divisor and negative/fractional-power base is >= 1 by construction."""
    if depth >= 3 or draw(st.integers(0, 3)) == 0:
        leaf = draw(st.sampled_from(["a", "b", "int", "float"]))
        if leaf == "int":
            return str(draw(st.integers(-5, 5))), False
        if leaf == "float":
            return repr(draw(st.sampled_from([0.5, -1.25, 2.0, 3.75]))), False
        return leaf, False
    kind = draw(st.sampled_from(["binary", "safe_divide", "power", "unary", "bits", "minmax",
                                 "prod", "divmod", "force", "select"]))
    left, force_l = draw(expressions(depth + 1))
    right, force_r = draw(expressions(depth + 1))
    forces = force_l or force_r
    if kind == "binary":
        return f"({left} {draw(st.sampled_from(['+', '-', '*']))} {right})", forces
    if kind == "safe_divide":
        op = draw(st.sampled_from(["/", "//", "%"]))
        return f"({left} {op} (abs({right}) + 1))", forces
    if kind == "power":
        exponent = draw(st.sampled_from([0, 1, 2, 3, -1, -2, 0.5, -0.5]))
        return f"((abs({left}) + 1) ** {exponent})", forces
    if kind == "unary":
        fn = draw(st.sampled_from(["-{}", "abs({})", "round({})", "math.floor({})",
                                   "math.ceil({})", "math.trunc({})", "+{}"]))
        return "(" + fn.format(left) + ")", forces
    if kind == "bits":        # on ints only: a and b are ints, shifts are small
        op = draw(st.sampled_from(["&", "|", "^", "<<", ">>"]))
        count = draw(st.integers(0, 3))
        right = str(count) if op in ("<<", ">>") else draw(st.sampled_from(["a", "b", "7"]))
        return f"({draw(st.sampled_from(['a', 'b', '(a * b)']))} {op} {right})", False
    if kind == "minmax":
        return f"{draw(st.sampled_from(['min', 'max']))}({left}, {right})", True
    if kind == "prod":
        return f"math.prod(({left}, {right}, a))", forces
    if kind == "divmod":
        return f"divmod({left}, abs({right}) + 1)[{draw(st.integers(0, 1))}]", forces
    if kind == "force":
        return draw(st.sampled_from(["int({})", "float({})", "bool({})"])).format(left), True
    comparison = draw(st.sampled_from(["<", "<=", ">", ">=", "==", "!="]))
    return f"({left} if {left} {comparison} {right} else {right})", True


sizes = st.tuples(st.integers(2, 12), st.integers(2, 12))


@settings(max_examples=80)
@given(expression=expressions(), shapes=st.lists(sizes, min_size=3, max_size=3))
def test_generated_size_expressions_match_eager(expression, shapes):
    source, forces = expression
    ns = {"math": math}
    exec(f"def f(x):\n    a, b = x.shape\n    return x * ({source})\n", ns)
    f = ns["f"]
    j = ir.jit(f, executors=["torch"], cache=SYMBOLIC)
    for shape in shapes:
        x = torch.randn(*shape)
        torch.testing.assert_close(j(x), f(x), msg=lambda m: f"{source} at {shape}: {m}")
    if not forces:      # arithmetic alone: one entry serves every size
        assert ir.cache_stats(j).misses == 1, str(ir.last_prologue(j))


@pytest.mark.parametrize("program, floats", [
    (lambda x: x * x.size(-1) ** -0.5, True),                 # the attention scale
    (lambda x: x * (x.shape[-1] * 0.5), True),
    (lambda x: x + abs(x.shape[0] - 10), False),
    (lambda x: x.reshape(math.prod(x.shape)) * 2, False),
])
def test_the_issue_examples_serve_every_size(program, floats):
    j = ir.jit(program, executors=["torch"], cache=SYMBOLIC)
    for shape in [(4, 8), (12, 6), (7, 16)]:
        x = torch.randn(*shape)
        torch.testing.assert_close(j(x), program(x))
    assert ir.cache_stats(j).misses == 1
    source = str(ir.last_traces(j)[-1])
    assert ("f0 = " in source) == floats, source     # a float the host computes per call


def test_forcing_a_value_guards_it():
    def f(x):
        return x * int(x.shape[0] / 2) + float(x.shape[1])

    j = ir.jit(f, executors=["torch"], cache=SYMBOLIC)
    for shape in [(4, 8), (5, 8), (4, 9)]:     # int(4 / 2) == int(5 / 2): one entry serves both
        x = torch.randn(*shape)
        torch.testing.assert_close(j(x), f(x))
    assert (ir.cache_stats(j).misses, ir.cache_stats(j).hits) == (2, 1)
