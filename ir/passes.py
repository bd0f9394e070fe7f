"""Trace-to-trace passes: dead-code elimination, common-subexpression elimination, and the
placement of host work after the kernel launches that do not need it.

Each pass is a pure function Trace -> Trace that stamps its provenance.
"""
from __future__ import annotations

import torch

from ir.proxies import Var
from ir.trace import Eqn, Trace, iter_vars, map_vars


def dce(trace: Trace, keep_host: bool = False) -> Trace:
    """Drops equations whose outputs are unused (but calls with effects). Example: `t1 = exp(t0)` with t1 never read
    disappears; `(i0, i1) = x.shape` with only i1 read becomes `(_, i1) = x.shape`.
    keep_host keeps host equations, which fusion passes may still need for the sizes of
    intermediate tensors."""
    live = {id(v) for v in iter_vars(trace.outputs)}
    kept = []
    for eqn in reversed(trace.eqns):
        if keep_host and eqn.prim.kind == "host":
            kept.append(eqn)
            live.update(id(v) for v in eqn.input_vars())
            continue
        if not (eqn.params.get("effects") or any(v is not None and id(v) in live
                                                 for v in eqn.outs)):
            continue        # kept: a call with effects beyond its outputs (a module's hooks)
        outs = tuple(v if v is not None and id(v) in live else None for v in eqn.outs)
        kept.append(eqn if all(a is b for a, b in zip(outs, eqn.outs)) else eqn.replace(outs=outs))
        live.update(id(v) for v in eqn.input_vars())
    return trace.replace(eqns=tuple(reversed(kept)), provenance="Dead-code elimination")


def _hashable(x):
    if isinstance(x, Var):
        return ("var", id(x))
    if isinstance(x, (tuple, list)):
        return (type(x).__name__,) + tuple(_hashable(i) for i in x)
    if isinstance(x, dict):
        return ("dict",) + tuple((k, _hashable(v)) for k, v in x.items())
    if isinstance(x, float):
        return ("float", repr(x))   # keeps -0.0 apart from 0.0, and nan equal to itself
    return (type(x).__name__, x)


# torch calls whose result is a fresh tensor whose identity may matter, or whose content is
# not a function of their arguments
_NOT_REPEATABLE = frozenset({"clone", "contiguous", "to", "copy", "detach", "empty", "empty_like",
                             "empty_strided", "new_empty", "new_empty_strided"})


def repeatable(eqn: Eqn) -> bool:
    """Whether an equation computes the same value from the same arguments every time, so a
    repeat of it may reuse the first's outputs: every prim but copies; an opaque call when it is
    a torch function or method whose ATen op is not random (no `nondeterministic_seeded`
    overload: not `dropout`, `rand_like`, `bernoulli`, ...), not a copy and without effects.
    A call to anything else (a Python function, an op torch does not name) is not, unless it
    says it is (`repeatable` in its params: a whole-trace backward's vector-Jacobian product of
    a recorded call, `ir.whole_backward`)."""
    if eqn.prim.name == "copy":
        return False
    if eqn.prim.kind != "opaque":
        return True
    if eqn.params.get("repeatable"):
        return True
    name = eqn.params["fn_name"]
    op = name.rsplit(".", 1)[-1]
    if (eqn.params.get("effects") or not name.startswith("torch.") or op in _NOT_REPEATABLE
            or op.endswith("_")):
        return False
    packet = getattr(torch.ops.aten, op, None)
    return packet is not None and not any(
        torch.Tag.nondeterministic_seeded in getattr(packet, overload).tags
        for overload in packet.overloads())


def cse(trace: Trace) -> Trace:
    """Replaces an equation that repeats an earlier one (same prim, args and params) by the
    earlier outputs (computed in the same grad mode, `ir.grad_regions`). Example: two `x.shape`
    queries become one, two `x.repeat(1, 2)` one call. Calls that are not `repeatable` (random
    ops, copies, calls with effects) are left alone, and so is a repeat that would make two
    distinct outputs one tensor (`return x * 2, x * 2` returns two tensors, as in eager)."""
    env: dict[int, Var] = {}
    seen: dict[tuple, Eqn] = {}
    eqns = []
    outputs = {id(v) for v in iter_vars(trace.outputs)}
    returned: set[int] = set()      # values that an output of the trace already stands for

    def sub(v):
        return env.get(id(v), v)

    for eqn in trace.eqns:
        eqn = eqn.replace(args=map_vars(sub, eqn.args), params=map_vars(sub, eqn.params))
        if not repeatable(eqn):
            eqns.append(eqn)
            continue
        key = (eqn.prim.name, _hashable(eqn.args), _hashable(eqn.params),
               tuple(getattr(o, "requires_grad", None) for o in eqn.outs))  # grad-mode regions
        first = seen.get(key)
        distinct = first is not None and any(
            id(old) in outputs and id(new) in returned for old, new in zip(eqn.outs, first.outs))
        if first is None or distinct:
            seen.setdefault(key, eqn)
            eqns.append(eqn)
            returned.update(id(v) for v in eqn.outs if id(v) in outputs)
            continue
        for old, new in zip(eqn.outs, first.outs):
            env[id(old)] = new
            if id(old) in outputs:
                returned.add(id(new))
    return trace.replace(eqns=tuple(eqns), outputs=map_vars(sub, trace.outputs),
                         provenance="Common-subexpression elimination")


def sink_host_work(trace: Trace) -> Trace:
    """Moves each host equation (shape queries, integer math) down to just before its first
    consumer, so kernel launches that do not need it go out first and the host computes sizes
    while the device works. Example: `i2 = i0 * i1` needed only by a final reshape moves below
    every fusion launched before that reshape."""
    host = [e for e in trace.eqns if e.prim.kind == "host"]
    producer = {id(v): e for e in host for v in e.outs if v is not None}
    placed: set[int] = set()
    eqns: list[Eqn] = []

    def place_deps(vars_):
        for v in vars_:
            e = producer.get(id(v))
            if e is not None and id(e) not in placed:
                place_deps(e.input_vars())
                placed.add(id(e))
                eqns.append(e)

    for eqn in trace.eqns:
        if eqn.prim.kind == "host":
            continue
        place_deps(eqn.input_vars())
        eqns.append(eqn)
    place_deps(iter_vars(trace.outputs))
    return trace.replace(eqns=tuple(eqns), provenance="Host work placed after launches")


