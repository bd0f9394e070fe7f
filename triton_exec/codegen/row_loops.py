"""The loops of a row plan whose row is walked in blocks (`row_plan`, a row longer than
`lower_reduction.ROW_LIMIT` or of runtime length): which reductions share one loop over the
row. Reductions that read no other reduction of the group share the first loop; one that reads
others runs in a loop after theirs. A sum of `exp(a - shift)`, where `a` reads no reduction and
`shift` is a row's max with an infinite max replaced by 0 (`logsumexp`'s and cross_entropy's
`where(abs(max) == inf, 0, max)`) or the max itself (softmax's and log_softmax's: NaN where the
max is infinite, as eager's `inf - inf`), joins the loop of its max (`OnlineSum`: an online
log-sum-exp, rescaled as the max grows), so a cross-entropy row is read once and a softmax row
twice (the sum, then the outputs); a sum of
where(arange == i, v, 0) (`Pick`: the target's logit) needs no loop, it is v at column i, one
load per row (in any row plan: `lower_reduction`). Planning only: `lower_reduction`'s
`reduce_in_one_loop` lowers each loop.
"""
from __future__ import annotations

import dataclasses
import math

import torch

from ir import TensorProxy
from ir.proxies import same_size
from triton_exec.rules import rule_of


@dataclasses.dataclass
class OnlineSum:
    """A sum over the row of exp(a - shift) computed in the loop of its max (see the module)."""

    peak: object            # the max's equation (an amax over the same row)
    a: TensorProxy          # what the shift is subtracted from
    shift: TensorProxy      # the per-row shift, one value per row ([outer..., 1...])
    broadcast: TensorProxy  # the shift broadcast along the row, as the subtraction reads it
    same_values: bool       # `a` holds the max's input (or its fp32 convert): then the sum is
                            # NaN exactly where the row holds a NaN (its max needs no flag),
                            # and reads the max's masked tile (-inf off the row: exp gives 0)
    exp: object             # the exp's equation (`exp`, or the softmax family's `softmax_exp`),
                            # whose function also rescales the running sum
    raw: bool = False       # the shift is the max itself, not its finite form: the sum is
                            # summed at the finite shift, and is NaN where the max is not finite


def plan_loops(reductions: list, producers: dict) -> list:
    """[(reductions, [(sum equation, OnlineSum), ...]), ...]: the loops over the row, in order;
    `reductions` in trace order, `producers` id(value) -> its equation in the group."""
    level: dict = {}
    loops: list = []
    for eqn in reductions:
        if one_hot_pick(eqn, producers) is not None:
            level[id(eqn.out)] = -1     # one load per row, outside the loops
            continue
        found = _online_sum(eqn, producers, level)
        if found is not None:
            at = level[id(found.peak.out)]
        else:
            read = _reductions_read(eqn.args[0], producers)
            at = 1 + max((level[r] for r in read), default=-1)
        level[id(eqn.out)] = at
        while len(loops) <= at:
            loops.append(([], []))
        if found is not None:
            loops[at][1].append((eqn, found))
        else:
            loops[at][0].append(eqn)
    return loops


def _reductions_read(value, producers: dict) -> set:
    """ids of the outputs of the group's reductions that `value` reads, through the group's
    other equations."""
    found, seen, todo = set(), set(), [value]
    while todo:
        eqn = producers.get(id(todo.pop()))
        if eqn is None or id(eqn) in seen:
            continue
        seen.add(id(eqn))
        if rule_of(eqn) is not None and rule_of(eqn).reduces:
            found.add(id(eqn.out))
        else:
            todo += [v for v in eqn.input_vars() if isinstance(v, TensorProxy)]
    return found


def _online_sum(eqn, producers: dict, level: dict):
    """The OnlineSum of a sum of exp(a - a max, or its finite shift) in fp32, else None."""
    if eqn.prim.name != "sum" or eqn.out.dtype != torch.float32:
        return None
    exp = producers.get(id(eqn.args[0]))
    if exp is None or exp.prim.name not in ("exp", "softmax_exp") or exp.out.dtype != torch.float32:
        return None
    sub = producers.get(id(exp.args[0]))
    if sub is None or sub.prim.name != "sub" or not all(
            isinstance(v, TensorProxy) for v in sub.args[:2]):
        return None
    a, broadcast = sub.args[:2]
    if _reductions_read(a, producers):
        return None
    shift = broadcast
    spread = producers.get(id(shift))
    if spread is not None and spread.prim.name == "broadcast_in_dim":
        shift = spread.args[0]
    peak, raw = _finite_shift_of(shift, producers), False
    if peak is None and shift.dtype == torch.float32:
        peak, raw = _max_through_views(shift, producers), True
    if peak is None or id(peak.out) not in level or peak.params["dims"] != eqn.params["dims"]:
        return None
    outer = eqn.args[0].ndim - len(eqn.params["dims"])
    if shift.ndim != eqn.args[0].ndim or not all(
            isinstance(s, int) and s == 1 for s in shift.shape[outer:]):
        return None
    source = producers.get(id(a))
    same = a is peak.args[0] or (source is not None and source.prim.name == "convert_element_type"
                                 and source.args[0] is peak.args[0]
                                 and source.args[0].dtype.is_floating_point)   # to fp32: exact
    return OnlineSum(peak, a, shift, broadcast, same, exp, raw)


def _finite_shift_of(shift, producers: dict):
    """The amax equation of `shift = where(abs(p) == inf, 0, p)`, p a view or fp32 convert of
    the max (one value per row); else None."""
    where = producers.get(id(shift))
    if where is None or where.prim.name != "where" or shift.dtype != torch.float32:
        return None
    cond, zero, p = where.args[:3]
    if not isinstance(zero, (int, float)) or not math.isfinite(zero):
        return None
    test = producers.get(id(cond))
    if test is None or test.prim.name != "eq" or test.args[1] != math.inf:
        return None
    magnitude = producers.get(id(test.args[0]))
    if magnitude is None or magnitude.prim.name != "abs" or magnitude.args[0] is not p:
        return None
    return _max_through_views(p, producers)


def _max_through_views(p, producers: dict):
    """The amax equation of p, a reshape or float convert of the max (one value per row); else
    None."""
    eqn = producers.get(id(p))
    while eqn is not None and eqn.prim.name in ("reshape", "convert_element_type"):
        if eqn.prim.name == "convert_element_type" and not eqn.args[0].dtype.is_floating_point:
            return None
        eqn = producers.get(id(eqn.args[0]))
    return eqn if eqn is not None and eqn.prim.name == "amax" else None


@dataclasses.dataclass
class Pick:
    """A sum over the innermost dim of where(arange == i, v, 0), `i` one index per row: the
    row's v at column i (0 where i is outside the row), read by one load per row."""

    value: TensorProxy      # v, over the row
    column: TensorProxy     # i, one per row ([outer..., 1])


def one_hot_pick(eqn, producers: dict):
    """The Pick of a sum of where(eq(arange over the row, i broadcast along it), v, 0) over
    one innermost dim of more than one element (cross_entropy's target logit), else None."""
    if eqn.prim.name != "sum" or tuple(eqn.params["dims"]) != (eqn.args[0].ndim - 1,):
        return None
    length = eqn.args[0].shape[-1]
    where = producers.get(id(eqn.args[0]))
    if (where is None or where.prim.name != "where" or len(where.args) != 3
            or not isinstance(where.args[2], (int, float)) or where.args[2] != 0
            or not isinstance(where.args[1], TensorProxy)):
        return None
    test = producers.get(id(where.args[0]))
    if test is None or test.prim.name != "eq" or not all(
            isinstance(v, TensorProxy) and not v.dtype.is_floating_point for v in test.args):
        return None
    for columns, column in (test.args, test.args[::-1]):
        if _is_row_arange(columns, length, producers) and (
                i := _per_row_source(column, producers)) is not None:
            if i.ndim == eqn.args[0].ndim and not (isinstance(length, int) and length < 2):
                return Pick(where.args[1], i)
    return None


def _is_row_arange(v, length, producers: dict) -> bool:
    """Whether v is arange(0, length, 1) broadcast along the innermost dim (its column index)."""
    spread = producers.get(id(v))
    if spread is None or spread.prim.name != "broadcast_in_dim" or tuple(
            spread.params["dims"]) != (v.ndim - 1,):
        return False
    arange = producers.get(id(spread.args[0]))
    return (arange is not None and arange.prim.name == "arange" and len(arange.args) == 3
            and arange.args[0] == 0 and arange.args[2] == 1 and same_size(arange.args[1], length))


def _per_row_source(v, producers: dict):
    """The tensor of one value per row ([outer..., 1]) that v broadcasts along the innermost
    dim, else None."""
    spread = producers.get(id(v))
    if spread is None or spread.prim.name != "broadcast_in_dim":
        return None
    source = spread.args[0]
    if tuple(spread.params["dims"]) != tuple(range(v.ndim)) or not (
            isinstance(source.shape[-1], int) and source.shape[-1] == 1):
        return None
    return source
