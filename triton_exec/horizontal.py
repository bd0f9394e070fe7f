"""Horizontal fusion: independent fusion groups launched as one kernel with several outputs.

Two groups merge when neither depends on the other and their outputs nest: the same rank and
innermost extent, and along each outer dim one size at most the other. The kernel tiles the
largest output's shape; a smaller output is computed and stored where the outer index is inside
its own shape (`triton_exec.codegen.stores`). So the RoPE of q
[B, H, T, D] and of k [B, Hkv, T, D] (GQA: Hkv < H) sharing cos and sin is one launch, each
program reading its rows of cos and sin once for both, as Liger-Kernel's hand-written kernel.

The merged launch happens at the later group's place; equations that read the earlier group's
outputs before that place move after it (`schedule`), which is allowed when each computes the
same value wherever it runs (`ir.passes.repeatable`): never random ops, copies or calls with
effects, whose order against the rest must stay as written.
"""
from __future__ import annotations

import math

from ir.passes import repeatable
from ir.proxies import IntProxy, TensorProxy, hint, same_size
from ir.trace import iter_vars
from triton_exec import row_groups
from triton_exec.rules import rule_of


def nested(a, b) -> bool:
    """Whether shapes `a` and `b` nest (see the module's docstring): one contains the other. A
    runtime size is compared by its value in this call; the kernel guards the relation
    (`triton_exec.codegen.stores`: `<=` along outer dims, `==` along the innermost), see
    `_related`."""
    if len(a) != len(b) or not a or hint(a[-1]) != hint(b[-1]):
        return False
    smaller = larger = False
    for x, y in zip(a[:-1], b[:-1]):
        if not same_size(x, y):
            smaller, larger = smaller or hint(x) < hint(y), larger or hint(x) > hint(y)
    return not (smaller and larger)


def _related(a, b) -> bool:
    """Whether the sizes of nesting shapes need no guard: each pair one size or two constants."""
    return all(same_size(x, y) or not (isinstance(x, IntProxy) or isinstance(y, IntProxy))
               for x, y in zip(a, b))


def _reads_shared(trace, members, g) -> bool:
    """Whether two groups read a tensor in common (q's and k's RoPE: cos and sin). Only such
    groups merge where runtime sizes must be guarded against each other: a guard relating the
    sizes of unrelated inputs would narrow the cache entry for one launch less."""
    def reads(group):
        return {id(v) for j in group for v in trace.eqns[j].input_vars()
                if isinstance(v, TensorProxy)}
    return bool(reads(members) & reads(g))


def ancestors(trace) -> list[set]:
    """For each equation, the indices of the equations it transitively depends on."""
    producer = {id(o): i for i, e in enumerate(trace.eqns) for o in e.outs if o is not None}
    result: list[set] = []
    for e in trace.eqns:
        deps = set()
        for v in e.input_vars():
            p = producer.get(id(v))
            if p is not None:
                deps.add(p)
                deps |= result[p]
        result.append(deps)
    return result


def merge_siblings(trace, groups) -> list[list[int]]:
    """Merges independent groups whose outputs nest into one kernel with several outputs.
    Group A joins a later group B when nothing in either depends on the other's outputs, their
    roots' shapes nest with every root already merged (or all their reductions reduce the same
    dims), what reads A's outputs before B's root may move after it (see the module's
    docstring), and A's launch waiting for B's holds no memory for nothing: they read an input
    in common, or only free work (views, host work) runs between them, or the tensors A reads
    last take no more bytes than its results."""
    before = ancestors(trace)
    merged: list[tuple[set, list[int]]] = []      # (roots, members)
    for g in groups:
        for roots, members in merged:
            if _joins(trace, before, roots, members, g):
                roots.add(g[-1])
                members[:] = sorted(set(members) | set(g))
                break
        else:
            merged.append(({g[-1]}, list(g)))
    return [members for _, members in merged]


def _joins(trace, before, roots, members, g) -> bool:
    if not row_groups.mergeable(trace, members, g):
        return False
    b_root = g[-1]
    shapes = [trace.eqns[r].out.shape for r in roots]
    b_shape = trace.eqns[b_root].out.shape
    # groups with reductions: their shared reduced dims are the kernel's domain, each root of
    # the kept (or row) shape (`row_groups`)
    if not row_groups.reduction_splits(trace, g) and not all(nested(a, b_shape) for a in shapes):
        return False
    if not all(_related(a, b_shape) for a in shapes) and not _reads_shared(trace, members, g):
        return False
    # a group's outputs are its roots' and the values it stores for later readers
    # (`fusion._stored_by`): any equation of its own may be one (a view recomputed in both
    # groups is in both and is no output)
    a_only = [m for m in members if m not in g]
    b_only = [j for j in g if j not in members]
    if (any(m in before[j] for m in a_only for j in b_only)
            or any(j in before[m] for j in b_only for m in a_only)):
        return False
    # what reads the merged outputs before B's root moves after it
    between = [j for j in range(min(a_only, default=b_root), b_root)
               if j not in g and j not in members]
    moved = [j for j in between if any(m in before[j] for m in a_only)]
    if not all(repeatable(trace.eqns[j]) for j in moved):
        return False
    # A's launch waits for B's: not where its inputs would hold more memory meanwhile than its
    # outputs take (a model's backward would keep every layer's norm-gradient inputs until its
    # last layer's), unless B reads one of them too
    return (_reads_shared(trace, members, g) or all(_free(trace.eqns[j]) for j in between)
            or _held(trace, members, b_root) <= sum(_bytes(trace.eqns[r].out) for r in roots))


def _free(eqn) -> bool:
    """Host work or a view: no kernel, no memory."""
    rule = rule_of(eqn)
    return eqn.prim.kind == "host" or (rule is not None and rule.view)


def _bytes(t) -> int:
    return math.prod(hint(s) for s in t.shape) * t.dtype.itemsize


def _held(trace, members, b_root) -> int:
    """Bytes of the tensors that group A (`members`) reads last, which its launch at B's root
    keeps alive past their place (the trace's inputs live throughout)."""
    inside = {id(o) for i in members for o in trace.eqns[i].outs}
    later = {id(v) for e in trace.eqns[b_root + 1:] for v in e.input_vars()} | {
        id(v) for v in iter_vars(trace.outputs)} | {id(v) for v in trace.input_vars()}
    read = {id(v): v for i in members for v in trace.eqns[i].input_vars()
            if isinstance(v, TensorProxy) and id(v) not in inside and id(v) not in later}
    return sum(_bytes(v) for v in read.values())


def schedule(eqns) -> list:
    """`eqns` in their order, except that an equation reading a value not defined yet waits
    until it is (a merged launch defines its earlier group's outputs at the later group's
    place)."""
    defined = {id(v) for e in eqns for v in e.outs if v is not None}
    ready: set[int] = set()
    waiting, order = [], []

    def runnable(e):
        return all(id(v) in ready or id(v) not in defined for v in e.input_vars())

    for e in eqns:
        waiting.append(e)
        while waiting and any(runnable(w) for w in waiting):
            w = next(w for w in waiting if runnable(w))
            waiting.remove(w)
            order.append(w)
            ready.update(id(v) for v in w.outs if v is not None)
    return order + waiting
