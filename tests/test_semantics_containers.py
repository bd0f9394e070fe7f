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
}


@settings(max_examples=EXAMPLES)
@given(form=st.sampled_from(sorted(RETURNS)), where=grid,
       shape=st.lists(st.integers(1, 4), min_size=1, max_size=3))
def test_output_containers_keep_their_type(form, where, shape):
    executor, mode = where
    note(f"{form} {executor} {mode}")
    x = torch.randn(shape)
    expected = RETURNS[form](x)
    actual = jit(RETURNS[form], executor, mode)(x)
    assert type(actual) is type(expected)
    if isinstance(expected, torch.Tensor):
        torch.testing.assert_close(actual, expected)
        return
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert type(a) is type(e)
        torch.testing.assert_close(a, e)
