"""Which reductions may share a fusion group (`triton_exec.fusion`): a group with reductions over
the innermost dims is lowered one row per program (`triton_exec.codegen.row_plan`), so its
reductions share their outer dims and their row, and its root has the row's shape or the
reduced one (keepdim or not); a group with reductions over a run of dims before the innermost
is lowered one block of columns per program (`triton_exec.codegen.column_reduction`), so its
reductions share their kept and reduced dims, and its root has the kept shape (keepdim or not),
or copies a permute of a value of that shape (stored permuted). The two kinds never share
a group. A reduction that does not fit the group of its consumers starts a group of its own; a
group with reductions is never merged with a sibling.
"""
from __future__ import annotations

from ir.proxies import same_shape
from triton_exec.codegen.lower_reduction import columns_of, over_columns, permuted_copy, row_of
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
    root = trace.eqns[members[0]]
    stored = permuted_copy(root, lambda v: next((trace.eqns[i] for i in members if any(
        o is v for o in trace.eqns[i].outs)), None)) if split[0] else None
    # a column plan stores a permuted copy of a value of the kept shape permuted
    root_shape = tuple((root.out if stored is None else stored[0]).shape)
    fits = (_fits_column_root(root_shape, *split[1:]) if split[0]
            else _fits_root(root_shape, *split[1:3]))
    others = [_split(trace.eqns[i]) for i in members if reduces(trace.eqns[i])]
    return fits and all(o[0] == split[0] and all(same_shape(a, b) for a, b in zip(o[1:], split[1:]))
                        for o in others)


def mergeable(trace, group: list) -> bool:
    """Whether a group may merge with a sibling: not when it holds a reduction."""
    return not any(reduces(trace.eqns[i]) for i in group)
