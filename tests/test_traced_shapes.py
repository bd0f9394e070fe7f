"""Inside a jitted function a traced tensor's shape is a `torch.Size`, as eager's: random
sequences of the Python operations library code does on shapes (`isinstance(s, torch.Size)`,
slicing, `+`, `*`, `numel()`, `==`, unpacking, `in` a set, a dict keyed by a shape,
`torch.broadcast_shapes`, a reshape or factory taking a derived shape, ...) give eager's values
with eager's Python types, in both cache modes and both executors, on a first call and on later
calls with other sizes (symbolic mode serves them from the same entry where the guards allow).
A torch.Size returned, or passed in, stays a torch.Size; a size, and a number argument in
symbolic mode, is an int (or a float) to `isinstance`."""
import math

import pytest
import torch
from hypothesis import given, note, settings
from hypothesis import strategies as st

from semantics import EXAMPLES, grid, jit

# Expressions of `s` (x.shape or x.size()) and `x`; each returns a Python value or a tensor.
SHAPE_EXPRESSIONS = (
    "type(s) is torch.Size", "isinstance(s, torch.Size)", "isinstance(s, tuple)",
    "s", "s[1:]", "s[:-1]", "s[::-1]", "s[0]", "s[-1]", "s + (1,)", "(1,) + s", "s * 2",
    "s[:-1] + (-1,)", "s.numel()", "math.prod(s)", "len(s)", "list(s)", "tuple(s)", "max(s)",
    "min(s)", "sum(s)", "s.count(s[-1])", "s.index(s[-1])", "torch.Size([*s[:-1], 1])",
    "torch.Size(s)", "s == torch.Size(list(s))", "s == tuple(s)", "s != (1,) * len(s)",
    "s == x.size()", "x.size(-1)", "x.size(dim=0)", "s[-1] // 2", "divmod(s[-1], 2)",
    "s[-1] in {2, 3, 4}", "{torch.Size([2, 3]): 'a', torch.Size([3]): 'b'}.get(s, 'c')",
    "torch.broadcast_shapes(s, (1,) * len(s))", "(lambda first, *rest: (first, rest))(*s)",
    "x.new_zeros(s)", "x.reshape(s[:-1] + (-1,))", "x.view(*s)", "x.expand(s)",
    "torch.zeros(s).shape", "x.new_ones(s[1:]).size()", "x.reshape(s.numel())",
    "x.flatten().shape == torch.Size([s.numel()])", "x.T.shape", "x.unsqueeze(0).shape[1:]",
    "isinstance(s[0], int)", "isinstance(s[-1] / 2, float)", "isinstance(s.numel(), int)",
    "[i for i in range(s[-1])]",
)
# differs in symbolic mode, by design: a traced size prints as its symbol (README)
CONSTANT_MODE_ONLY = ("str(s)", "repr(s)")


def shape_program(expressions, via_size: bool):
    source = "def f(x):\n    s = x.size() if via_size else x.shape\n    return x * 2, [\n"
    source += "".join(f"        {e},\n" for e in expressions) + "    ]\n"
    namespace = {"torch": torch, "math": math, "via_size": via_size}
    exec(source, namespace)     # noqa: S102  (a generated test program)
    return namespace["f"], source


def assert_same_python(actual, expected, path="out"):
    """Equal values of the same Python types, at any depth; tensors by value."""
    assert type(actual) is type(expected), f"{path}: {type(actual)} != {type(expected)}"
    if isinstance(expected, torch.Tensor):
        assert actual.shape == expected.shape and actual.dtype == expected.dtype, path
        torch.testing.assert_close(actual, expected, rtol=0, atol=0)
    elif isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected), f"{path}: {actual} != {expected}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_same_python(a, e, f"{path}[{i}]")
    else:
        assert actual == expected, f"{path}: {actual!r} != {expected!r}"


shapes = st.lists(st.integers(1, 5), min_size=1, max_size=3).map(tuple)


@settings(max_examples=EXAMPLES)
@given(data=st.data(), where=grid, via_size=st.booleans(), first=shapes,
       later=st.lists(st.lists(st.integers(1, 5), min_size=3, max_size=3), max_size=2))
def test_shape_operations_match_eager_with_eagers_types(data, where, via_size, first, later):
    executor, mode = where
    pool = SHAPE_EXPRESSIONS + (CONSTANT_MODE_ONLY if mode == "constant values" else ())
    expressions = data.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=6))
    fn, source = shape_program(expressions, via_size)
    note(f"{executor}, {mode}\n{source}")
    jfn = jit(fn, executor, mode)
    for shape in [first] + [tuple(sizes[:len(first)]) for sizes in later]:
        x = torch.randn(shape)
        note(f"x: {list(shape)}")
        assert_same_python(jfn(x), fn(x))


@pytest.mark.parametrize("mode", ["constant values", "symbolic values"])
def test_a_size_argument_and_output_stay_torch_size(mode):
    def f(x, size):
        assert type(size) is torch.Size and type(x.shape) is torch.Size
        return x.reshape(size), size, {"shape": x.shape[1:]}
    x = torch.randn(2, 6)
    out, size, extra = jit(f, "torch", mode)(x, torch.Size([3, 4]))
    assert type(size) is torch.Size and size == (3, 4)
    assert type(extra["shape"]) is torch.Size and extra["shape"] == (6,)
    assert out.shape == (3, 4)


@pytest.mark.parametrize("executor", ["torch", "triton"])
def test_number_arguments_are_ints_and_floats_to_isinstance(executor):
    """transformers' `logits_to_keep`: `slice(-n, None) if isinstance(n, int) else n`, where
    n == 0 keeps every position; a traced int taken for a tensor index keeps one."""
    def f(x, n, scale):
        keep = slice(-n, None) if isinstance(n, int) else n
        return x[:, keep] * (scale if isinstance(scale, float) else 10.0)
    x = torch.randn(2, 5, 3)
    jfn = jit(f, executor, "symbolic values")
    for n, scale in [(0, 0.5), (2, 1.5), (3, 0.25)]:
        assert_same_python(jfn(x, n, scale), f(x, n, scale))
