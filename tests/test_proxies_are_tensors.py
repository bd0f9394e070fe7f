"""Inside a jitted function a traced tensor is a tensor to library code: `isinstance(t,
torch.Tensor)` and `torch.is_tensor(t)` take eager's branch, and the tensor API that library code
reads (device, dtype, shape, dim(), is_floating_point(), layout, stride(), ...) answers as on
eager's tensors, over random programs whose values are asked, in both cache modes."""
import pytest
import torch
from hypothesis import given, note, settings
from hypothesis import strategies as st

import ir
import triton_exec  # noqa: F401  (registers the "triton" executor)
from programs import assert_matches_eager, programs

MODES = ["constant values", "symbolic values"]


def branchy(program):
    """program's function, with each output going through branches that library code writes:
    a wrong answer picks another factor."""
    def steer(t):
        factor = 1.0
        factor *= 2 if isinstance(t, torch.Tensor) else 3
        factor *= 5 if torch.is_tensor(t) else 7
        factor *= 11 if isinstance(t, (int, float)) else 1
        factor *= 13 if isinstance(t, torch.nn.Parameter) else 1
        factor *= 2 if t.is_floating_point() and t.dtype != torch.float64 else 3
        factor *= 5 if t.device.type == "cpu" else 7
        factor *= 3 if t.dim() == len(t.shape) == t.ndim else 5
        factor *= 7 if t.layout is torch.strided else 11
        factor *= 13 if not t.is_sparse else 1
        return t * factor if t.dtype != torch.bool else t

    def fn(*args):
        out = program.fn(*args)
        return tuple(map(steer, out)) if isinstance(out, tuple) else steer(out)
    return fn


@settings(max_examples=12)
@given(program=programs(max_ops=3), mode=st.sampled_from(MODES),
       executor=st.sampled_from(["torch", "triton"]))
def test_isinstance_and_is_tensor_branches_take_eagers_branch(program, mode, executor):
    note(program.describe())
    fn = branchy(program)
    jfn = ir.jit(fn, executors=[executor], cache=mode)
    expected = fn(*program.inputs)
    for _ in range(2):
        actual = jfn(*program.inputs)
        assert_matches_eager(type(program)(program.source, fn, program.inputs, program.rounding),
                             actual)
        assert type(actual) is type(expected)


@pytest.mark.parametrize("mode", MODES)
def test_queries_library_code_reads(mode):
    def queries(x):
        assert isinstance(x, torch.Tensor) and torch.is_tensor(x)
        return [x.dtype == torch.float32, x.device == torch.device("cpu"), tuple(x.shape),
                x.dim(), x.ndim, x.size(-1), x.numel(), x.is_floating_point(), x.is_complex(),
                x.element_size(), x.itemsize, x.nbytes, x.requires_grad, x.is_cuda, x.is_cpu,
                x.layout is torch.strided, x.is_contiguous(), x.is_signed(), len(x),
                x.get_device(), x.stride(), x.t().stride(), x.stride(0), x.is_sparse,
                x.is_quantized, x.is_meta]
    x = torch.randn(3, 4)
    expected = queries(x)
    assert ir.jit(lambda x: queries(x), cache=mode)(x) == expected


class ParameterBranches(torch.nn.Module):
    """Branches on `isinstance(..., nn.Parameter)` as library code does (e.g. initialization or
    weight-tying helpers called from forward): a parameter, a buffer, an argument, a view."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(4))
        self.register_buffer("b", torch.ones(4))

    def forward(self, x):
        factor = 1.0
        for i, t in enumerate((self.w, self.b, x, self.w[:2], self.w * 1)):
            factor *= (2 + i) if isinstance(t, torch.nn.Parameter) else 1
        return x * factor


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("argument", ["tensor", "parameter"])
def test_parameters_are_parameters_to_isinstance(mode, argument):
    """`isinstance(p, nn.Parameter)` is eager's answer for a module's parameters and for an
    argument that is one (a Parameter argument and a tensor argument are two cache entries)."""
    model = ParameterBranches()
    jitted = ir.jit(model, cache=mode)
    x = torch.randn(4)
    x = torch.nn.Parameter(x) if argument == "parameter" else x
    assert torch.equal(jitted(x), model(x))
    other = torch.randn(4) if argument == "parameter" else torch.nn.Parameter(torch.randn(4))
    assert torch.equal(jitted(other), model(other))
