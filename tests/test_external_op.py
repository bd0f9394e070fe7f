"""An op added from outside the packages, one place per floor: `softsign(x) = x / (1 + |x|)`,
a torch-level function of this module, gets its prim (with its meta: the shape rule of the
prim), its torch mapping, the shape rule of its calls left to torch, its grad rule and its torch
source through `ir.ops.registry`, and its Triton lowering and fusion rule through
`triton_exec.rules`. `ir.jit(..., executors=["triton"])` then fuses it with its neighbours into
one kernel forward and one backward, matching eager; what Triton does not fuse (float64) runs on
torch by its torch source, and integer input, which the mapping leaves to torch, keeps its sizes
symbolic by the shape rule. The registrations are undone after the module's tests."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import ir
import triton_exec
from ir.ops import registry, vjp
from ir.recording import bind, opaque
from triton_exec import rules
from triton_exec.codegen.kernel_types import COMPUTE_DTYPE
from triton_exec.codegen.narrow_tiles import rounded_tile

TOLERANCE = {torch.float32: dict(rtol=1e-5, atol=1e-6), torch.bfloat16: dict(rtol=2e-2, atol=2e-2),
             torch.float16: dict(rtol=2e-3, atol=2e-3), torch.float64: dict(rtol=0, atol=0)}


def softsign(x):
    """The op as eager computes it; a torch function to the tracer (`__torch_function__`)."""
    if torch.overrides.has_torch_function_unary(x):
        return torch.overrides.handle_torch_function(softsign, (x,), x)
    return x / (1 + x.abs())


def register_softsign():
    """Every registration of the op, on both floors; returns its prim."""
    softsign_p = registry.define("softsign", "elementwise",
                                 lambda x: [(x.shape, x.dtype, x.device)])

    @registry.register(softsign)
    def trace_softsign(x):
        if not x.dtype.is_floating_point:       # left to torch, as eager computes it
            return opaque(softsign, (x,), {})
        return bind(softsign_p, x)

    @registry.shape_rule(softsign)
    def same_shape(x):
        return [x.shape]

    @registry.grad_rule(softsign_p)
    def softsign_grad(eqn, cts):
        """d softsign(x) / dx = 1 / (1 + |x|)^2."""
        (x,), (ct,) = eqn.args, cts
        denominator = vjp.add(1, vjp.op("abs")(x))
        return [(x, vjp.div(ct, vjp.mul(denominator, denominator)))]

    @registry.torch_source(softsign_p)
    def softsign_source(eqn):
        return f"{eqn.args[0].name} / (1 + {eqn.args[0].name}.abs())"

    def lower_softsign(w, eqn, idx, mask, path):
        """In fp32, an fp16/bf16 result rounded once to its dtype."""
        x = w.value(eqn.args[0], idx, mask, path)
        result = w.let("v", f"tl.div_rn({x}, 1.0 + tl.abs({x}))")
        dtype = eqn.out.dtype
        return rounded_tile(w, result, dtype) if dtype in COMPUTE_DTYPE else result

    rules.register(softsign_p, lower=lower_softsign, float_only=True)
    return softsign_p


TABLES = [registry.PRIMS, registry.HANDLERS, registry.SHAPE_RULES, registry.GRAD_RULES,
          registry.TORCH_SOURCE, rules.RULES]


@pytest.fixture(scope="module")
def softsign_p():
    saved = [dict(table) for table in TABLES]
    try:
        yield register_softsign()
    finally:
        for table, before in zip(TABLES, saved):
            table.clear()
            table.update(before)


def model(x, y):
    return softsign(x * y) * 2 + y


def leaf(t):
    return t.detach().clone().requires_grad_()


@settings(max_examples=6, deadline=None)
@given(shape=st.lists(st.integers(2, 33), min_size=1, max_size=3),
       dtype=st.sampled_from([torch.float32, torch.bfloat16]), seed=st.integers(0, 2 ** 16))
def test_the_op_runs_fused_forward_and_backward_as_eager(softsign_p, shape, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    x, y, g = (torch.randn(shape, generator=gen).to(dtype) * 4 for _ in range(3))
    jfn = ir.jit(model, executors=["triton"])
    xa, xb = leaf(x), leaf(x)
    out, expected = jfn(xa, y), model(xb, y)
    torch.testing.assert_close(out, expected, **TOLERANCE[dtype])
    torch.testing.assert_close(torch.autograd.grad(out, xa, g)[0],
                               torch.autograd.grad(expected, xb, g)[0], **TOLERANCE[dtype])
    kernels = triton_exec.last_kernels(jfn)
    assert sorted(k.direction for k in kernels) == ["backward", "forward"]
    forward = next(k for k in kernels if k.direction == "forward")
    assert "1.0 + tl.abs(" in forward.source
    assert not any(e.prim is softsign_p for e in ir.last_traces(jfn)[-1].eqns)   # in the kernel
    assert not ir.explain(jfn, leaf(x), y).as_dict()["left_to_torch"]


def test_what_triton_does_not_fuse_runs_on_torch_by_its_torch_source(softsign_p):
    x, y = torch.randn(5, 7, dtype=torch.float64), torch.randn(5, 7, dtype=torch.float64)
    jfn = ir.jit(model, executors=["triton"])
    with pytest.warns(UserWarning, match="the triton executor runs nothing of model"):
        torch.testing.assert_close(jfn(x, y), model(x, y), **TOLERANCE[torch.float64])
    (ran,) = [e for e in ir.last_traces(jfn)[-1].eqns if e.prim is softsign_p]
    assert ran.executor is ir.torch_executor
    assert "/ (1 + " in str(ir.last_traces(jfn)[-1])


def test_integer_input_is_left_to_torch_with_symbolic_sizes(softsign_p):
    jfn = ir.jit(softsign, cache="symbolic values")
    for n in (6, 9):
        x = torch.arange(n * 4).reshape(n, 4) - 7
        torch.testing.assert_close(jfn(x), softsign(x), rtol=0, atol=0)
    assert ir.cache_stats(jfn).misses == 1
    assert not ir.last_entry(jfn).specializations
