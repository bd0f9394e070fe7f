"""The losses: `F.cross_entropy` with class indices as a decomposition into prims, fused by an
executor as any reduction: per row, the log-sum-exp of the logits (max subtracted, an infinite
max replaced by 0, as `logsumexp`; a row whose max is infinite has a NaN loss, as eager's
`log_softmax` gives) minus the target's logit (picked by comparing the class index
with an int32 `arange`, summed over the row), with `label_smoothing` (the row's mean of
-log_softmax) and `ignore_index` (a zero loss); then `reduction` "none", "sum" or "mean" (over
the targets not ignored: NaN when every one is, as eager). Computed in fp32; the target's
log-probability and the smoothing sum, which eager materializes in the input's dtype, are rounded
to it (an fp16 smoothing sum past 65504 is inf, as eager's), and the result is rounded to it. Registered into `ir.ops.registry`'s handler table on import (`ir.prims`
imports it). Where no executor fuses it (`ir.ops.reductions.decomposed`), or with a class
weight, probabilities as the target, other layouts than [N, C] logits with [N] targets, or the
legacy `size_average`/`reduce` arguments, it stays an opaque torch call (its shape rule:
`ir.ops.opaque`). A target outside [0, C) that is not `ignore_index` is eager's error; here it
picks no logit (README: Numerical contract).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ir.ops.casts import convert
from ir.ops.elementwise import shifted_exp
from ir.ops.factories import arange_p
from ir.ops.movement import reshape_p
from ir.ops.reductions import _upcast, amax_p, decomposed, reduce as over, sum_p
from ir.ops.registry import HANDLERS, register
from ir.proxies import TensorProxy
from ir.recording import bind, opaque


def _modeled(input, target, weight, size_average, reduce_, reduction, label_smoothing,
             ignore_index) -> bool:
    return (decomposed(input) and input.ndim == 2
            and isinstance(target, TensorProxy) and target.ndim == 1
            and target.dtype in (torch.int64, torch.int32) and weight is None
            and size_average is None and reduce_ is None and reduction in ("none", "sum", "mean")
            and isinstance(label_smoothing, (int, float)) and 0.0 <= label_smoothing <= 1.0
            and isinstance(ignore_index, int))


@register(F.cross_entropy)
def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                  reduction="mean", label_smoothing=0.0):
    if not _modeled(input, target, weight, size_average, reduce, reduction, label_smoothing,
                    ignore_index):
        return opaque(F.cross_entropy, (input, target),
                      {"weight": weight, "size_average": size_average,
                       "ignore_index": ignore_index, "reduce": reduce, "reduction": reduction,
                       "label_smoothing": label_smoothing})
    op = HANDLERS
    x = _upcast(input)
    classes = input.shape[1]
    # the max and the picked logit are exact in the input's dtype: only the sum of exp reads
    # the fp32 logits, so they are converted in its kernel, not materialized for three
    with torch.no_grad():   # the shift cancels in the loss: no gradient flows through it
        peak = convert(over(amax_p, input, (1,), True), x.dtype)
        infinite = op[torch.eq](op[torch.abs](peak), math.inf)
        finite = op[torch.where](infinite, 0.0, peak)
        # eager subtracts the max itself: a row whose max is infinite has a NaN loss
        undefined = op[torch.where](infinite, math.nan, 0.0)
    lse = op[torch.add](op[torch.log](over(sum_p, shifted_exp(op[torch.sub](x, finite)),
                                             (1,), True)), finite)
    target = convert(target, torch.int32)
    index = op[torch.unsqueeze](target, 1)
    hit = op[torch.eq](bind(arange_p, 0, classes, 1, dtype=torch.int32, device=input.device),
                       index)
    picked = convert(over(sum_p, op[torch.where](hit, input, 0.0), (1,), True), x.dtype)
    # eager materializes the target's log-probability and the smoothing sum in the input's
    # dtype: rounded there (an fp16 sum past 65504 is inf, as eager's)
    loss = op[torch.add](_as_eager_holds(op[torch.sub](lse, picked), input.dtype), undefined)
    if label_smoothing:
        smooth = _as_eager_holds(
            op[torch.sub](op[torch.mul](lse, classes), over(sum_p, x, (1,), True)), input.dtype)
        loss = op[torch.add](op[torch.mul](loss, 1.0 - label_smoothing),
                             op[torch.mul](smooth, label_smoothing / classes))
    # the ignored rows as `eq` here and the counted ones as `ne` below: each test is read by one
    # group (the rows' kernel, the final reduction's), so neither is a kernel of its own
    loss = op[torch.where](op[torch.eq](index, ignore_index), 0.0, loss)
    rows = (input.shape[0],)
    loss = bind(reshape_p, loss, rows)
    if reduction == "none":
        return convert(loss, input.dtype)
    total = over(sum_p, loss, (0,), False)
    if reduction == "mean":
        count = over(sum_p, convert(op[torch.ne](target, ignore_index), torch.float32),
                     (0,), False)
        total = op[torch.div](total, count)
    return convert(total, input.dtype)


def _as_eager_holds(t, dtype):
    """t rounded to `dtype` (fp16/bf16) and read back in t's dtype."""
    return convert(convert(t, dtype), t.dtype)
