"""Elementwise ops: the unary, binary and comparison prims, `where` and the activations (`relu`,
`silu`, `gelu`), their torch mapping (type promotion by eager's own rules, broadcasting, Python
number operands as eager converts them), and their grad rules, which follow eager's backward
formulas (derivatives.yaml), ties included: `maximum`/`minimum` of two tensors split the
gradient in halves on ties, and the activations' backward is computed in fp32 for fp16/bf16 as
eager's kernels compute it.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ir.ops import vjp
from ir.ops.casts import convert
from ir.ops.factories import full, full_p
from ir.ops.movement import expand_to
from ir.ops.registry import HANDLERS, METHODS, PRIMS, TORCH_SOURCE, define, grad_rule, register
from ir.ops.scalars import _meta, _one, meta_dtype, operand_scalar, stored_scalar
from ir.ops.shapes import _first_tensor, _same, broadcast_shape
from ir.ops.vjp import emit, needs_grad
from ir.proxies import FloatProxy, IntProxy, TensorProxy
from ir.recording import bind, opaque, specialize
from ir.trace import render

UNARY = ("neg", "abs", "exp", "log", "sin", "cos", "tanh", "sigmoid", "sqrt", "rsqrt", "erf")
BINARY = ("add", "sub", "mul", "div", "pow", "maximum", "minimum")
COMPARE = ("gt", "lt", "ge", "le", "eq", "ne")

for _name in UNARY:
    define(_name, "elementwise", lambda t: _same(t))
for _name in BINARY:
    define(_name, "elementwise", lambda a, b: _same(_first_tensor(a, b)))
for _name in COMPARE:
    define(_name, "elementwise", lambda a, b: _same(_first_tensor(a, b), dtype=torch.bool))
# Activations, as eager computes them (in fp32 for fp16/bf16, rounded once): silu(x) =
# x / (1 + exp(-x)); gelu(x) = x * 0.5 * (1 + erf(x / sqrt(2))), or with approximate="tanh"
# 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x**3))).
silu_p = define("silu", "elementwise", lambda t: _same(t))
gelu_p = define("gelu", "elementwise", lambda t, *, approximate: _same(t))
# relu of a float: x where x is not < 0 (-0.0 and NaN kept), else +0.0; its own prim for
# eager's gradient, read from the output (threshold_backward: 0 where result <= 0)
relu_p = define("relu", "elementwise", lambda t: _same(t))
where_p = define("where", "elementwise", lambda c, a, b: _same(
    next(x for x in (a, b, c) if isinstance(x, TensorProxy)),
    dtype=_first_tensor(a, b).dtype if _first_tensor(a, b) is not None else None))
# exp of a value shifted by its row's max (x - max <= 0: the terms of softmax, log_softmax,
# logsumexp and cross_entropy, and their gradients): a kernel computes it as 2 ** (x * log2(e))
# with the GPU's exp2 instruction, as Liger-Kernel's and Inductor's softmax kernels do, where
# `exp` is libdevice's (README: Numerical contract); torch runs it as `torch.exp`
softmax_exp_p = define("softmax_exp", "elementwise", lambda t: _same(t))
# as torch runs them (`ir.executors`; the others as the torch function of their name)
TORCH_SOURCE.update({
    softmax_exp_p: lambda e: f"torch.exp({e.args[0].name})",
    where_p: lambda e: f"torch.where({', '.join(render(a) for a in e.args)})",
    silu_p: lambda e: f"F.silu({e.args[0].name})",
    gelu_p: lambda e: f"F.gelu({e.args[0].name}, approximate={render(e.params['approximate'])})",
})


def shifted_exp(x):
    """exp(x) of a max-shifted x (<= 0 or NaN) in the softmax family: `softmax_exp` in fp32, where
    its accuracy is stated; eager's exp in another dtype (fp64)."""
    if x.dtype == torch.float32:
        return bind(softmax_exp_p, x)
    return HANDLERS[torch.exp](x)


def rounds_number(prim_name, device) -> bool:
    """Whether eager converts a Python number operand of a binary op to the op's dtype first:
    TensorIterator converts it for every binary op and comparison, except that eager's CPU
    kernels of mul and div read the number as given (`original_scalar_value`: in fp32 for an
    fp16/bf16 op)."""
    return not (device.type == "cpu" and prim_name in ("mul", "div"))


def elementwise(prim_name, torch_fn, *args, compute_dtype=None, number_as_given=False):
    """Type-promotes, broadcasts and records one elementwise prim (`number_as_given`: a Python
    number operand is eager's fp32 value already, see `rounds_number`)."""
    out_dtype = meta_dtype(torch_fn, *args)
    if compute_dtype is None:
        compute_dtype = out_dtype
    tensors = [a for a in args if isinstance(a, TensorProxy)]
    shape = broadcast_shape(*[a.shape for a in tensors])
    rounded = not number_as_given and rounds_number(prim_name, tensors[0].device)
    args = [convert(expand_to(a, shape), compute_dtype) if isinstance(a, TensorProxy)
            else operand_scalar(a, compute_dtype, rounded=rounded,
                                comparison=prim_name in COMPARE) for a in args]
    return bind(PRIMS[prim_name], *args)


def _register_unary(name, fn):
    register(fn, getattr(torch.Tensor, name), methods=(name,))(
        lambda input: elementwise(name, fn, input))


for _name in UNARY:
    _register_unary(_name, getattr(torch, _name))
register(torch.Tensor.__neg__, methods=("__neg__",))(lambda x: elementwise("neg", torch.neg, x))
register(torch.Tensor.__abs__, methods=("__abs__",))(lambda x: elementwise("abs", torch.abs, x))
HANDLERS[F.sigmoid] = HANDLERS[torch.sigmoid]


def _binary(name, fn, dunder=None, rdunder=None, swap_scalar=False):
    def forward(input, other):
        return elementwise(name, fn, input, other)

    def reverse(a, b):
        return elementwise(name, fn, b, a)
    if name == "div":
        forward, reverse = div, _reverse_div
    register(fn, getattr(torch.Tensor, name, fn), methods=(name,) + ((dunder,) if dunder else ()))(
        forward)
    if dunder:
        HANDLERS[getattr(torch.Tensor, dunder)] = forward
    if rdunder:
        register(getattr(torch.Tensor, rdunder), methods=(rdunder,))(reverse)


_binary("add", torch.add, "__add__", "__radd__")
_binary("sub", torch.sub, "__sub__", "__rsub__")
_binary("mul", torch.mul, "__mul__", "__rmul__")


@register(torch.pow, torch.Tensor.pow, torch.Tensor.__pow__, methods=("pow", "__pow__"))
def pow(input, exponent):
    if isinstance(input, TensorProxy) and not isinstance(exponent, TensorProxy):
        return _pow_number(input, exponent)
    return elementwise("pow", torch.pow, input, exponent)


def _pow_number(input, exponent):
    """x ** number as eager computes it. The number is a constant of the trace (a runtime one is
    specialized): eager's kernel depends on its value (x * x for 2, sqrt for 0.5, 1 for 0). An
    integer base to a negative integer power is refused with eager's error."""
    exponent = specialize(exponent)
    if (not input.dtype.is_floating_point and isinstance(exponent, int)
            and not isinstance(exponent, bool) and exponent < 0):
        raise RuntimeError("Integers to negative integer powers are not allowed.")
    dtype = meta_dtype(torch.pow, input, exponent)
    return bind(PRIMS["pow"], convert(input, dtype), exponent)


register(torch.Tensor.__rpow__, methods=("__rpow__",))(
    lambda self, other: elementwise("pow", torch.pow, other, self))


def _compare(name, fn):
    def compare_op(input, other):
        return elementwise(name, fn, input, other,
                           compute_dtype=torch.result_type(_meta(input), _meta(other)))
    for key in (fn, getattr(torch.Tensor, name), getattr(torch.Tensor, f"__{name}__")):
        HANDLERS[key] = compare_op
    METHODS[name] = METHODS[f"__{name}__"] = compare_op


for _name in COMPARE:
    _compare(_name, getattr(torch, _name))


@register(torch.add, torch.Tensor.add, methods=("add",))
def add(input, other, *, alpha=1):
    return elementwise("add", torch.add, input, _scaled(other, alpha))


@register(torch.sub, torch.Tensor.sub, methods=("sub",))
def sub(input, other, *, alpha=1):
    return elementwise("sub", torch.sub, input, _scaled(other, alpha))


def _scaled(other, alpha):
    """`alpha * other` of add and sub (a number times a number is the host's)."""
    if alpha == 1:
        return other
    return mul(other, alpha) if isinstance(other, TensorProxy) else other * alpha


def mul(input, other):
    return elementwise("mul", torch.mul, input, other)


@register(torch.div, torch.Tensor.div, methods=("div",))
def div(input, other, *, rounding_mode=None):
    if rounding_mode is not None:
        return opaque(torch.div, (input, other), {"rounding_mode": rounding_mode})
    if (isinstance(input, TensorProxy) and input.device.type == "cuda"
            and input.dtype.is_floating_point and isinstance(other, (int, float, FloatProxy))
            and not isinstance(other, (bool, IntProxy))):
        # eager's CUDA kernel divides by a number as a product with its reciprocal, in fp32
        number = torch.tensor(float(specialize(other) if isinstance(other, FloatProxy)
                                    else other), dtype=torch.float32).to(input.dtype)
        reciprocal = (1 / number.to(torch.float32)).item()
        return elementwise("mul", torch.div, input, reciprocal, number_as_given=True)
    return elementwise("div", torch.div, input, other)


def _reverse_div(input, other):
    """`number / x`, which eager computes as `x.reciprocal() * number`."""
    return mul(elementwise("div", torch.div, 1, input), other)


_binary("div", torch.div, "__truediv__", "__rtruediv__")


@register(torch.maximum, torch.Tensor.maximum, methods=("maximum",))
def maximum(input, other):
    return elementwise("maximum", torch.maximum, input, other)


@register(torch.minimum, torch.Tensor.minimum, methods=("minimum",))
def minimum(input, other):
    return elementwise("minimum", torch.minimum, input, other)


@register(torch.relu, F.relu, torch.Tensor.relu, methods=("relu",))
def relu(input, inplace=False):
    """A float relu is its prim (eager's values, -0.0 kept, and its gradient from the output);
    an integer one a select (no gradient)."""
    if input.dtype.is_floating_point:
        return bind(relu_p, input)
    return where(METHODS["le"](input, 0), 0, input)


def _activation(prim, fn, input, **params):
    """A float activation prim; eager has no integer kernel (it raises when called)."""
    if not input.dtype.is_floating_point:
        return opaque(fn, (input,), params)
    return bind(prim, input, **params)


@register(F.silu)
def silu(input, inplace=False):
    return _activation(silu_p, F.silu, input)


@register(F.gelu)
def gelu(input, approximate="none"):
    return _activation(gelu_p, F.gelu, input, approximate=approximate)


@register(torch.where, torch.Tensor.where)
def where(condition, input, other):
    dtype = meta_dtype(torch.where, condition, input, other)
    shape = broadcast_shape(*[x.shape for x in (condition, input, other)
                              if isinstance(x, TensorProxy)])
    input, other = (convert(expand_to(x, shape), dtype) if isinstance(x, TensorProxy) else
                    stored_scalar(x, dtype,
                                  lambda v: torch.where(_one(torch.bool), _one(dtype), v))
                    for x in (input, other))
    if not any(isinstance(x, TensorProxy) for x in (input, other)):
        input = full(shape, input, dtype=dtype, device=condition.device)
    return bind(where_p, expand_to(condition, shape), input, other)


@register(torch.masked_fill, torch.Tensor.masked_fill, methods=("masked_fill",))
def masked_fill(input, mask, value):
    """where(mask, value, input) in input's dtype: eager converts the value (a number, or a 0-d
    tensor) to it and never promotes; the result has the broadcast shape of input and mask.
    Eager's checks (a bool mask, a 0-d value) ran while tracing."""
    dtype = input.dtype
    shape = broadcast_shape(input.shape, mask.shape)
    if isinstance(value, TensorProxy):
        value = expand_to(convert(value, dtype), shape)
    else:
        value = stored_scalar(value, dtype, lambda v: torch.masked_fill(
            _one(dtype), torch.ones(1, dtype=torch.bool), v))
    return bind(where_p, expand_to(mask, shape), value, expand_to(input, shape))


# ---- grad rules -----------------------------------------------------------------------------

def _unary(prim_name):
    def wrap(vjp):
        @grad_rule(PRIMS[prim_name])
        def rule(eqn, cts):
            (x,), (ct,) = eqn.args, cts
            return [(x, vjp(ct, x, eqn.out))]
        return rule
    return wrap


_unary("neg")(lambda ct, x, y: vjp.neg(ct))
_unary("exp")(lambda ct, x, y: vjp.mul(ct, y))
_unary("softmax_exp")(lambda ct, x, y: vjp.mul(ct, y))
_unary("log")(lambda ct, x, y: vjp.div(ct, x))
_unary("sin")(lambda ct, x, y: vjp.mul(ct, vjp.op("cos")(x)))
_unary("cos")(lambda ct, x, y: vjp.mul(ct, vjp.neg(vjp.op("sin")(x))))


def _opmath(vjp):
    """vjp as eager's backward kernels (tanh_backward, sigmoid_backward, silu_backward,
    gelu_backward) compute it for fp16/bf16: in fp32 ("opmath"), rounded once to the input's
    dtype, where a chain of prims would round after each op."""
    def in_fp32(ct, x, y):
        if x.dtype not in (torch.float16, torch.bfloat16):
            return vjp(ct, x, y)
        wide = (convert(v, torch.float32) for v in (ct, x, y))
        return convert(vjp(*wide), x.dtype)
    return in_fp32


# tanh_backward(grad, result) and sigmoid_backward(grad, result): from the output
_unary("tanh")(_opmath(lambda ct, x, y: vjp.mul(ct, vjp.sub(1, vjp.mul(y, y)))))
_unary("sigmoid")(_opmath(lambda ct, x, y: vjp.mul(vjp.mul(ct, vjp.sub(1, y)), y)))
# threshold_backward(grad, result, 0): from the output, 0 where it is <= 0 (NaN passes)
_unary("relu")(lambda ct, x, y: vjp.where(vjp.le(y, 0), 0, ct))
_unary("sqrt")(lambda ct, x, y: vjp.div(ct, vjp.mul(2, y)))
_unary("rsqrt")(lambda ct, x, y: vjp.mul(vjp.mul(ct, -0.5), emit(PRIMS["pow"], y, 3)))


@_unary("abs")
def _abs(ct, x, y):
    # eager: grad * sgn(x), sgn(0) = sgn(nan) = 0
    sign = vjp.sub(convert(vjp.gt(x, 0), x.dtype), convert(vjp.lt(x, 0), x.dtype))
    return vjp.mul(ct, sign)


@grad_rule(PRIMS["add"])
def _add(eqn, cts):
    return [(a, cts[0]) for a in eqn.args]


@grad_rule(PRIMS["sub"])
def _sub(eqn, cts):
    a, b = eqn.args
    return [(a, cts[0])] + ([(b, vjp.neg(cts[0]))] if needs_grad(b) else [])


@grad_rule(PRIMS["mul"])
def _mul(eqn, cts):
    a, b = eqn.args
    return ([(a, vjp.mul(cts[0], b))] if needs_grad(a) else []) + (
        [(b, vjp.mul(cts[0], a))] if needs_grad(b) else [])


@grad_rule(PRIMS["div"])
def _div(eqn, cts):
    a, b = eqn.args
    ct = cts[0]
    return ([(a, vjp.div(ct, b))] if needs_grad(a) else []) + (
        [(b, vjp.mul(vjp.neg(ct), vjp.div(vjp.div(a, b), b)))] if needs_grad(b) else [])


_unary("erf")(lambda ct, x, y: vjp.mul(
    vjp.mul(1.1283791670955126, vjp.op("exp")(vjp.neg(vjp.mul(x, x)))), ct))


@_unary("silu")
@_opmath
def _silu(ct, x, y):
    # eager's silu_backward: grad * s * (1 + x * (1 - s)), s = sigmoid(x)
    s = vjp.op("sigmoid")(x)
    return vjp.mul(vjp.mul(ct, s), vjp.add(1, vjp.mul(x, vjp.sub(1, s))))


# gelu_backward's 3 * kappa, a product of fp32 constants as its kernel computes it
_THREE_KAPPA = (torch.tensor(0.044715, dtype=torch.float32) * 3).item()


@grad_rule(gelu_p)
def _gelu(eqn, cts):
    """eager's gelu_backward (CUDA's formulas), constants included."""
    (x,), (ct,) = eqn.args, cts
    vjp = _gelu_erf if eqn.params["approximate"] == "none" else _gelu_tanh
    return [(x, _opmath(vjp)(ct, x, eqn.out))]


def _gelu_erf(ct, x, y):
    cdf = vjp.mul(0.5, vjp.add(1, vjp.op("erf")(vjp.mul(x, 0.7071067811865476))))
    pdf = vjp.mul(vjp.op("exp")(vjp.mul(vjp.mul(-0.5, x), x)), 0.3989422804014327)
    return vjp.mul(ct, vjp.add(cdf, vjp.mul(x, pdf)))


def _gelu_tanh(ct, x, y):
    beta, kappa = 0.7978845608028654, 0.044715
    x_sq = vjp.mul(x, x)
    inner = vjp.mul(beta, vjp.add(x, vjp.mul(kappa, vjp.mul(x_sq, x))))
    tanh_inner = vjp.op("tanh")(inner)
    left_derivative = vjp.mul(0.5, vjp.add(1, tanh_inner))
    tanh_derivative = vjp.sub(1, vjp.mul(tanh_inner, tanh_inner))
    inner_derivative = vjp.mul(beta, vjp.add(1, vjp.mul(_THREE_KAPPA, x_sq)))
    right_derivative = vjp.mul(vjp.mul(vjp.mul(0.5, x), tanh_derivative), inner_derivative)
    return vjp.mul(ct, vjp.add(left_derivative, right_derivative))


@grad_rule(PRIMS["pow"])
def _pow(eqn, cts):
    """eager's pow_backward: grad * (e * x ** (e - 1)) (x ** 0 is 1, NaN too); zeros for e = 0."""
    x, e = eqn.args
    if isinstance(e, TensorProxy) or not needs_grad(x):
        raise NotImplementedError("no fused gradient of a tensor exponent")
    if e == 0:
        return [(x, emit(full_p, tuple(x.shape), value=0.0, dtype=x.dtype, device=x.device,
                         like=x))]
    return [(x, vjp.mul(cts[0], vjp.mul(e, emit(PRIMS["pow"], x, e - 1))))]


def _select(cond, ct, keep_when_true: bool):
    return vjp.where(cond, ct, 0) if keep_when_true else vjp.where(cond, 0, ct)


@grad_rule(PRIMS["maximum"], PRIMS["minimum"])
def _max_min(eqn, cts):
    a, b = eqn.args
    ct = cts[0]
    loses_a, loses_b = (vjp.lt, vjp.gt) if eqn.prim.name == "maximum" else (vjp.gt, vjp.lt)
    # eager: where(a == b, grad / 2, grad), zero where the input loses (NaN loses nowhere)
    shared = vjp.where(vjp.eq(a, b), vjp.mul(ct, 0.5), ct)
    result = []
    if needs_grad(a):
        result.append((a, _select(loses_a(a, b), shared, False)))
    if needs_grad(b):
        result.append((b, _select(loses_b(a, b), shared, False)))
    return result


@grad_rule(where_p)
def _where(eqn, cts):
    c, a, b = eqn.args
    ct = cts[0]
    return ([(a, _select(c, ct, True))] if needs_grad(a) else []) + (
        [(b, _select(c, ct, False))] if needs_grad(b) else [])
