"""Class 4: copies and aliases. An op that eager returns as new memory (cat or stack of one
tensor, a zero pad, clone, `to(copy=True)`, `.contiguous()` of a non-contiguous tensor) comes
back as new memory: it shares no storage with any input, and writing into it leaves the inputs
as they were. Distinct outputs are distinct tensors (`return x * 2, x * 2`), the same output
returned twice is one tensor, as in eager. `.contiguous()` results are contiguous. Where eager
returns a view of an input, the jit returns a view of the same storage at the same address
(the input itself where the view is the identity); `.contiguous()` of a contiguous view of an
input may come back as that view or as a copy."""
import torch
import torch.nn.functional as F
from hypothesis import given, note, settings
from hypothesis import strategies as st

from semantics import EXAMPLES, grid, jit, laid_out

COPIES = {
    "cat_of_one": lambda x: torch.cat((x,), -1),
    "stack_of_one": lambda x: torch.stack((x,)),
    "zero_pad": lambda x: F.pad(x, (0, 0)),
    "clone": lambda x: x.clone(),
    "clone_contiguous": lambda x: x.clone(memory_format=torch.contiguous_format),
    "to_copy": lambda x: x.to(x.dtype, copy=True),
    "to_copy_keyword": lambda x: x.to(dtype=x.dtype, copy=True),
    "transposed_contiguous": lambda x: x.t().contiguous(),
    "sliced_contiguous": lambda x: x[:, ::2].contiguous(),
    "computed_contiguous": lambda x: (x * 2).t().contiguous(),
    "to_contiguous_format": lambda x: x.t().to(memory_format=torch.contiguous_format),
}
VIEWS = {
    "slice": lambda x: x[1:],
    "transpose": lambda x: x.t(),
    "reshape": lambda x: x.reshape(x.shape),
    "to_same_dtype": lambda x: x.to(x.dtype),
    "view_identity": lambda x: x.view(x.shape),
}

matrices = st.tuples(st.integers(2, 4), st.integers(1, 5)).flatmap(
    lambda shape: laid_out(torch.randn(shape)))


def storages(t):
    return t.untyped_storage().data_ptr()


@settings(max_examples=EXAMPLES)
@given(op=st.sampled_from(sorted(COPIES)), where=grid, x=matrices)
def test_copies_are_new_memory(op, where, x):
    executor, mode = where
    note(f"{op}, {executor}, {mode}, stride {x.stride()}")
    expected = COPIES[op](x)
    before = x.clone()
    result = jit(COPIES[op], executor, mode)(x)
    torch.testing.assert_close(result, expected, rtol=0, atol=0)
    if storages(expected) == storages(x):   # `.contiguous()` of a contiguous view: eager's view
        return                              # or a copy (README)
    assert storages(result) != storages(x)
    if expected.is_contiguous():
        assert result.is_contiguous()
    result.fill_(7.0)
    assert torch.equal(x, before)


@settings(max_examples=EXAMPLES)
@given(op=st.sampled_from(sorted(VIEWS)), where=grid, x=matrices)
def test_views_of_inputs_alias_as_in_eager(op, where, x):
    executor, mode = where
    if op == "view_identity" and not x.is_contiguous():
        x = x.contiguous()
    expected = VIEWS[op](x)
    result = jit(VIEWS[op], executor, mode)(x)
    assert result.data_ptr() == expected.data_ptr() and result.stride() == expected.stride()
    assert storages(result) == storages(x)


@settings(max_examples=EXAMPLES)
@given(where=grid, x=matrices, same=st.booleans())
def test_distinct_outputs_are_distinct_tensors(where, x, same):
    executor, mode = where

    def f(x):
        a = x * 2
        return (a, a) if same else (x * 2, x * 2)

    a, b = jit(f, executor, mode)(x)
    torch.testing.assert_close(a, x * 2)
    torch.testing.assert_close(b, x * 2)
    assert (a is b) == same
    if not same:
        assert storages(a) != storages(b)
