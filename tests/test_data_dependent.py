"""Data-dependent Python in a jitted function (`if mask.all():`, `bool(t)`, `t.item()`,
`float(t)`, `int(t)`, `torch.equal`) raises `ir.DataDependentError` (a NotImplementedError) that
names the user's file and line and the operation, and points to the torch.compile backend, which
runs such code eagerly between compiled graphs."""
import os

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import ir

MODES = ["constant values", "symbolic values"]


def if_all(x, m):
    if m.all():
        return x * 2
    return x


CASES = {   # name -> (fn, the operation the message names)
    "if mask.all()": (if_all, "bool()"),
    "bool": (lambda x, m: x * bool(x.sum() > 0), "bool()"),
    "item in a branch": (lambda x, m: x * 2 if x.max().item() > 0 else x, ".item()"),
    "float": (lambda x, m: x * float(x.sum()), "float()"),
    "int": (lambda x, m: x[: int(m.sum())], "int()"),
    "tolist": (lambda x, m: x * len([v for v in x.tolist() if v > 0]), ".tolist()"),
    "torch.equal": (lambda x, m: x if torch.equal(x, x * 1) else -x, "torch.equal"),
    "range": (lambda x, m: sum(x for _ in range(m.sum())), "an index"),
}


@settings(max_examples=16)
@given(case=st.sampled_from(sorted(CASES)), mode=st.sampled_from(MODES))
def test_data_dependent_python_names_the_line_and_the_operation(case, mode):
    fn, operation = CASES[case]
    x = torch.randn(4)
    with pytest.raises(ir.DataDependentError) as raised:
        ir.jit(fn, cache=mode)(x, x > 0)
    message = str(raised.value)
    line = fn.__code__.co_firstlineno
    lines = range(line, line + 3)       # the lambda's line, or a line of if_all's body
    assert any(f"{os.path.basename(__file__)}:{n}" in message for n in lines), message
    assert operation in message and 'torch.compile(fn, backend="triton_exec")' in message
    assert isinstance(raised.value, NotImplementedError)


@settings(max_examples=12, deadline=None)
@given(shapes=st.sampled_from([((4,), (3,)), ((4,), (1, 4)), ((2, 3), (3, 2)), ((4,), (4,))]),
       mode=st.sampled_from(MODES), captured=st.booleans())
def test_torch_equal_of_different_shapes_is_false_without_reading_data(shapes, mode, captured):
    """Eager's `torch.equal` is False for tensors of different shapes whatever their data: the
    trace answers so (no data read, no error); equal shapes still read data."""
    other = torch.zeros(shapes[1])

    def fn(x, y):
        return x * 2 if torch.equal(x, other if captured else y) else x - 1

    x, y = torch.randn(shapes[0]), other
    if shapes[0] == shapes[1]:
        with pytest.raises(ir.DataDependentError):
            ir.jit(fn, cache=mode)(x, y)
        return
    assert torch.equal(ir.jit(fn, cache=mode)(x, y), fn(x, y))
