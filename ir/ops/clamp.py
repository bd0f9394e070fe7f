"""Clamp: one prim for `clamp`/`clip`/`clamp_min`/`clamp_max` with tensor, number or absent
bounds, its torch mapping (bounds broadcast and promoted as eager does; number bounds used
unrounded, in fp32) and its grad rule, eager's `clamp_backward`, which is not the chain of
maximum's and minimum's.
"""
from __future__ import annotations

import torch

from ir.ops.casts import convert
from ir.ops.factories import full_p
from ir.ops.movement import expand_to
from ir.ops.registry import define, grad_rule, register
from ir.ops.scalars import _is_number, _one, meta_dtype, operand_scalar
from ir.ops.shapes import _same, broadcast_shape
from ir.ops.vjp import emit, ge, gt, le, lt, needs_grad, where
from ir.proxies import FloatProxy, TensorProxy
from ir.recording import bind, current

# clamp(x, lo, hi): minimum(maximum(x, lo), hi) as eager computes it (NaN wins; crossed bounds
# give hi), each bound a tensor of x's shape and dtype, a number or None (absent); its own prim
# for eager's gradient (below), which is not the chain of maximum's and minimum's.
clamp_p = define("clamp", "elementwise", lambda t, lo, hi: _same(t))


@register(torch.clamp, torch.Tensor.clamp, torch.clip, torch.Tensor.clip, methods=("clamp", "clip"))
def clamp(input, min=None, max=None):
    """One clamp prim, its bounds tensors (broadcast with the input, in the promoted dtype) or
    numbers (used unrounded, in fp32, as eager's clamp does) or None: the gradient is eager's
    clamp rule (`_clamp` below), not the chain of maximum's and minimum's."""
    dtype = meta_dtype(torch.clamp, input, min, max)     # eager's refusals: no bound, mixed kinds
    if any(_is_number(b) for b in (min, max)):   # eager refuses bounds out of an int dtype's range
        torch.clamp(_one(input.dtype), *(b if _is_number(b) else None for b in (min, max)))
    shape = broadcast_shape(*[t.shape for t in (input, min, max) if isinstance(t, TensorProxy)])
    input, min, max = (convert(expand_to(b, shape), dtype) if isinstance(b, TensorProxy)
                       else operand_scalar(b, dtype, rounded=False) for b in (input, min, max))
    return bind(clamp_p, input, min, max)


@register(torch.clamp_min, torch.Tensor.clamp_min, methods=("clamp_min",))
def clamp_min(input, min):
    return clamp(input, min=min)


@register(torch.clamp_max, torch.Tensor.clamp_max, methods=("clamp_max",))
def clamp_max(input, max):
    return clamp(input, max=max)


# ---- grad rule ------------------------------------------------------------------------------

@grad_rule(clamp_p)
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
        return convert(emit(full_p, tuple(x.shape), value=bound, dtype=torch.float32,
                            device=x.device), x.dtype)
    return current().run(operand_scalar, bound, x.dtype, rounded=True)
