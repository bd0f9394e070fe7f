"""Every grad rule against eager's gradient on edge values: ±0, ±inf, NaN, tiny (fp32
subnormal), huge, ordinary values, and ties. Each case calls its op once on the whole cartesian
product of the edge values (every pair of a binary op, so every tie, and every triple of a clamp
with tensor bounds), with incoming gradients that are edge values too; the cases together cover
every prim of `ir.ops.registry.GRAD_RULES` (checked: a new rule needs a case here).

Exact ops (arithmetic, selects, clamp, data movement) must give eager's gradient bit for bit in
every dtype. The others call transcendental functions (libdevice in the kernels, numpy under the
interpreter, Sleef in eager): within 8 ulps of the dtype (plus gelu's cancellation), NaN, ±inf
and zeros exactly; a gradient eager computes from the op's output (sigmoid, tanh, exp, sqrt,
rsqrt) is compared with eager's formula on our output, whose last bit may differ."""
from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Callable

import pytest
import torch
import torch.nn.functional as F

import ir
from ir.ops.registry import GRAD_RULES
from test_fusible_ops import assert_near_eager, cancellation, eager_kernels, normal
from test_semantics_unary import ulp

NAN, INF = math.nan, math.inf
EDGES = (0.0, -0.0, NAN, INF, -INF, 1e-40, -1e-40, 3e38, -3e38, 1e4, 1.0, -1.0, 0.5, -2.0, 7.5,
         -148.0, 0.3)
GRADS = (1.0, -0.75, 0.0, -0.0, 1e-30, 3e38, INF, NAN, 2.5)
DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@dataclasses.dataclass(frozen=True)
class Case:
    fn: Callable
    arity: int = 1
    exact: bool = True
    # eager's gradient from the op's output (derivatives.yaml `result`): (g, x, y) -> grad
    from_output: Callable | None = None
    dtypes: tuple = DTYPES


def _other(dtype):
    return torch.float32 if dtype != torch.float32 else torch.bfloat16


CASES = {
    "neg": Case(lambda x: -x),
    "abs": Case(lambda x: torch.abs(x)),
    "relu": Case(lambda x: torch.relu(x)),
    "pow2": Case(lambda x: x ** 2),
    "pow3": Case(lambda x: torch.pow(x, 3)),
    # eager's CPU bf16 x ** -2 rounds x * x before dividing (CUDA's and ours: once)
    "pow_minus1": Case(lambda x: x ** -1, exact=False),
    # eager's CPU fp16 x ** 0.5 is C's pow (pow(-inf, 0.5) = inf); CUDA's and ours sqrt (NaN)
    "pow_half": Case(lambda x: x ** 0.5, exact=False, dtypes=DTYPES[:2]),
    "exp": Case(lambda x: torch.exp(x), exact=False, from_output=lambda g, x, y: g * y),
    # the softmax family's exp(x - max) (`softmax_exp`), over rows of one value
    "softmax_exp": Case(lambda x: torch.logsumexp(x[:, None], -1), exact=False),
    "log": Case(lambda x: torch.log(x), exact=False),
    "sin": Case(lambda x: torch.sin(x), exact=False),
    "cos": Case(lambda x: torch.cos(x), exact=False),
    "tanh": Case(lambda x: torch.tanh(x), exact=False,
                 from_output=lambda g, x, y: torch.ops.aten.tanh_backward(g, y)),
    "sigmoid": Case(lambda x: torch.sigmoid(x), exact=False,
                    from_output=lambda g, x, y: torch.ops.aten.sigmoid_backward(g, y)),
    "sqrt": Case(lambda x: torch.sqrt(x), exact=False, from_output=lambda g, x, y: g / (2 * y)),
    "rsqrt": Case(lambda x: torch.rsqrt(x), exact=False,
                  from_output=lambda g, x, y: -0.5 * g * y.pow(3)),
    "erf": Case(lambda x: torch.erf(x), exact=False),
    "silu": Case(lambda x: F.silu(x), exact=False),
    "gelu": Case(lambda x: F.gelu(x), exact=False),
    "gelu_tanh": Case(lambda x: F.gelu(x, approximate="tanh"), exact=False),
    "convert": Case(lambda x: x.to(_other(x.dtype))),
    "movement": Case(lambda x: torch.cat([F.pad(x, (1, 2)), x[1::2], x.clone(),
                                          x.reshape(-1, 3).t().flatten(),
                                          x.expand(2, -1).flatten()])),
    "add": Case(lambda a, b: a + b, 2),
    "sub": Case(lambda a, b: a - b, 2),
    "mul": Case(lambda a, b: a * b, 2),
    "div": Case(lambda a, b: a / b, 2),
    "maximum": Case(lambda a, b: torch.maximum(a, b), 2),
    "minimum": Case(lambda a, b: torch.minimum(a, b), 2),
    "where": Case(lambda a, b: torch.where(a > b, a, b), 2),
    "clamp_tensors": Case(lambda x, lo, hi: torch.clamp(x, lo, hi), 3),
    "clamp_min_tensor": Case(lambda x, lo: torch.clamp(x, min=lo), 2),
    "clamp_max_tensor": Case(lambda x, hi: x.clamp(max=hi), 2),
    "clamp_numbers": Case(lambda x: x.clamp(-2.0, 0.3)),    # 0.3 rounds down in bf16
    "clamp_crossed_numbers": Case(lambda x: torch.clip(x, 0.3, -2.0)),
    "clamp_nan_number": Case(lambda x: x.clamp(max=NAN)),
    "clamp_min_number": Case(lambda x: torch.clamp_min(x, 0.3)),
    # rows of edge values: a row's sum, max or min broadcast back over it (ties, NaN, inf)
    "sum": Case(lambda x: x.reshape(-1, 9).sum(-1, keepdim=True).expand(-1, 9).flatten()),
    "amax": Case(lambda x: x.reshape(-1, 9).amax(-1, keepdim=True).expand(-1, 9).flatten()),
    "amin": Case(lambda x: x.reshape(-1, 9).amin(-1, keepdim=True).expand(-1, 9).flatten()),
}


def operands(case: Case, dtype):
    """The cartesian product of the edge values, one tensor per operand, and the incoming
    gradient cycling through `GRADS` (an output of another dtype gets it in that dtype)."""
    rows = list(itertools.product(EDGES, repeat=case.arity))
    if case.arity == 1:
        rows = [(x,) for x in EDGES for _ in GRADS]
    args = [torch.tensor(column, dtype=torch.float32).to(dtype) for column in zip(*rows)]
    return args


def incoming(y):
    n = y.numel()
    return torch.tensor([GRADS[i % len(GRADS)] for i in range(n)],
                        dtype=torch.float32).to(y.dtype).reshape(y.shape)


def value_and_grads(fn, args):
    leaves = [a.detach().clone().requires_grad_() for a in args]
    y = fn(*leaves)
    g = incoming(y)
    return y.detach(), g, torch.autograd.grad(y, leaves, g)


def subnormal_free(tensors):
    """Where no bf16 operand is subnormal: Triton's interpreter flushes bf16 subnormals (eager
    and the GPU do not), so a comparison with 9.2e-41 sees 0 there."""
    tiny = torch.finfo(torch.bfloat16).tiny
    keep = torch.ones(tensors[0].shape, dtype=torch.bool)
    for t in tensors:
        if t.dtype == torch.bfloat16:
            keep &= ~((t != 0) & (t.abs() < tiny))
    return keep


def assert_bits_match(actual, expected, x):
    """Bit for bit (NaN where eager has NaN, signed zeros kept), bf16 subnormal results aside
    (eager's CPU kernels and the interpreter round them each their own way)."""
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    same = (actual == expected) & (torch.signbit(actual) == torch.signbit(expected))
    same |= actual.isnan() & expected.isnan()
    same |= ~normal(actual, expected, x)
    bad = ~same
    assert not bool(bad.any()), (f"at x = {x[bad].tolist()[:4]}: got {actual[bad].tolist()[:4]}, "
                                 f"eager {expected[bad].tolist()[:4]}")


@pytest.mark.parametrize("name, dtype", [(n, d) for n in sorted(CASES) for d in CASES[n].dtypes],
                         ids=lambda v: str(v).removeprefix("torch."))
def test_gradient_at_edge_values_is_eagers(name, dtype):
    case = CASES[name]
    args = operands(case, dtype)
    jf = ir.jit(case.fn, executors=["triton"])
    y, g, grads = value_and_grads(jf, args)
    assert ir.last_backward_traces(jf), "no differentiable unit ran: nothing was checked"
    with eager_kernels():       # eager's own kernels, not oneDNN's gelu
        _, _, expected = value_and_grads(case.fn, args)
    if case.from_output is not None:
        expected = (case.from_output(g, args[0], y),)
    compared = subnormal_free(args)
    for k, (actual, eager) in enumerate(zip(grads, expected)):
        x, actual, eager = args[k][compared], actual[compared], eager[compared]
        if case.exact:
            assert_bits_match(actual, eager, x)
        else:
            slack = cancellation(name, x) * g[compared].double().abs()
            assert_near_eager(actual, eager, x, slack)


def test_the_cases_cover_every_grad_rule():
    covered = set()
    for case in CASES.values():
        # the executor that decomposes the composite ops (softmax_exp is logsumexp's)
        jf = ir.jit(case.fn, executors=["triton"])
        jf(*[a.requires_grad_() for a in operands(case, torch.float32)])
        covered |= {e.prim for e in ir.last_traces(jf)[0].eqns}
    missing = sorted(p.name for p in GRAD_RULES if p not in covered)
    assert not missing, f"grad rules without an edge-value case: {missing}"


# name -> (fn, the gradient in float64 from (g, x, y), y being our output where eager reads it)
ROUNDED_ONCE = {
    "silu": (lambda x: F.silu(x), None),
    "gelu": (lambda x: F.gelu(x), None),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), None),
    "sigmoid": (lambda x: torch.sigmoid(x), lambda g, x, y: g * (1 - y) * y),
    "tanh": (lambda x: torch.tanh(x), lambda g, x, y: g * (1 - y * y)),
}


@pytest.mark.parametrize("dtype", DTYPES[1:], ids=str)
@pytest.mark.parametrize("name", sorted(ROUNDED_ONCE))
def test_activation_gradients_of_narrow_floats_are_rounded_once(name, dtype):
    """eager's tanh/sigmoid/silu/gelu_backward kernels compute in fp32 and round once: within one
    ulp of the dtype of the exact gradient (float64) rounded, where a chain of fp16/bf16 ops is
    several ulps off (bf16 silu: 3-4x eager's error)."""
    fn, from_output = ROUNDED_ONCE[name]
    gen = torch.Generator().manual_seed(0)
    x = (torch.randn(4096, generator=gen) * 3).to(dtype)
    g = torch.randn(4096, generator=gen).to(dtype)
    jf = ir.jit(fn, executors=["triton"])
    leaf = x.clone().requires_grad_()
    y = jf(leaf)
    (gx,) = torch.autograd.grad(y, leaf, g)
    if from_output is None:
        wide = x.double().requires_grad_()
        (exact,) = torch.autograd.grad(fn(wide), wide, g.double())
    else:
        exact = from_output(g.double(), x.double(), y.detach().double())
    error = (gx.double() - exact).abs()
    # + fp32's own error, and gelu's cancellation (1 + tanh, 1 - tanh**2 near -1 for x < -3)
    bound = ulp(exact.to(dtype)).double() + (1e-6 + cancellation(name, x)) * g.double().abs()
    bad = error > bound
    assert not bool(bad.any()), (f"at x = {x[bad].tolist()[:4]}: got {gx[bad].tolist()[:4]}, "
                                 f"exact {exact[bad].tolist()[:4]}")
