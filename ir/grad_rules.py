"""Grad rules: each differentiable prim's vector-Jacobian product, written as prims.

`GRAD_RULES` maps a `Prim` object to `rule(eqn, cts) -> [(input, cotangent), ...]`, as JAX keeps
its transpose rules beside its primitives: `cts` holds one cotangent per output of `eqn` (None
where no gradient reaches it), and the rule returns a cotangent for each input that needs grad
(a TensorProxy with `requires_grad`), of that input's shape and dtype. Rules record prims into the
active trace, so a backward is itself a trace of prims that the executors run and fuse: the
gradient of a pad is a slice of the gradient, of a slice a zero pad, of a cat one slice per
piece, of a broadcast a sum over the broadcast dims (a reduction torch runs). Comparisons and
integer outputs are not differentiable: they have no rule and never get a cotangent.

Rules follow eager PyTorch's formulas (derivatives.yaml), ties included: `maximum`/`minimum` of
two tensors split the gradient in halves on ties; a clamp gives all of it to the input where it
equals a bound.
"""
from __future__ import annotations

import torch

from ir import prims
from ir.proxies import FloatProxy, IntProxy, TensorProxy
from ir.torch_ops import operand_scalar
from ir.tracing import bind, current, new_tensor, record

GRAD_RULES: dict = {}


def grad_rule(*prim_objects):
    """Registers the decorated function as the grad rule of these prims."""
    def register(rule):
        for p in prim_objects:
            GRAD_RULES[p] = rule
        return rule
    return register


def needs_grad(x) -> bool:
    return isinstance(x, TensorProxy) and x.requires_grad


def emit(prim, *args, like=None, **params):
    """Records prim(*args, **params); its output has `like`'s shape and dtype when given (a
    gradient always has its input's shape: with runtime sizes the meta rule would spell it as
    another, equal, expression)."""
    if like is None:
        return bind(prim, *args, **params)
    out = new_tensor(like.shape, like.dtype, like.device)
    record(prim, args, params, (out,))
    return out


def _op(name):
    return lambda *args: emit(prims.PRIMS[name], *args)


add, sub, mul, div, neg = (_op(n) for n in ("add", "sub", "mul", "div", "neg"))
gt, lt, ge, le, eq = (_op(n) for n in ("gt", "lt", "ge", "le", "eq"))


def where(c, a, b):
    return emit(prims.where, c, a, b)


def convert(x, dtype):
    return x if x.dtype == dtype else emit(prims.convert_element_type, x, dtype=dtype)


def _const(x) -> bool:
    return not isinstance(x, IntProxy)


# ---- elementwise ---------------------------------------------------------------------------

def _unary(prim_name):
    def wrap(vjp):
        @grad_rule(prims.PRIMS[prim_name])
        def rule(eqn, cts):
            (x,), (ct,) = eqn.args, cts
            return [(x, vjp(ct, x, eqn.out))]
        return rule
    return wrap


_unary("neg")(lambda ct, x, y: neg(ct))
_unary("exp")(lambda ct, x, y: mul(ct, y))
_unary("log")(lambda ct, x, y: div(ct, x))
_unary("sin")(lambda ct, x, y: mul(ct, _op("cos")(x)))
_unary("cos")(lambda ct, x, y: mul(ct, neg(_op("sin")(x))))


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
_unary("tanh")(_opmath(lambda ct, x, y: mul(ct, sub(1, mul(y, y)))))
_unary("sigmoid")(_opmath(lambda ct, x, y: mul(mul(ct, sub(1, y)), y)))
# threshold_backward(grad, result, 0): from the output, 0 where it is <= 0 (NaN passes)
_unary("relu")(lambda ct, x, y: where(le(y, 0), 0, ct))
_unary("sqrt")(lambda ct, x, y: div(ct, mul(2, y)))
_unary("rsqrt")(lambda ct, x, y: mul(mul(ct, -0.5), emit(prims.PRIMS["pow"], y, 3)))


@_unary("abs")
def _abs(ct, x, y):
    # eager: grad * sgn(x), sgn(0) = sgn(nan) = 0
    sign = sub(convert(gt(x, 0), x.dtype), convert(lt(x, 0), x.dtype))
    return mul(ct, sign)


@grad_rule(prims.PRIMS["add"])
def _add(eqn, cts):
    return [(a, cts[0]) for a in eqn.args]


@grad_rule(prims.PRIMS["sub"])
def _sub(eqn, cts):
    a, b = eqn.args
    return [(a, cts[0])] + ([(b, neg(cts[0]))] if needs_grad(b) else [])


@grad_rule(prims.PRIMS["mul"])
def _mul(eqn, cts):
    a, b = eqn.args
    return ([(a, mul(cts[0], b))] if needs_grad(a) else []) + (
        [(b, mul(cts[0], a))] if needs_grad(b) else [])


@grad_rule(prims.PRIMS["div"])
def _div(eqn, cts):
    a, b = eqn.args
    ct = cts[0]
    return ([(a, div(ct, b))] if needs_grad(a) else []) + (
        [(b, mul(neg(ct), div(div(a, b), b)))] if needs_grad(b) else [])


_unary("erf")(lambda ct, x, y: mul(mul(1.1283791670955126, _op("exp")(neg(mul(x, x)))), ct))


@_unary("silu")
@_opmath
def _silu(ct, x, y):
    # eager's silu_backward: grad * s * (1 + x * (1 - s)), s = sigmoid(x)
    s = _op("sigmoid")(x)
    return mul(mul(ct, s), add(1, mul(x, sub(1, s))))


# gelu_backward's 3 * kappa, a product of fp32 constants as its kernel computes it
_THREE_KAPPA = (torch.tensor(0.044715, dtype=torch.float32) * 3).item()


@grad_rule(prims.gelu)
def _gelu(eqn, cts):
    """eager's gelu_backward (CUDA's formulas), constants included."""
    (x,), (ct,) = eqn.args, cts
    vjp = _gelu_erf if eqn.params["approximate"] == "none" else _gelu_tanh
    return [(x, _opmath(vjp)(ct, x, eqn.out))]


def _gelu_erf(ct, x, y):
    cdf = mul(0.5, add(1, _op("erf")(mul(x, 0.7071067811865476))))
    pdf = mul(_op("exp")(mul(mul(-0.5, x), x)), 0.3989422804014327)
    return mul(ct, add(cdf, mul(x, pdf)))


def _gelu_tanh(ct, x, y):
    beta, kappa = 0.7978845608028654, 0.044715
    x_sq = mul(x, x)
    inner = mul(beta, add(x, mul(kappa, mul(x_sq, x))))
    tanh_inner = _op("tanh")(inner)
    left_derivative = mul(0.5, add(1, tanh_inner))
    tanh_derivative = sub(1, mul(tanh_inner, tanh_inner))
    inner_derivative = mul(beta, add(1, mul(_THREE_KAPPA, x_sq)))
    right_derivative = mul(mul(mul(0.5, x), tanh_derivative), inner_derivative)
    return mul(ct, add(left_derivative, right_derivative))


@grad_rule(prims.PRIMS["pow"])
def _pow(eqn, cts):
    """eager's pow_backward: grad * (e * x ** (e - 1)) (x ** 0 is 1, NaN too); zeros for e = 0."""
    x, e = eqn.args
    if isinstance(e, TensorProxy) or not needs_grad(x):
        raise NotImplementedError("no fused gradient of a tensor exponent")
    if e == 0:
        return [(x, emit(prims.full, tuple(x.shape), value=0.0, dtype=x.dtype, device=x.device,
                         like=x))]
    return [(x, mul(cts[0], mul(e, emit(prims.PRIMS["pow"], x, e - 1))))]


def _select(cond, ct, keep_when_true: bool):
    return where(cond, ct, 0) if keep_when_true else where(cond, 0, ct)


@grad_rule(prims.PRIMS["maximum"], prims.PRIMS["minimum"])
def _max_min(eqn, cts):
    a, b = eqn.args
    ct = cts[0]
    loses_a, loses_b = (lt, gt) if eqn.prim.name == "maximum" else (gt, lt)
    # eager: where(a == b, grad / 2, grad), zero where the input loses (NaN loses nowhere)
    shared = where(eq(a, b), mul(ct, 0.5), ct)
    result = []
    if needs_grad(a):
        result.append((a, _select(loses_a(a, b), shared, False)))
    if needs_grad(b):
        result.append((b, _select(loses_b(a, b), shared, False)))
    return result


@grad_rule(prims.clamp)
def _clamp(eqn, cts):
    """eager's clamp_backward (number bounds) and clamp_backward_min_max (tensor bounds): x gets
    all of the gradient where lo <= x <= hi (bounds included: no halving on ties), lo where
    x < lo < hi, hi where x > hi or the bounds cross (hi < lo); NaN compares false. eager
    compares x with a number bound rounded to x's dtype (a comparison's rule), while its forward
    clamps with the unrounded bound."""
    x, lo, hi = eqn.args
    ct = cts[0]
    result = []
    if needs_grad(x):
        inside = ct
        for bound, within in ((hi, le), (lo, ge)):
            if bound is not None:
                inside = where(within(x, _compared(bound, x)), inside, 0)
        result.append((x, inside))
    if needs_grad(lo):
        below = where(lt(x, lo), ct, 0)
        result.append((lo, below if hi is None else where(lt(lo, hi), below, 0)))
    if needs_grad(hi):
        above = where(gt(x, hi), ct, 0)
        result.append((hi, above if lo is None else where(lt(hi, lo), ct, above)))
    return result


def _compared(bound, x):
    """A clamp bound as eager's gradient compares x with it: a number rounded (through fp32) to
    an fp16/bf16 x's dtype, a runtime one in the kernel (a cast of an fp32 fill)."""
    if isinstance(bound, TensorProxy) or x.dtype not in (torch.float16, torch.bfloat16):
        return bound
    if isinstance(bound, FloatProxy):
        return convert(emit(prims.full, tuple(x.shape), value=bound, dtype=torch.float32,
                            device=x.device), x.dtype)
    return current().run(operand_scalar, bound, x.dtype, rounded=True)


@grad_rule(prims.where)
def _where(eqn, cts):
    c, a, b = eqn.args
    ct = cts[0]
    return ([(a, _select(c, ct, True))] if needs_grad(a) else []) + (
        [(b, _select(c, ct, False))] if needs_grad(b) else [])


@grad_rule(prims.copy)
def _copy(eqn, cts):
    return [(eqn.args[0], cts[0])]


@grad_rule(prims.convert_element_type)
def _convert(eqn, cts):
    x = eqn.args[0]
    return [(x, convert(cts[0], x.dtype))] if needs_grad(x) else []


# ---- resizes and views ---------------------------------------------------------------------

def _negated(x):
    return -x if _const(x) else 0 - x


@grad_rule(prims.pad)
def _pad(eqn, cts):
    """The gradient of a pad is the gradient cropped back: a slice where no width is negative,
    else a pad by the negated widths (a negative width crops, a positive one zero-fills what
    the pad had cropped)."""
    t, config = eqn.args
    ct = cts[0]
    if all(_const(w) and w >= 0 for lo_hi in config for w in lo_hi):
        return [(t, emit(prims.slice_, ct, tuple(lo for lo, _ in config),
                         tuple(lo + s for (lo, _), s in zip(config, t.shape)),
                         (1,) * t.ndim, like=t))]
    negated = tuple((_negated(lo), _negated(hi)) for lo, hi in config)
    return [(t, emit(prims.pad, ct, negated, value=0, like=t))]


@grad_rule(prims.slice_)
def _slice(eqn, cts):
    """The gradient of a slice: the gradient zero-padded back to the input's shape. A dim with a
    step k interleaves k - 1 zeros first (reshape to [m, 1], pad to [m, k], reshape to [m * k])."""
    t, starts, stops, steps = eqn.args
    ct = cts[0]
    config = []
    for d, (start, stop, step, size) in enumerate(zip(starts, stops, steps, t.shape)):
        if step != 1:
            m = ct.shape[d]
            split = tuple(ct.shape[:d]) + (m, 1) + tuple(ct.shape[d + 1:])
            spread = emit(prims.pad, emit(prims.reshape, ct, split),
                          tuple((0, step - 1) if j == d + 1 else (0, 0)
                                for j in range(len(split))), value=0)
            ct = emit(prims.reshape, spread, tuple(ct.shape[:d]) + (m * step,)
                      + tuple(ct.shape[d + 1:]))
            stop = start + m * step
        config.append((start, size - stop))
    if all(_const(w) and w == 0 for lo_hi in config for w in lo_hi):
        return [(t, ct)]
    return [(t, emit(prims.pad, ct, tuple(config), value=0, like=t))]


@grad_rule(prims.cat)
def _cat(eqn, cts):
    pieces, d = eqn.args[0], eqn.params["dim"]
    ct = cts[0]
    result, offset = [], 0
    for p in pieces:
        end = offset + p.shape[d]
        if needs_grad(p):
            starts = tuple(offset if j == d else 0 for j in range(p.ndim))
            stops = tuple(end if j == d else s for j, s in enumerate(ct.shape))
            result.append((p, emit(prims.slice_, ct, starts, stops, (1,) * p.ndim, like=p)))
        offset = end
    return result


@grad_rule(prims.broadcast_in_dim)
def _broadcast(eqn, cts):
    """Summed over the dims the broadcast added or stretched from 1 (torch runs the sum)."""
    t, shape = eqn.args
    dims = eqn.params["dims"]
    stretched = {d for j, d in enumerate(dims)
                 if _const(t.shape[j]) and t.shape[j] == 1 and not (
                     _const(shape[d]) and shape[d] == 1)}
    summed = tuple(d for d in range(len(shape)) if d not in dims or d in stretched)
    ct = cts[0]
    if summed:
        ct = emit(prims.sum_, ct, dims=summed)
    return [(t, ct if not summed and ct.ndim == t.ndim else
             emit(prims.reshape, ct, tuple(t.shape), like=t))]


@grad_rule(prims.reshape)
def _reshape(eqn, cts):
    t = eqn.args[0]
    return [(t, emit(prims.reshape, cts[0], tuple(t.shape), like=t))]


@grad_rule(prims.permute)
def _permute(eqn, cts):
    perm = eqn.params["perm"]
    inverse = tuple(sorted(range(len(perm)), key=perm.__getitem__))
    return [(eqn.args[0], emit(prims.permute, cts[0], perm=inverse, like=eqn.args[0]))]


def has_rule(eqn) -> bool:
    """Whether the gradient of eqn can be written from the rules (a comparison needs none)."""
    if not any(o is not None and o.requires_grad for o in eqn.outs):
        return True
    if eqn.prim is prims.PRIMS["pow"]:
        return not isinstance(eqn.args[1], TensorProxy)
    return eqn.prim in GRAD_RULES



# ---- reductions ----------------------------------------------------------------------------

def _restored(ct, t, dims):
    """A reduced cotangent broadcast back over the reduced dims to t's shape."""
    kept = tuple(d for d in range(t.ndim) if d not in dims)
    return emit(prims.broadcast_in_dim, ct, tuple(t.shape), dims=kept, like=t)


@grad_rule(prims.sum_)
def _sum(eqn, cts):
    t = eqn.args[0]
    return [(t, _restored(cts[0], t, eqn.params["dims"]))]


@grad_rule(prims.amax, prims.amin)
def _extremum(eqn, cts):
    """As eager's amax/amin backward: the gradient split evenly among the elements equal to the
    result (`grad / count * mask`)."""
    t, dims = eqn.args[0], eqn.params["dims"]
    hits = eq(t, _restored(eqn.out, t, dims))
    count = emit(prims.sum_, emit(prims.convert_element_type, hits, dtype=t.dtype), dims=dims)
    share = _restored(div(cts[0], count), t, dims)
    return [(t, mul(share, emit(prims.convert_element_type, hits, dtype=t.dtype)))]
