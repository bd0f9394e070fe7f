"""Class 7: programs eager refuses are refused while tracing, with eager's exception type: shape
and argument checks of every op (`x.t()` of a 3-d tensor, `expand` to an incompatible size,
`view` across strides that cannot be merged, `narrow` past the end, a dim out of range, ...).
Valid calls of the same ops give eager's values. `view` is checked against the input's actual
layout, and that layout is guarded (a contiguous input of the same shape is a new entry)."""
import torch
import torch.nn.functional as F
from hypothesis import given, note, settings
from hypothesis import strategies as st

from semantics import EXAMPLES, grid, jit, laid_out, outcome

CALLS = {   # name -> fn(x, k): k a small int that makes the call valid or not
    "t": lambda x, k: x.t() * 2,
    "torch.t": lambda x, k: torch.t(x) + 1,
    "expand": lambda x, k: x.expand(k, *x.shape[1:]) * 2,
    "expand_new_dim": lambda x, k: x.expand(k, *x.shape) + 1,
    "view": lambda x, k: x.view(-1) * 2,
    "view_after_transpose": lambda x, k: x.transpose(0, -1).view(-1) + 1,
    "view_after_slice": lambda x, k: x[..., ::2].view(-1) + 1,
    "view_as": lambda x, k: x.t().view_as(x.t().contiguous()) if x.ndim == 2 else x.view_as(x),
    "narrow": lambda x, k: x.narrow(0, k, 2) * 2,
    "flatten": lambda x, k: x.flatten(k, 0) * 2,
    "clamp_without_bounds": lambda x, k: torch.clamp(x) if k else torch.clamp(x, 0),
    "transpose": lambda x, k: x.transpose(0, k) * 2,
    "unsqueeze": lambda x, k: x.unsqueeze(k) * 2,
    "squeeze": lambda x, k: x.squeeze(k) * 2,
    "permute": lambda x, k: x.permute(*([k] * x.ndim)) * 2,
    "reshape": lambda x, k: x.reshape(k, -1) * 2,
    "cat": lambda x, k: torch.cat((x, x[..., :k]), dim=0),
    "stack": lambda x, k: torch.stack((x, x[:k])),
    "getitem": lambda x, k: x[k] * 2,
    "pad": lambda x, k: F.pad(x, (-k, -k)) * 2,
    "where": lambda x, k: torch.where(x[:k] > 0, x, 0.0),
    "maximum": lambda x, k: torch.maximum(x, x[:k]),
    "matmul_opaque": lambda x, k: (x @ x[:k]) * 2,
}


@settings(max_examples=EXAMPLES)
@given(call=st.sampled_from(sorted(CALLS)), k=st.integers(-4, 5), where=grid,
       x=st.lists(st.integers(1, 4), min_size=1, max_size=4).flatmap(
           lambda shape: laid_out(torch.randn(shape))))
def test_refused_as_eager_refuses(call, k, where, x):
    executor, mode = where
    note(f"{call} k={k} {executor} {mode}: shape {tuple(x.shape)} stride {x.stride()}")
    expected = outcome(CALLS[call], x, k)
    actual = outcome(jit(CALLS[call], executor, mode), x, k)
    if isinstance(expected, type):
        assert actual is expected, f"eager raised {expected.__name__}, the jit gave {actual!r}"
    else:
        assert not isinstance(actual, type), f"the jit raised {actual.__name__}"
        torch.testing.assert_close(actual, expected)


def test_view_is_guarded_by_the_input_layout():
    jfn = jit(lambda x: x.view(-1) * 2, "triton", "constant values")
    x = torch.randn(3, 4)
    torch.testing.assert_close(jfn(x), x.view(-1) * 2)
    try:
        jfn(x.t().contiguous().t())     # same shape and dtype, not viewable
    except RuntimeError as e:
        assert "view" in str(e)
    else:
        raise AssertionError("a view of non-viewable strides was accepted")
