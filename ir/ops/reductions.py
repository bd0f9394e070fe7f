"""Reductions as decompositions into prims: `sum`, `mean`, `amax`/`amin` record the reduction
prims (`sum_p`, `amax_p`, `amin_p`, reshaped back for `keepdim`); `softmax`, `log_softmax`,
`logsumexp`, `var`/`std`, `F.rms_norm` and `F.layer_norm` are written with them and elementwise
prims, as ATen writes them (softmax, var, the norms in fp32 for fp16/bf16 input, rounded once to
the input's dtype), where an executor of the jitted function fuses them (`decomposed`); else
eager's own op is kept (the torch executor runs it bit for bit). Anything outside what is
modeled here (integer input, a `dtype=` argument, an implicit dim) stays an opaque torch call,
whose shape rules are here too (with those of the reductions left to torch: `prod`, `argmax`,
`max(dim)`, norms). The grad rules: a sum's gradient broadcast back, amax/amin's split evenly
among the elements equal to the result.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ir.ops.casts import convert, convert_element_type_p
from ir.ops.elementwise import shifted_exp
from ir.ops.movement import broadcast_in_dim_p, reshape_p
from ir.ops.opaque import _tensors, equal
from ir.ops.registry import HANDLERS, TORCH_SOURCE, define, grad_rule, register, shape_rule
from ir.ops.scalars import meta_dtype
from ir.ops.shapes import _dim, _same, broadcast_shape
from ir.ops.vjp import div, emit, eq, mul
from ir.proxies import IntProxy, TensorProxy, active_trace, hint
from ir.recording import bind, opaque
from ir.trace import render

_NARROW = (torch.float16, torch.bfloat16)


# Reductions over `dims` (sorted), which the output drops (keepdim is a reshape after); an
# executor may fuse those it can (over the innermost dims or a run before them), torch runs the
# others.
def _reduced_meta(t, *, dims):
    return _same(t, shape=[s for d, s in enumerate(t.shape) if d not in dims])


sum_p = define("sum", "tensor", _reduced_meta)
amax_p = define("amax", "tensor", _reduced_meta)
amin_p = define("amin", "tensor", _reduced_meta)
REDUCTIONS = (sum_p, amax_p, amin_p)
for _prim in REDUCTIONS:        # as torch runs them: `t0.sum((1,))`
    TORCH_SOURCE[_prim] = lambda e: f"{e.args[0].name}.{e.prim.name}({render(e.params['dims'])})"


def _dims(x, dim) -> tuple:
    """The reduced dims, sorted (None or () reduce every dim, as eager's sum does)."""
    if dim is None or (isinstance(dim, (tuple, list)) and len(dim) == 0):
        return tuple(range(x.ndim))
    dims = dim if isinstance(dim, (tuple, list)) else (dim,)
    return tuple(sorted({_dim(d, x.ndim) for d in dims}))


def _count(x, dims):
    n = 1
    for d in dims:
        n = n * x.shape[d]
    return n


def _keep(x, result, dims):
    """The reduced result with size-1 dims where `dims` were (keepdim=True)."""
    return bind(reshape_p, result, tuple(1 if d in dims else s for d, s in enumerate(x.shape)))


def reduce(prim, x, dims, keepdim):
    """`prim` over `dims` of x (a 0-d x reduces to itself), reshaped back for keepdim."""
    if x.ndim == 0:
        return x
    result = bind(prim, x, dims=dims)
    return _keep(x, result, dims) if keepdim else result


def _modeled(x) -> bool:
    return isinstance(x, TensorProxy) and x.dtype.is_floating_point


def decomposed(x, dims: tuple = ()) -> bool:
    """Whether a composite op (softmax, log_softmax, logsumexp, var/std, the norms,
    cross_entropy) on x is traced as its decomposition: a float tensor that an executor of the
    jitted function fuses (`Executor.decomposes`; with `dims`, the softmax family's reductions
    over them too); else eager's own op is kept, bit for bit."""
    return _modeled(x) and any(ex.decomposes(x, dims) for ex in active_trace().executors)


@register(torch.sum, torch.Tensor.sum, methods=("sum",))
def sum_(input, dim=None, keepdim=False, *, dtype=None):
    if not _modeled(input) or dtype is not None:
        return opaque(torch.sum, (input, dim, keepdim) if dim is not None else (input,),
                      {"dtype": dtype})
    return reduce(sum_p, input, _dims(input, dim), keepdim)


@register(torch.mean, torch.Tensor.mean, methods=("mean",))
def mean(input, dim=None, keepdim=False, *, dtype=None):
    """The sum divided by the count, in fp32 for fp16/bf16, rounded once (as eager)."""
    if not _modeled(input) or dtype is not None:
        args = (input,) if dim is None else (input, dim, keepdim)
        return opaque(torch.mean, args, {"dtype": dtype})
    dims = _dims(input, dim)
    total = reduce(sum_p, _upcast(input), dims, keepdim)
    return convert(HANDLERS[torch.div](total, _count(input, dims)), input.dtype)


def _extremum(prim, fn):
    def handler(input, dim=(), keepdim=False):
        if not _modeled(input):
            return opaque(fn, (input, dim, keepdim), {})
        dims = _dims(input, dim)
        if any(hint(input.shape[d]) == 0 for d in dims):
            meta_dtype(fn, input, dim, keepdim)         # eager's error for an empty reduction
        return reduce(prim, input, dims, keepdim)
    return handler


register(torch.amax, torch.Tensor.amax, methods=("amax",))(_extremum(amax_p, torch.amax))
register(torch.amin, torch.Tensor.amin, methods=("amin",))(_extremum(amin_p, torch.amin))


def _upcast(x):
    """x in fp32 where it is fp16/bf16 (ATen's accumulate type), else x."""
    return convert(x, torch.float32) if x.dtype in _NARROW else x


def _softmax_parts(x, dim):
    """(x - max, sum(exp(x - max))) over dim, kept: the shared half of softmax and log_softmax."""
    dims = (_dim(dim, x.ndim),)
    with torch.no_grad():   # the shift cancels: no gradient flows through the max
        peak = reduce(amax_p, x, dims, True)
    shifted = HANDLERS[torch.sub](x, peak)
    exp = shifted_exp(shifted)
    return shifted, exp, reduce(sum_p, exp, dims, True)


def _softmax_like(fn, log: bool):
    def handler(input, dim=None, _stacklevel=3, dtype=None):
        if (not isinstance(input, TensorProxy) or dim is None or input.ndim == 0
                or not decomposed(input, (_dim(dim, input.ndim),))):
            return opaque(fn, (input, dim), {"dtype": dtype} if dtype is not None else {})
        x = convert(input, dtype) if dtype is not None else input
        out_dtype = x.dtype
        shifted, exp, total = _softmax_parts(_upcast(x), dim)
        result = (HANDLERS[torch.sub](shifted, HANDLERS[torch.log](total)) if log
                  else HANDLERS[torch.div](exp, total))
        return convert(result, out_dtype)
    return handler


register(torch.softmax, torch.Tensor.softmax, F.softmax, methods=("softmax",))(
    _softmax_like(torch.softmax, log=False))
register(torch.log_softmax, torch.Tensor.log_softmax, F.log_softmax, methods=("log_softmax",))(
    _softmax_like(torch.log_softmax, log=True))


@register(torch.logsumexp, torch.Tensor.logsumexp, methods=("logsumexp",))
def logsumexp(input, dim, keepdim=False):
    """As ATen: max subtracted, an infinite max replaced by 0 (an all -inf row gives -inf)."""
    if not isinstance(input, TensorProxy) or input.ndim == 0 or not decomposed(
            input, _dims(input, dim)):
        return opaque(torch.logsumexp, (input, dim, keepdim), {})
    dims = _dims(input, dim)
    with torch.no_grad():   # the shift cancels: no gradient flows through it
        peak = reduce(amax_p, input, dims, True)
        finite = HANDLERS[torch.where](HANDLERS[torch.eq](HANDLERS[torch.abs](peak), math.inf),
                                       0.0, peak)
    total = reduce(sum_p, shifted_exp(HANDLERS[torch.sub](input, finite)), dims, keepdim)
    return HANDLERS[torch.add](HANDLERS[torch.log](total), finite if keepdim else bind(
        reshape_p, finite, tuple(s for d, s in enumerate(input.shape) if d not in dims)))


def _centered(xf, dims, n):
    """x - mean(x), the mean summed from x / N: finite wherever eager's (Welford's) is, where
    sum(x) / N would overflow for values near the dtype's largest."""
    return HANDLERS[torch.sub](xf, reduce(sum_p, HANDLERS[torch.div](xf, n), dims, True))


def _variance(x, dims, correction, keepdim):
    """sum((x - mean)^2) / max(N - correction, 0), in fp32 for fp16/bf16, rounded once."""
    xf = _upcast(x)
    n = _count(x, dims)
    centered = _centered(xf, dims, n)
    squares = reduce(sum_p, HANDLERS[torch.mul](centered, centered), dims, keepdim)
    divisor = n - correction
    if not isinstance(divisor, IntProxy) and divisor < 0:
        divisor = 0
    return HANDLERS[torch.div](squares, divisor)


def _correction(unbiased, correction):
    if correction is not None:
        return correction
    return 1 if unbiased is None else int(bool(unbiased))


def _var_like(fn, root: bool):
    def handler(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
        c = _correction(unbiased, correction)
        if not decomposed(input) or input.ndim == 0 or not isinstance(c, int):
            return opaque(fn, (input, dim), {"correction": c, "keepdim": keepdim})
        result = _variance(input, _dims(input, dim), c, keepdim)
        return convert(HANDLERS[torch.sqrt](result) if root else result, input.dtype)
    return handler


register(torch.var, torch.Tensor.var, methods=("var",))(_var_like(torch.var, root=False))
register(torch.std, torch.Tensor.std, methods=("std",))(_var_like(torch.std, root=True))


def _norm_dims(input, normalized_shape):
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    return tuple(range(input.ndim - len(shape), input.ndim))


@register(F.rms_norm)
def rms_norm(input, normalized_shape, weight=None, eps=None):
    """As ATen's composite: x * rsqrt(mean(x^2) + eps) in fp32 for fp16/bf16, rounded to the
    input's dtype, then times the weight (eps defaults to fp32's machine epsilon)."""
    if not decomposed(input) or (weight is not None and not isinstance(weight, TensorProxy)):
        return opaque(F.rms_norm, (input, normalized_shape, weight, eps), {})
    dims = _norm_dims(input, normalized_shape)
    xf = _upcast(input)
    eps = torch.finfo(xf.dtype).eps if eps is None else eps
    ms = HANDLERS[torch.div](reduce(sum_p, HANDLERS[torch.mul](xf, xf), dims, True),
                        _count(input, dims))
    result = convert(HANDLERS[torch.mul](xf, HANDLERS[torch.rsqrt](HANDLERS[torch.add](ms, eps))), input.dtype)
    return result if weight is None else HANDLERS[torch.mul](result, weight)


@register(F.layer_norm)
def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """(x - mean) * rsqrt(biased var + eps) * weight + bias, in fp32 for fp16/bf16 (weight and
    bias too), rounded once to the input's dtype."""
    if not decomposed(input) or any(p is not None and not isinstance(p, TensorProxy)
                                    for p in (weight, bias)):
        return opaque(F.layer_norm, (input, normalized_shape, weight, bias, eps), {})
    dims = _norm_dims(input, normalized_shape)
    xf = _upcast(input)
    n = _count(input, dims)
    centered = _centered(xf, dims, n)
    var = HANDLERS[torch.div](reduce(sum_p, HANDLERS[torch.mul](centered, centered), dims, True), n)
    result = HANDLERS[torch.mul](centered, HANDLERS[torch.rsqrt](HANDLERS[torch.add](var, eps)))
    if weight is not None:
        result = HANDLERS[torch.mul](result, _upcast(weight))
    if bias is not None:
        result = HANDLERS[torch.add](result, _upcast(bias))
    return convert(result, input.dtype)


# ---- shape rules of the calls left to torch (`ir.ops.opaque`) -------------------------------

def reduced(input, dim, keepdim) -> tuple:
    """input's shape reduced over `dim` (an int, a sequence of them, or None or () for all)."""
    listed = dim if isinstance(dim, (tuple, list)) else () if dim is None else (dim,)
    dims = {_dim(d, input.ndim) for d in listed} or set(range(input.ndim))
    return tuple(1 if d in dims else s for d, s in enumerate(input.shape)
                 if keepdim or d not in dims)


@shape_rule("sum", "mean", "nansum", "nanmean", "amax", "amin", "logsumexp", "prod",
            "count_nonzero", "any", "all", "argmax", "argmin")
def reduction(input, dim=None, keepdim=False, **kwargs):
    return [reduced(input, dim, keepdim)]


@shape_rule("var", "std")
def variance(input, dim=None, unbiased=None, keepdim=False, *, correction=None, **kwargs):
    if isinstance(dim, bool):           # var(input, unbiased)
        dim = None
    return [reduced(input, dim, keepdim)]


@shape_rule("var_mean", "std_mean")
def variance_and_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None,
                      **kwargs):
    return variance(input, dim, unbiased, keepdim) * 2


@shape_rule("max", "min")
def max_min(input, dim=None, keepdim=False, **kwargs):
    if isinstance(dim, TensorProxy):        # the binary form: torch.max(a, b)
        return [broadcast_shape(input.shape, dim.shape)]
    if dim is None:
        return [()]
    shape = reduced(input, dim, keepdim)
    return [shape, shape]


@shape_rule(torch.linalg.vector_norm)
def vector_norm(input, ord=2, dim=None, keepdim=False, *, dtype=None):
    return [reduced(input, dim, keepdim)]


@shape_rule(torch.norm, torch.Tensor.norm)
def norm(input, p="fro", dim=None, keepdim=False, **kwargs):
    return [reduced(input, dim, keepdim)]


@shape_rule(F.layer_norm, torch.layer_norm, F.rms_norm, torch.rms_norm)
def normalization(input, normalized_shape, weight=None, bias=None, eps=None, *args):
    normalized = tuple(normalized_shape) if isinstance(normalized_shape, (tuple, list, torch.Size)) \
        else (normalized_shape,)
    for a, b in zip(input.shape[input.ndim - len(normalized):], normalized):
        equal(a, b)
    for param in _tensors(weight, bias):
        for a, b in zip(param.shape, normalized):
            equal(a, b)
    return [input.shape]


# ---- grad rules -----------------------------------------------------------------------------

def _restored(ct, t, dims):
    """A reduced cotangent broadcast back over the reduced dims to t's shape."""
    kept = tuple(d for d in range(t.ndim) if d not in dims)
    return emit(broadcast_in_dim_p, ct, tuple(t.shape), dims=kept, like=t)


@grad_rule(sum_p)
def _sum(eqn, cts):
    t = eqn.args[0]
    return [(t, _restored(cts[0], t, eqn.params["dims"]))]


@grad_rule(amax_p, amin_p)
def _extremum_grad(eqn, cts):
    """As eager's amax/amin backward: the gradient split evenly among the elements equal to the
    result (`grad / count * mask`)."""
    t, dims = eqn.args[0], eqn.params["dims"]
    hits = eq(t, _restored(eqn.out, t, dims))
    count = emit(sum_p, emit(convert_element_type_p, hits, dtype=t.dtype), dims=dims)
    share = _restored(div(cts[0], count), t, dims)
    return [(t, mul(share, emit(convert_element_type_p, hits, dtype=t.dtype)))]
