"""Whether a value that several fusion groups read, and that no group of theirs can store for the
others (`triton_exec.fusion._stored_by`: their first group's root has another shape, a column or
row reduction), is recomputed in each reader rather than written by a kernel of its own.

A kernel of its own reads R bytes, writes W and each of the k readers reads W back: R + (k+1)W,
and one launch more; recomputing in each reader reads R k times. So the value is recomputed
when (k-1)R <= (k+1)W: always for an op that reads no more than it writes (`fusion.recomputed`),
and for k = 2 up to R = 3W: a gradient accumulation `a + b` (or `a + b + c`) that a norm's
weight gradient (a column sum) and its input gradient (a row reduction) both read is added in
both kernels. R counts what the readers load to recompute the value: through the elementwise
ops only it reads, which join the same kernels, to their inputs, and through views to the
bytes they view (a broadcast row read once per row, not per element); those must be stored
whatever the partition (the gradients the vjps return, inputs).
"""
from __future__ import annotations

import math

from ir import TensorProxy
from triton_exec import row_groups, vectorize
from triton_exec.rules import rule_of


def _bytes(t) -> int:
    return math.prod(vectorize.hint_of(s) for s in t.shape) * t.dtype.itemsize


def _leaves(eqn, producers: dict, consumers: dict, escaping: set, fusible) -> list:
    """The stored tensors a kernel loads to compute `eqn`'s outputs (see the module's
    docstring), with repeats."""
    found = []
    for v in eqn.input_vars():
        if not isinstance(v, TensorProxy):
            continue
        p = producers.get(id(v))
        inlined = p is not None and fusible(p) and not row_groups.reduces(p) and (
            rule_of(p).view or (id(v) not in escaping and len(consumers.get(id(v), ())) == 1))
        found += _leaves(p, producers, consumers, escaping, fusible) if inlined else [v]
    return found


def pays(eqn, readers: int, producers: dict, consumers: dict, escaping: set, fusible) -> bool:
    """Whether recomputing `eqn` in each of `readers` groups moves no more bytes than a kernel
    of its own (see the module's docstring). Only from tensors stored whatever the partition
    (inputs, results of torch calls): one a fusible op computes would need a kernel of its own
    to be read by each reader, where it could have joined the value's kernel."""
    if row_groups.reduces(eqn):
        return False
    leaves = _leaves(eqn, producers, consumers, escaping, fusible)
    if any(id(v) in producers and fusible(producers[id(v)]) for v in leaves):
        return False
    written = sum(_bytes(o) for o in eqn.outs if o is not None)
    return (readers - 1) * sum(_bytes(v) for v in leaves) <= (readers + 1) * written
