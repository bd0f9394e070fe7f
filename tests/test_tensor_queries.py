"""Tensor queries and no-op methods work as eager on traced tensors: `is_floating_point`,
`is_contiguous` (guarded: it is the argument's layout), `.T`, `.mT`, `dim`, `numel`, `cpu()`,
`to(x.device)`, `type_as`, over generated arguments and views of them, in both cache modes."""

import ir
import pytest
import torch
from hypothesis import given, settings, strategies as st

MODES = ["constant values", "symbolic values"]

# query -> f(t, other) using it; Python answers steer the arithmetic so a wrong answer shows
QUERIES = {
    "is_floating_point": lambda t, o: t * (2 if t.is_floating_point() else 3),
    "torch.is_floating_point": lambda t, o: t * (2 if torch.is_floating_point(t) else 3),
    "is_contiguous": lambda t, o: t * (2 if t.is_contiguous() else 3),
    "T": lambda t, o: t.T * 2,
    "mT": lambda t, o: t.mT + 1,
    "dim": lambda t, o: t * t.dim(),
    "ndimension": lambda t, o: t * t.ndimension(),
    "numel": lambda t, o: t * t.numel(),
    "torch.numel": lambda t, o: t + torch.numel(t),
    "element_size": lambda t, o: t * t.element_size(),
    "cpu": lambda t, o: t.cpu() * 2,
    "to(device)": lambda t, o: t.to(t.device) * 2,
    "to(other)": lambda t, o: t.to(o) * 2,
    "type_as": lambda t, o: t.type_as(o) * 2,
    "size": lambda t, o: t * t.size(-1) + t.shape[0],
}
VIEWS = {   # what the query is asked of: the argument, or views and results computed from it
    "x": lambda x: x,
    "x.t()": lambda x: x.t(),
    "x[:, ::2]": lambda x: x[:, ::2],
    "x[1:]": lambda x: x[1:],
    "x * 2": lambda x: x * 2,
    "x.unsqueeze(0)": lambda x: x.unsqueeze(0),
}
LAYOUTS = {
    "contiguous": lambda shape, dtype: torch.randn(shape).to(dtype),
    "transposed": lambda shape, dtype: torch.randn(shape[::-1]).to(dtype).t(),
    "strided": lambda shape, dtype: torch.randn(shape[0], shape[1] * 2).to(dtype)[:, ::2],
}


@pytest.mark.parametrize("mode", MODES)
@settings(max_examples=60)
@given(query=st.sampled_from(sorted(QUERIES)), view=st.sampled_from(sorted(VIEWS)),
       layouts=st.lists(st.sampled_from(sorted(LAYOUTS)), min_size=2, max_size=2),
       shape=st.tuples(st.integers(2, 6), st.integers(2, 6)),
       dtypes=st.lists(st.sampled_from([torch.float32, torch.float16, torch.int32]),
                       min_size=2, max_size=2))
def test_queries_answer_as_eager(mode, query, view, layouts, shape, dtypes):
    def f(x, other):
        return QUERIES[query](VIEWS[view](x), other)

    j = ir.jit(f, executors=["torch"], cache=mode)
    for layout in layouts:      # the same entry must not answer a layout it was not built for
        x = LAYOUTS[layout](shape, dtypes[0])
        other = torch.ones(2, dtype=dtypes[1])
        torch.testing.assert_close(j(x, other), f(x, other))


def test_mT_of_a_vector_raises_as_eager():
    j = ir.jit(lambda x: x.mT, executors=["torch"])
    with pytest.raises(RuntimeError, match="matrices"):
        j(torch.randn(3))
