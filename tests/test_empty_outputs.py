"""Outputs of tensors with an empty dim: eager's shape, dtype, values and contiguous strides, in
which an empty dim counts as 1 ([3, 0, 4]: (4, 4, 1), not (0, 4, 1); `launch._allocation`), over
generated shapes, ops and both cache modes."""
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, note, settings
from hypothesis import strategies as st

import ir

OPS = {
    "elementwise": lambda x: x * 2 + 1,
    "cat": lambda x: torch.cat([x, x.exp()], 0),
    "pad": lambda x: F.pad(x, (1, 2)),
    "permuted copy": lambda x: x.transpose(0, -1).contiguous() * 3,
    "softmax": lambda x: torch.softmax(x, -1),
    "sum kept": lambda x: x.sum(-1, keepdim=True) + 1,
}


@st.composite
def empty_shapes(draw):
    shape = draw(st.lists(st.integers(0, 5), min_size=1, max_size=4))
    shape[draw(st.integers(0, len(shape) - 1))] = 0
    return tuple(shape)


@settings(max_examples=20, deadline=None)
@given(shape=empty_shapes(), op=st.sampled_from(sorted(OPS)),
       mode=st.sampled_from(["constant values", "symbolic values"]))
def test_empty_outputs_have_eagers_strides(shape, op, mode):
    note(f"{op} {shape} {mode}")
    x = torch.randn(shape)
    fn = OPS[op]
    try:
        expected = fn(x)
    except (RuntimeError, IndexError) as error:        # eager refuses: so must we
        with pytest.raises(type(error)):
            ir.jit(fn, executors=["triton"], cache=mode)(x)
        return
    got = ir.jit(fn, executors=["triton"], cache=mode)(x)
    assert (got.shape, got.dtype, got.stride()) == (expected.shape, expected.dtype,
                                                    expected.stride())
    torch.testing.assert_close(got, expected, equal_nan=True)
