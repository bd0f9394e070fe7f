"""Which reductions may share a fusion group (`triton_exec.fusion`): a group with reductions over
the innermost dims is lowered one row per program (`triton_exec.codegen.row_plan`), so its
reductions share their outer dims and their row, and its root has the row's shape or the
reduced one (keepdim or not); a group with reductions over a run of dims before the innermost
is lowered one block of columns per program (`triton_exec.codegen.column_reduction`), so its
reductions share their kept and reduced dims, and its root has the kept shape (keepdim or not). The two kinds never share
a group. A reduction that does not fit the group of its consumers starts a group of its own; a
group with reductions is never merged with a sibling.
"""
from __future__ import annotations

from ir.proxies import same_shape
from triton_exec.codegen.lower_reduction import columns_of, over_columns, row_of
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


def _split(eqn) -> tuple:
    """(over columns, the sizes it keeps before, reduces, keeps after): what reductions of one
    group share."""
    if over_columns(eqn):
        return (True, *columns_of(eqn))
    return (False, *row_of(eqn), ())


def _fits_column_root(root_shape, outer, reduced, inner) -> bool:
    n = len(root_shape) - len(outer) - len(inner)
    return n in (0, len(reduced)) and same_shape(root_shape[:len(outer)], outer) and same_shape(
        root_shape[len(root_shape) - len(inner):], inner) and all(
        isinstance(s, int) and s == 1 for s in root_shape[len(outer):len(outer) + n])


def joins(trace, eqn, members: list) -> bool:
    """Whether `eqn` may join the group of these members (equation indices, its root first)."""
    if not reduces(eqn):
        return True
    split = _split(eqn)
    root_shape = tuple(trace.eqns[members[0]].out.shape)
    fits = (_fits_column_root(root_shape, *split[1:]) if split[0]
            else _fits_root(root_shape, *split[1:3]))
    others = [_split(trace.eqns[i]) for i in members if reduces(trace.eqns[i])]
    return fits and all(o[0] == split[0] and all(same_shape(a, b) for a, b in zip(o[1:], split[1:]))
                        for o in others)


def reduction_splits(trace, group: list) -> list:
    """What each reduction of the group reduces (`_split`), in trace order."""
    return [_split(trace.eqns[i]) for i in group if reduces(trace.eqns[i])]


def mergeable(trace, a: list, b: list) -> bool:
    """Whether two independent groups may be one kernel with the outputs of both: without
    reductions (then their outputs' shapes decide, `triton_exec.horizontal`), or each with
    reductions that all reduce the same dims of the same sizes (the one row or column plan of
    both: GQA's sums over the repeats of k's and v's gradients, a layer norm's weight and bias
    gradients)."""
    splits = reduction_splits(trace, a) + reduction_splits(trace, b)
    if not splits:
        return True
    return bool(reduction_splits(trace, a)) and bool(reduction_splits(trace, b)) and all(
        s[0] == splits[0][0] and all(same_shape(x, y) for x, y in zip(s[1:], splits[0][1:]))
        for s in splits)
