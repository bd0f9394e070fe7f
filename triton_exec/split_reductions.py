"""Column reductions split in two levels where a few programs would each reduce many rows.

The column plan (`codegen.column_reduction`) gives a reduction over a run of dims before the
innermost one program per block of `COLUMN_BLOCK` kept columns (and index of the dims before the
run), looping over every reduced row: RMSNorm's weight gradient over 4096 tokens of 4096 columns is
16 programs on a GPU of 132 SMs. This pass, run before partitioning, rewrites such a reduction as
a reduction over chunks of the rows and one over the chunks' partial results:

    t5 = prims.sum(t4, dims=(0,))                  # t4: bf16[4096, 4096], t5: bf16[4096]

becomes

    t5_f32 = prims.convert_element_type(t4, dtype=torch.float32)
    t5_chunks = prims.reshape(t5_f32, (16, 256, 4096))
    t5_partial = prims.sum(t5_chunks, dims=(1,))   # f32[16, 4096]: 16 x 16 programs
    t5_total = prims.sum(t5_partial, dims=(0,))    # f32[4096]
    t5 = prims.convert_element_type(t5_total, dtype=torch.bfloat16)

The first sum is a column plan whose chunk dim is a dim before the run (one program per chunk and
block of columns), fused with t4's producers; the second a small column plan, fused with the ops
after t5. No atomics: the result does not depend on the launch. An fp16/bf16 sum's partials are
fp32 and the total is rounded once, as the whole sum is (ATen's accumulate type); amax/amin's
partials keep the dtype (exact), and are split only where their result needs no gradient (a
differentiable unit per fusion group, `ir.autodiff`, would split a tie's gradient per chunk). A
reduced dim splits where it divides (`chunking`); a reduction with a runtime size ("symbolic
values") is left whole, and so is one whose result comes back to the rows (softmax over an outer
dim: one kernel, `_returning`).
"""
from __future__ import annotations

import math

import torch

from ir import Eqn, TensorProxy, prims
from ir.proxies import same_shape
from ir.trace import iter_vars
from triton_exec import fusion
from triton_exec.codegen.lower_reduction import columns_of, over_columns
from triton_exec.launch import COLUMN_BLOCK
from triton_exec.rules import rule_of

SMS = 132                       # streaming multiprocessors of an H100 / H200
PROGRAMS_WANTED = 2 * SMS       # programs of the first level, where the rows allow
MIN_CHUNK_ROWS = 256            # rows a program of the first level reduces at least
# elements (rows x its columns) a program of the whole column plan must reduce for a second
# launch to pay: below, the rows are few enough for the programs there are
MIN_PROGRAM_ELEMENTS = 1 << 18


def column_programs(outer, kept) -> int:
    """The programs of the whole column plan (its launch config's at most `COLUMN_BLOCK`
    columns per program, `launch._column_config`)."""
    return math.prod(outer) * -(-math.prod(kept) // COLUMN_BLOCK)


def chunking(outer, reduced, kept) -> tuple[int, int] | None:
    """Where a column reduction of these static sizes splits: (k, a), the chunks indexed by the
    reduced dims before k and `a` parts of dim k (a divisor of it; 1: dim k whole in each
    chunk), each chunk the rest of the rows; or None, kept whole: the plan has as many programs
    as SMs, or each reduces fewer than `MIN_PROGRAM_ELEMENTS`, or no split leaves
    `MIN_CHUNK_ROWS` rows in each of two chunks or more. Of the others, the fewest chunks that
    give `PROGRAMS_WANTED` programs, else the most. [4096, 4096] summed over dim 0: (0, 16),
    256 programs of 256 rows; [4, 2048, 64] over (0, 1): (1, 8), 32 programs of 256 rows."""
    rows, programs = math.prod(reduced), column_programs(outer, kept)
    if programs >= SMS or rows * min(math.prod(kept), COLUMN_BLOCK) < MIN_PROGRAM_ELEMENTS:
        return None
    fitting = sorted((math.prod(reduced[:k]) * a, k, a) for k, n in enumerate(reduced)
                     for a in _divisors(n) if a < n)
    fitting = [c for c in fitting if c[0] >= 2 and rows // c[0] >= MIN_CHUNK_ROWS]
    if not fitting:
        return None
    _, k, a = next((c for c in fitting if programs * c[0] >= PROGRAMS_WANTED), fitting[-1])
    return k, a


def _divisors(n: int) -> list:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return small + [n // d for d in small if d * d != n]


def split(trace):
    """The trace with each column reduction that `chunking` splits written in two levels (see
    the module); the trace itself where none is. The second level, with the views of its
    result, goes just before the first other reader of the result, so that those of sibling
    reductions (a layer norm's weight and bias gradients, each reshaped) are adjacent and merge
    into one kernel (`triton_exec.horizontal`), as their first levels do."""
    names = {v.name for v in iter_vars((trace.inputs, [(e.args, e.params, e.outs)
                                                        for e in trace.eqns]))}
    whole = _returning(trace)
    eqns, pending = [], []      # (ids of the values, equations) of each second level
    for eqn in trace.eqns:
        reads = {id(v) for v in eqn.input_vars()}
        due = [p for p in pending if p[0] & reads]
        if due and fusion.is_view(eqn) and len(due) == 1:
            due[0][0].update(id(o) for o in eqn.outs)
            due[0][1].append(eqn)
            continue
        for p in due:
            pending.remove(p)
            eqns.extend(p[1])
        sizes = _sizes(eqn)
        found = _two_levels(eqn, names) if sizes is not None and sizes not in whole else None
        if found is None:
            eqns.append(eqn)
        else:
            eqns.extend(found[0])
            pending.append(({id(eqn.out)}, found[1]))
    if len(eqns) == len(trace.eqns) and not pending:      # nothing split
        return trace
    return trace.replace(eqns=tuple(eqns + [e for _, second in pending for e in second]))


def _sizes(eqn) -> tuple | None:
    """(outer, reduced, kept) sizes of a column reduction of static sizes (the one kind split),
    else None."""
    if (eqn.prim not in prims.REDUCTIONS or not over_columns(eqn)
            or not all(isinstance(s, int) for s in eqn.args[0].shape)):
        return None
    return tuple(tuple(sizes) for sizes in columns_of(eqn))


def _returning(trace) -> set:
    """The sizes (`_sizes`) of the column reductions whose result comes back to the rows: a
    value of the reduced input's shape computed from it through fusible ops (softmax's max and
    sum, a variance's mean). The column plan computes such a value in one more loop over the
    rows, one kernel in all (`codegen.column_reduction`): those are left whole, and so is every
    reduction of the same sizes (logsumexp's sum beside its max)."""
    readers: dict = {}
    for e in trace.eqns:
        for v in e.input_vars():
            readers.setdefault(id(v), []).append(e)
    found = set()
    for eqn in trace.eqns:
        sizes = _sizes(eqn)
        if sizes is None or sizes in found:
            continue
        todo, seen = [eqn.out], set()
        while todo and sizes not in found:
            for r in readers.get(id(todo.pop()), ()):
                if id(r) in seen or rule_of(r) is None or rule_of(r).reduces:
                    continue
                seen.add(id(r))
                outs = [o for o in r.outs if o is not None]
                if any(same_shape(o.shape, eqn.args[0].shape) for o in outs):
                    found.add(sizes)
                todo += outs
    return found


def _two_levels(eqn, names: set) -> tuple | None:
    """The equations computing `eqn`'s result in two levels (the partial reductions, then the
    reduction of the partials), or None where it stays whole."""
    x, out = eqn.args[0], eqn.out
    if (not fusion.fusible(eqn) or not x.dtype.is_floating_point
            or (eqn.prim is not prims.sum_ and out.requires_grad)):
        return None
    outer, reduced, kept = columns_of(eqn)
    where = chunking(outer, reduced, kept)
    if where is None:
        return None
    k, a = where
    heads = (*reduced[:k], a) if a > 1 else reduced[:k]     # the chunk's index
    rest = (reduced[k] // a, *reduced[k + 1:])              # the rows of one chunk
    narrow = eqn.prim is prims.sum_ and x.dtype in (torch.float16, torch.bfloat16)
    acc = torch.float32 if narrow else x.dtype

    def value(suffix, shape):       # a new value of the accumulate type, named after out
        name = f"{out.name}_{suffix}"
        while name in names:
            name += "_"
        names.add(name)
        return TensorProxy(name, shape, acc, out.device, out.requires_grad)

    first, second = [], []
    if narrow:
        first.append(Eqn(prims.convert_element_type, (x,), {"dtype": acc},
                         (value("f32", x.shape),)))
    shape = (*outer, *heads, *rest, *kept)
    if shape != tuple(x.shape):
        first.append(Eqn(prims.reshape, (first[-1].out if first else x, shape), {},
                         (value("chunks", shape),)))
    n = len(outer) + len(heads)
    partial = value("partial", (*outer, *heads, *kept))
    first.append(Eqn(eqn.prim, (first[-1].out if first else x,),
                     {**eqn.params, "dims": tuple(range(n, n + len(rest)))}, (partial,)))
    total = value("total", out.shape) if narrow else out
    second.append(Eqn(eqn.prim, (partial,),
                      {**eqn.params, "dims": tuple(range(len(outer), n))}, (total,)))
    if narrow:
        second.append(Eqn(prims.convert_element_type, (total,), {"dtype": out.dtype}, (out,)))
    return first, second
