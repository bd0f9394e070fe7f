"""Class 3: in-place paths are traced as their functional op and written into their tensor
(`ir.functionalize`), never as the out-of-place op alone (which would leave the tensor eager
mutates unchanged). Every path — the `inplace=` keyword (by name or position), `out=`, the
`Tensor.*_` methods and `torch.*_` functions, augmented assignment and setitem — on an argument or
an intermediate gives eager's result, leaves the caller's tensor as eager leaves it (values and a
bumped version counter) and returns the same object where eager does, in both executors and
cache modes."""
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, note, settings
from hypothesis import strategies as st

from semantics import EXAMPLES, grid, jit, laid_out

PATHS = {   # name the error must contain -> fn of (x, y) doing it on `t` (x or an intermediate)
    "relu": lambda t, y: F.relu(t, inplace=True),
    "relu ": lambda t, y: F.relu(t, True),
    "silu": lambda t, y: F.silu(t, inplace=True),
    "dropout": lambda t, y: F.dropout(t, 0.5, False, True),
    "leaky_relu": lambda t, y: F.leaky_relu(t, 0.1, inplace=True),
    "hardtanh": lambda t, y: F.hardtanh(t, inplace=True),
    "add": lambda t, y: torch.add(t, y, out=t),
    "add_": lambda t, y: t.add_(y),
    "mul_": lambda t, y: t.mul_(2),
    "relu_": lambda t, y: t.relu_(),
    "clamp_": lambda t, y: t.clamp_(min=0),
    "copy_": lambda t, y: t.copy_(y),
    "zero_": lambda t, y: t.zero_(),
    "fill_": lambda t, y: t.fill_(1.0),
    "__iadd__": lambda t, y: t.__iadd__(y),
    "__imul__": lambda t, y: t.__imul__(2),
    "__setitem__": lambda t, y: t.__setitem__(0, 1.0),
    "__setitem__ slice": lambda t, y: t.__setitem__((slice(None), slice(1, None)), y[:, :2]),
    "masked_fill_": lambda t, y: t.masked_fill_(t > 0, -1.0),
    "index_copy_": lambda t, y: t.index_copy_(1, torch.tensor([2, 0]), y[:, :2]),
    "torch.add_out": lambda t, y: torch.add(y, 1, out=t),
}


@settings(max_examples=EXAMPLES)
@given(path=st.sampled_from(sorted(PATHS)), on_intermediate=st.booleans(), where=grid,
       x=st.integers(1, 4).flatmap(lambda n: laid_out(torch.randn(n, 3))))
def test_every_in_place_path_writes_as_eager(path, on_intermediate, where, x):
    executor, mode = where
    note(f"{path} on {'an intermediate' if on_intermediate else 'an argument'}, {executor}, {mode}")
    y = torch.randn(x.shape[0], 3)

    def f(x, y):
        t = x * 2 if on_intermediate else x
        out = PATHS[path](t, y)
        return t + 1, out

    expected_x = x.clone()
    expected, expected_out = f(expected_x, y)
    version = x._version
    actual, out = jit(f, executor, mode)(x, y)
    torch.testing.assert_close(actual, expected)      # silu's kernel is not bit-exact
    torch.testing.assert_close(x, expected_x)
    assert (x._version > version) == (not on_intermediate)
    assert (out is x) == (expected_out is expected_x)
    if isinstance(expected_out, torch.Tensor):
        torch.testing.assert_close(out, expected_out)


@pytest.mark.parametrize("inplace", [False, None])
def test_inplace_false_is_the_out_of_place_op(inplace):
    f = (lambda x: F.relu(x, inplace=False)) if inplace is False else (lambda x: F.relu(x))
    x = torch.randn(5)
    torch.testing.assert_close(jit(f, "triton", "constant values")(x), torch.relu(x))
