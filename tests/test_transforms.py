"""Function transforms over jitted functions give eager's results: forward-mode AD's dual tensors
(`torch.autograd.forward_ad`), `torch.func.vmap`, `grad`, `jvp`, `jacrev`, `jacfwd`, and
`torch.autograd.functional.jacobian(vectorize=True)`, over random programs in both cache modes,
with a warning once naming the reason where the call runs eagerly; a tensor subclass argument
runs eagerly too. Never a dropped tangent, never an error from code generation."""
import warnings

import pytest
import torch
import torch.autograd.forward_ad as fwAD
from hypothesis import given, note, settings
from hypothesis import strategies as st

import ir
import triton_exec  # noqa: F401  (registers the "triton" executor)
from programs import assert_close, programs, shapes

SMOOTH = ("arith", "unary", "cat", "stack", "pad", "reshape", "expand", "layout", "pow", "div",
          "index", "split_merge")
MODES = ["constant values", "symbolic values"]


def first_output(fn):
    """fn's first output (a program returns one tensor or a tuple of two)."""
    def first(*args):
        out = fn(*args)
        return out[0] if isinstance(out, tuple) else out
    return first


def dual_outputs(fn, inputs, tangents):
    with fwAD.dual_level():
        out = first_output(fn)(*[fwAD.make_dual(x, t) for x, t in zip(inputs, tangents)])
        primal, tangent = fwAD.unpack_dual(out)
    return primal, tangent


TRANSFORMS = {
    "fwAD": lambda fn, xs, ts: dual_outputs(fn, xs, ts),
    "vmap": lambda fn, xs, ts: torch.func.vmap(first_output(fn))(
        *[torch.stack([x, t]) for x, t in zip(xs, ts)]),
    "grad": lambda fn, xs, ts: torch.func.grad(
        lambda *a: (first_output(fn)(*a) * 1.5).sum(), argnums=tuple(range(len(xs))))(*xs),
    "jvp": lambda fn, xs, ts: torch.func.jvp(first_output(fn), tuple(xs), tuple(ts)),
    "jacrev": lambda fn, xs, ts: torch.func.jacrev(first_output(fn))(*xs),
    "jacfwd": lambda fn, xs, ts: torch.func.jacfwd(first_output(fn))(*xs),
}


def assert_all_close(actual, expected, dtype):
    if isinstance(expected, (tuple, list)):
        assert type(actual) is type(expected) and len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_all_close(a, e, dtype)
        return
    assert actual is not None, "a tangent or gradient was dropped"
    assert_close(actual, expected, dtype)


@pytest.mark.parametrize("transform", sorted(TRANSFORMS))
@settings(max_examples=8)
@given(program=programs(max_ops=3, op_names=SMOOTH, main_dtypes=(torch.float32,),
                        input_dtypes=(torch.float32,),
                        base_shapes=shapes().filter(lambda s: len(s) <= 2)),
       mode=st.sampled_from(MODES), executor=st.sampled_from(["torch", "triton"]))
def test_transforms_of_a_jitted_function_give_eagers_results(transform, program, mode, executor):
    note(program.describe())
    xs = program.inputs
    ts = [torch.randn_like(x) for x in xs]
    expected = TRANSFORMS[transform](program.fn, xs, ts)
    jfn = ir.jit(program.fn, executors=[executor], cache=mode)
    jfn(*xs)        # an entry exists: the transformed call must not use it
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        actual = TRANSFORMS[transform](jfn, xs, ts)
        TRANSFORMS[transform](jfn, xs, ts)
    assert_all_close(actual, expected, torch.float32)
    ours = [str(w.message) for w in caught if "ir.jit" in str(w.message)]
    assert len(ours) == 1 and "eagerly" in ours[0], ours        # once, naming the reason
    assert ("forward-mode AD" if transform == "fwAD" else "function transform") in ours[0]


JACOBIAN_FUNCTIONS = {
    "elementwise": lambda x: torch.sin(x) * 2 + x * x,
    "broadcast": lambda x: torch.exp(x[:, None] - x[None, :]) / 4,
    "cat": lambda x: torch.cat([x * 2, torch.tanh(x)], -1),
    "two outputs": lambda x: (x * 3, torch.sigmoid(x)),
}


@pytest.mark.parametrize("name", sorted(JACOBIAN_FUNCTIONS))
@pytest.mark.parametrize("mode", MODES)
def test_jacobian_vectorized_through_fused_kernels(name, mode):
    """`jacobian(vectorize=True)` runs the forward outside any transform (compiled, fused) and
    the backward of the fused unit under vmap: the unit's backward runs once per sample."""
    fn = JACOBIAN_FUNCTIONS[name]
    x = torch.randn(5)
    expected = torch.autograd.functional.jacobian(fn, x, vectorize=True)
    jfn = ir.jit(fn, executors=["triton"], cache=mode)
    actual = torch.autograd.functional.jacobian(jfn, x, vectorize=True)
    assert_all_close(actual, expected, torch.float32)
    assert ir.cache_stats(jfn).eager == 0       # this one compiled


class Scaled(torch.Tensor):
    """A tensor subclass, as users write them (no __torch_dispatch__)."""


def test_a_tensor_subclass_argument_runs_eagerly_with_a_warning():
    x = torch.randn(4).as_subclass(Scaled)
    jfn = ir.jit(lambda x: x * 2 + 1)
    with pytest.warns(UserWarning, match="tensor subclass \\(Scaled\\)"):
        out = jfn(x)
    assert type(out) is Scaled
    torch.testing.assert_close(out.as_subclass(torch.Tensor), (x * 2 + 1).as_subclass(torch.Tensor))
