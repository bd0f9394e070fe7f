"""Which reductions may share a fusion group (`triton_exec.fusion`): a group with reductions is
lowered one row per program (`triton_exec.codegen.row_plan`), so its reductions share their
outer dims and their row, and its root has the row's shape or the reduced one (keepdim or
not). A reduction that does not fit the group of its consumers starts a group of its own; a
group with reductions is never merged with a sibling.
"""
from __future__ import annotations

from ir.proxies import same_shape
from triton_exec.codegen.lower_reduction import row_of
from triton_exec.rules import rule_of


def reduces(eqn) -> bool:
    rule = rule_of(eqn)
    return rule is not None and rule.reduces


def _fits_root(root_shape, outer, reduced) -> bool:
    n = len(outer)
    if len(root_shape) == n + len(reduced):
        tail = root_shape[n:]
        return same_shape(root_shape[:n], outer) and (
            same_shape(tail, reduced) or all(isinstance(s, int) and s == 1 for s in tail))
    return len(root_shape) == n and same_shape(root_shape, outer)


def joins(trace, eqn, members: list) -> bool:
    """Whether `eqn` may join the group of these members (equation indices, its root first)."""
    if not reduces(eqn):
        return True
    outer, reduced = row_of(eqn)
    others = [row_of(trace.eqns[i]) for i in members if reduces(trace.eqns[i])]
    return (_fits_root(tuple(trace.eqns[members[0]].out.shape), outer, reduced)
            and all(same_shape(o, outer) and same_shape(r, reduced) for o, r in others))


def mergeable(trace, group: list) -> bool:
    """Whether a group may merge with a sibling: not when it holds a reduction."""
    return not any(reduces(trace.eqns[i]) for i in group)
