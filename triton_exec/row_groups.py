"""Which reductions may share a fusion group (`triton_exec.fusion`): a group with reductions over
the innermost dims is lowered one row per program (`triton_exec.codegen.row_plan`), so its
reductions share their outer dims and their row, and its root has the row's shape or the
reduced one (keepdim or not); a group with reductions over a run of dims before the innermost
is lowered one block of columns per program (`triton_exec.codegen.column_reduction`), so its
reductions share their kept and reduced dims, and its root has the kept shape (keepdim or not),
copies a permute of a value of that shape (stored permuted), or has the reduced value's shape
(softmax over an outer dim). The two kinds never share a group. A row plan computes every value
of the row's shape at the tile's (rows, columns), so a row reduction whose kept dims reach the
trailing (column) dims of a value of the row's shape downstream of it in the group (through a
permute: ConvNeXt's LayerNorm2d backward permuted back to NCHW) would be asked for rows that vary
along the columns: it does not join; nor does a column reduction whose kept dims move in such a
value (`_kept_dims_stay`).
A reduction that does not fit the group of its consumers starts a group of its own; a
group with reductions is never merged with a sibling.
A value of one per row of the row reductions it reads, which nothing else reads
(cross-entropy's per-row loss, from the row's log-sum-exp and picked logit), stays out of a group
that reduces other rows (the loss's sum): it goes with its reductions, whose kernel stores it,
instead of that group reading each of their results.
"""
from __future__ import annotations

import math

from ir import prims
from ir.proxies import hint, same_shape
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
    """The kept shape (keepdim or not), or the reduced value's own shape (softmax over an outer
    dim: stored by a last loop over the rows)."""
    n = len(root_shape) - len(outer) - len(inner)
    middle = root_shape[len(outer):len(outer) + n]
    return n in (0, len(reduced)) and same_shape(root_shape[:len(outer)], outer) and same_shape(
        root_shape[len(root_shape) - len(inner):], inner) and (
        all(isinstance(s, int) and s == 1 for s in middle) or same_shape(middle, reduced))


def _dims_into(eqn, arg, dims: dict) -> dict:
    """Where the dims of `arg` (dim -> tag) are in `eqn`'s output: through a permute, a
    broadcast (an expanded size-1 dim is dropped), a reshape (the dims it keeps whole), a
    reduction (its kept dims), else position by position when the ranks agree."""
    out = eqn.out
    if eqn.prim is prims.permute:
        return {i: dims[p] for i, p in enumerate(eqn.params["perm"]) if p in dims}
    if eqn.prim is prims.broadcast_in_dim:
        return {eqn.params["dims"][k]: tag for k, tag in dims.items()
                if hint(arg.shape[k]) == hint(out.shape[eqn.params["dims"][k]])}
    if eqn.prim is prims.reshape:
        starts = {math.prod(hint(s) for s in out.shape[:j]): j for j in range(out.ndim)}
        found = {}
        for k, tag in dims.items():
            j = starts.get(math.prod(hint(s) for s in arg.shape[:k]))
            if j is not None and hint(out.shape[j]) == hint(arg.shape[k]):
                found[j] = tag
        return found
    if reduces(eqn) and arg is eqn.args[0]:
        kept = arg.ndim - len(eqn.params["dims"])
        return {k: tag for k, tag in dims.items() if k < kept} if not over_columns(eqn) else {}
    return dict(dims) if out is not None and out.ndim == arg.ndim else {}


def _kept_dims_stay(trace, eqn, members: list) -> bool:
    """Whether the kept dims of the reduction `eqn` stay where a plan computes them in every
    value of its input's rank downstream of it among the members: a row plan computes such a
    value at the tile's columns, so a kept dim reached through a permute at a column would need
    the reduction of rows that vary along the columns; a column plan computes it in a loop over
    the rows (`column_reduction`), so each kept dim must stay at its own position (else the
    reduction is asked for at another index inside that loop)."""
    t, dims = eqn.args[0], eqn.params["dims"]
    kept = [d for d in range(t.ndim) if d not in dims]
    columns = over_columns(eqn)
    # a kept dim of size 1 varies along nothing: it may land anywhere
    tracked = {id(eqn.out): {k: d for k, d in enumerate(kept) if hint(t.shape[d]) != 1}}
    for i in sorted(members):
        e = trace.eqns[i]
        if e.out is None:
            continue
        found = {}
        for arg in e.input_vars():
            if id(arg) in tracked:
                found.update(_dims_into(e, arg, tracked[id(arg)]))
        if not found:
            continue
        tracked[id(e.out)] = found
        if e.out.ndim == t.ndim and any(j != d if columns else j >= len(kept)
                                        for j, d in found.items()):
            return False
    return True


_MAPS: list = [None, {}, {}]    # (the equations of the trace last asked about, their maps)


def _maps(trace) -> tuple:
    """(id of each value the trace computes -> its equation, id of each value -> the ids of
    the equations reading it), for one trace, kept while the partition asks about it."""
    if _MAPS[0] is not trace.eqns:
        producers, readers = {}, {}
        for e in trace.eqns:
            producers.update({id(o): e for o in e.outs if o is not None})
            for v in e.input_vars():
                readers.setdefault(id(v), set()).add(id(e))
        _MAPS[:] = [trace.eqns, producers, readers]
    return _MAPS[1], _MAPS[2]


def _cone(producers: dict, start: list, seen: dict) -> list:
    """The equations with a fusion rule that `start`'s inputs come from, walking back through
    those that do not reduce (added to `seen`, by id); returns the reductions reached."""
    reached, todo = [], list(start)
    while todo:
        for v in todo.pop().input_vars():
            p = producers.get(id(v))
            if p is None or id(p) in seen or rule_of(p) is None:
                continue
            seen[id(p)] = p
            if reduces(p):
                reached.append(p)
            else:
                todo.append(p)
    return reached


def _feeding_rows(trace, eqn) -> list:
    """(outer sizes, reduced sizes) of the row reductions whose results `eqn` reads, directly or
    through ops with a fusion rule that do not reduce, where nothing reads those results and
    ops but `eqn`, those ops and what the reductions read (which can all be one group: else
    the results are stored anyway, and their readers may as well read them)."""
    producers, readers = _maps(trace)
    chain = {id(eqn): eqn}
    reductions = _cone(producers, [eqn], chain)
    if not reductions or any(over_columns(r) for r in reductions):
        return []
    allowed = dict(chain)
    _cone(producers, reductions, allowed)
    values = [o for e in chain.values() if e is not eqn for o in e.outs if o is not None]
    if any(not readers.get(id(v), set()) <= allowed.keys() for v in values):
        return []
    return [row_of(r) for r in reductions]


def _per_row_of_other_rows(trace, eqn, members: list) -> bool:
    """Whether `eqn` computes one value per row of row reductions it reads while the group
    reduces other rows (see the module)."""
    splits = [_split(trace.eqns[i]) for i in members if reduces(trace.eqns[i])]
    if not splits or not eqn.outs or len(eqn.outs) != 1 or eqn.out is None:
        return False
    shape = tuple(eqn.out.shape)
    for outer, reduced in _feeding_rows(trace, eqn):
        per_row = _fits_root(shape, outer, reduced) and not (
            len(shape) == len(outer) + len(reduced) and same_shape(shape[len(outer):], reduced))
        if per_row and any(s[0] or not (same_shape(s[1], outer) and same_shape(s[2], reduced))
                           for s in splits):
            return True
    return False


def joins(trace, eqn, members: list) -> bool:
    """Whether `eqn` may join the group of these members (equation indices, its root first)."""
    if not reduces(eqn):
        return not _per_row_of_other_rows(trace, eqn, members)
    split = _split(eqn)
    root = trace.eqns[members[0]]
    stored = permuted_copy(root, lambda v: next((trace.eqns[i] for i in members if any(
        o is v for o in trace.eqns[i].outs)), None)) if split[0] else None
    # a column plan stores a permuted copy of a value of the kept shape permuted
    root_shape = tuple((root.out if stored is None else stored[0]).shape)
    fits = (_fits_column_root(root_shape, *split[1:]) if split[0]
            else _fits_root(root_shape, *split[1:3]))
    if fits and not _kept_dims_stay(trace, eqn, members):
        return False
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
