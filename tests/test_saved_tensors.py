"""What a differentiable unit saves decides, as in eager, whether an in-place write between the
call and the backward breaks it: eager's sigmoid, tanh, exp, sqrt, rsqrt and relu save their
output, silu, gelu, sin, log and products their input, `x * 2 + 1` nothing. A unit reads a
group output its backward needs from the forward (saved), and recomputes the rest from the
group's inputs: for each op below, writing into the input, or into the output, after the call
raises autograd's "modified by an inplace operation" exactly when eager raises it, and the
gradient is eager's otherwise."""
import pytest
import torch
import torch.nn.functional as F

import ir
import triton_exec  # noqa: F401  (registers the "triton" executor)

OPS = {
    "sigmoid": lambda x: torch.sigmoid(x), "tanh": lambda x: torch.tanh(x),
    "exp": lambda x: torch.exp(x), "sqrt": lambda x: torch.sqrt(x),
    "rsqrt": lambda x: torch.rsqrt(x), "relu": lambda x: torch.relu(x),
    "silu": lambda x: F.silu(x), "gelu": lambda x: F.gelu(x), "sin": lambda x: torch.sin(x),
    "log": lambda x: torch.log(x), "square": lambda x: x * x, "affine": lambda x: x * 2 + 1,
}


def outcome(fn, written: str, dtype):
    """Calls fn on a non-leaf x, writes into x or the output in place, runs the backward:
    ("raises", None) or ("ok", the leaf's gradient)."""
    base = (torch.arange(1, 7, dtype=torch.float32) / 4).to(dtype).requires_grad_()
    x = base * 1
    out = fn(x)
    (x if written == "input" else out).add_(1)
    try:
        out.sum().backward()
    except RuntimeError as e:
        assert "modified by an inplace operation" in str(e)
        return "raises", None
    return "ok", base.grad


@pytest.mark.parametrize("executor", ["triton", "torch"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("written", ["input", "output"])
@pytest.mark.parametrize("op", sorted(OPS))
def test_an_inplace_write_after_the_call_breaks_the_backward_as_in_eager(op, written, dtype,
                                                                           executor):
    fn = OPS[op]
    expected = outcome(fn, written, dtype)
    actual = outcome(ir.jit(fn, executors=[executor]), written, dtype)
    assert actual[0] == expected[0], f"{op}: {actual[0]} where eager {expected[0]}"
    if expected[1] is not None:
        torch.testing.assert_close(actual[1], expected[1])   # transcendental: a few ulps


def test_a_unit_saves_the_output_it_reads_not_the_input():
    jf = ir.jit(lambda x: torch.sigmoid(x), executors=["triton"])
    jf(torch.randn(8, requires_grad=True))
    (traces,) = ir.last_backward_traces(jf).values()
    (saved,) = [v for _, v in traces[-1].inputs][:1]
    assert saved is ir.last_traces(jf)[0].outputs     # the traced function's output
