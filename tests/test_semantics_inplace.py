"""Class 3: in-place paths are refused, never traced as the out-of-place op (which would leave
the tensor eager mutates unchanged). Every path — the `inplace=` keyword (by name or position),
`out=`, the `Tensor.*_` methods and `torch.*_` functions, augmented assignment and setitem — on
an argument or an intermediate raises NotImplementedError naming the op, in both executors and
cache modes, and the caller's tensor is left as it was."""
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
    "dropout": lambda t, y: F.dropout(t, 0.5, True, True),
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
}


@settings(max_examples=EXAMPLES)
@given(path=st.sampled_from(sorted(PATHS)), on_intermediate=st.booleans(), where=grid,
       x=st.integers(1, 4).flatmap(lambda n: laid_out(torch.randn(n, 3))))
def test_every_in_place_path_is_refused_naming_the_op(path, on_intermediate, where, x):
    executor, mode = where
    note(f"{path} on {'an intermediate' if on_intermediate else 'an argument'}, {executor}, {mode}")
    y = torch.ones_like(x)

    def f(x, y):
        t = x * 2 if on_intermediate else x
        PATHS[path](t, y)
        return t + 1

    before = x.clone()
    with pytest.raises(NotImplementedError, match=path.strip().replace("_", "_?")):
        jit(f, executor, mode)(x, y)
    assert torch.equal(x, before)


@pytest.mark.parametrize("inplace", [False, None])
def test_inplace_false_is_the_out_of_place_op(inplace):
    f = (lambda x: F.relu(x, inplace=False)) if inplace is False else (lambda x: F.relu(x))
    x = torch.randn(5)
    torch.testing.assert_close(jit(f, "triton", "constant values")(x), torch.relu(x))
