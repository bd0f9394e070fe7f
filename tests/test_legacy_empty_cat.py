"""`torch.cat` skips legacy empty 1-d tensors (`torch.tensor([])`, size 0) as eager does, whatever
the other tensors' rank and the dim (transformers' KV cache starts that way), while they still
take part in the result's dtype; a cat of only such tensors is one of them."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import ir
import triton_exec  # noqa: F401  (registers the "triton" executor)

MODES = ["constant values", "symbolic values"]
EMPTY_DTYPES = [torch.float32, torch.float16, torch.float64, torch.int64]


@settings(max_examples=24)
@given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=4), data=st.data(),
       mode=st.sampled_from(MODES), executor=st.sampled_from(["torch", "triton"]),
       empty_dtype=st.sampled_from(EMPTY_DTYPES), where=st.sampled_from(["first", "last", "both"]))
def test_cat_skips_legacy_empty_tensors(shape, data, mode, executor, empty_dtype, where):
    dim = data.draw(st.integers(-len(shape), len(shape) - 1), label="dim")
    k = torch.randn(shape)

    def cache_step(past, k):
        pieces = [past, k * 2] if where == "first" else [k * 2, past]
        return torch.cat(pieces + ([past] if where == "both" else []), dim=dim)
    past = torch.tensor([], dtype=empty_dtype)
    expected = cache_step(past, k)
    actual = ir.jit(cache_step, executors=[executor], cache=mode)(past, k)
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    torch.testing.assert_close(actual, expected)


@pytest.mark.parametrize("mode", MODES)
def test_a_cat_of_only_legacy_empty_tensors(mode):
    fn = lambda: torch.cat([torch.tensor([]), torch.tensor([], dtype=torch.float64)])  # noqa: E731
    out = ir.jit(lambda x: (fn(), x * 1), cache=mode)(torch.ones(1))[0]
    assert out.shape == (0,) and out.dtype == torch.float64
