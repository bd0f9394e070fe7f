"""Class 8: output containers keep their type and structure: a list output is a list, a tuple a
tuple (of one, too), a single tensor a tensor; inputs and computed values mix in them as eager
returns them."""
import torch
from hypothesis import given, note, settings
from hypothesis import strategies as st

from semantics import EXAMPLES, grid, jit

RETURNS = {
    "tensor": lambda x: x * 2,
    "list": lambda x: [x * 2, x + 1],
    "list_of_one": lambda x: [x * 2],
    "tuple": lambda x: (x * 2, x + 1),
    "tuple_of_one": lambda x: (x - 1,),
    "list_with_input": lambda x: [x, x.sum(0), x * 2],
    "tuple_with_view": lambda x: (x[0], x * 3),
    "empty_list": lambda x: [],
    "nested": lambda x: [x * 2, (x + 1, [x])],
    "split": lambda x: x.split(1, 0),
    "unbind_list": lambda x: list(torch.unbind(x * 2, 0)),
}


@settings(max_examples=EXAMPLES)
@given(form=st.sampled_from(sorted(RETURNS)), where=grid,
       shape=st.lists(st.integers(1, 4), min_size=1, max_size=3))
def test_output_containers_keep_their_type(form, where, shape):
    executor, mode = where
    note(f"{form} {executor} {mode}")
    x = torch.randn(shape)
    expected = RETURNS[form](x)
    jfn = jit(RETURNS[form], executor, mode)
    for actual in (jfn(x), jfn(x)):     # traced, then the cached entry
        assert_same_structure(actual, expected)


def assert_same_structure(actual, expected):
    assert type(actual) is type(expected), f"{type(actual).__name__} != {type(expected).__name__}"
    if isinstance(expected, torch.Tensor):
        torch.testing.assert_close(actual, expected)
        return
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert_same_structure(a, e)
