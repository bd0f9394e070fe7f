"""What the jit does with a call, in words: `ir.explain` (`ir.jit.explain` builds it with
`explanation`), and the warnings about fallbacks.

`ir.explain(jfn, *args, **kwargs)` traces `jfn` on the arguments and builds the cache entry they
would get, running and timing no kernel, and returns an `Explanation`: each fusion group with its
ops and kernel name; every op left to torch with each named executor's reason (kinds: "not
fusible", "dtype not fused", "needs grad", "device not claimed", "checker refused", "view"); every
size symbolic mode specialized and the op or source line that forced it; the submodules called
as opaque calls in eager, and why (`ir.module_calls`); the entry's guards.
`str()` is the text, `.as_dict()` the same data for tools.

Compiling an entry reports the same fallbacks (`report_fallbacks`): a warning once per function
for a named executor that runs nothing at all, with the reason, and one INFO record on the
`ir.fallbacks` logger per op left to torch. In symbolic mode, an op without a symbolic shape
rule (`ir.ops.opaque`) specializes the sizes of its arguments: one INFO record on the
`ir.recompiles` logger per such op names it and the sizes (`report_unruled_ops`).
"""
from __future__ import annotations

import collections
import dataclasses
import logging
import warnings

from ir import module_attributes
from ir.executors import torch_executor
from ir.prologue import render_guard
from ir.proxies import IntProxy, TensorProxy
from ir.recompiles import log as recompile_log, size_origins
from ir.recording import NO_RULE
from ir.trace import iter_vars, render

log = logging.getLogger("ir.fallbacks")


@dataclasses.dataclass
class Explanation:
    """What `ir.explain` found; `str()` is a report for people, `as_dict()` the data."""

    function: str
    cache: str
    executors: list             # names, in priority order (torch last)
    fusion_groups: list         # {"call", "executor", "kernel", "ops"}
    left_to_torch: list         # {"op", "output", "reasons": [{"executor", "kind", "reason"}]}
    specialized: list           # {"size", "of", "value", "cause"}
    module_calls: list          # {"call", "module", "class", "reason", "outputs"}: run in eager
    guards: list                # one line per check of the entry's prologue
    prologue: str
    trace: str                  # the computation that would run

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    def __str__(self) -> str:
        lines = [f"ir.explain({self.function}): cache {self.cache!r}, executors "
                 f"{', '.join(self.executors)}", "",
                 f"Fusion groups ({len(self.fusion_groups)}):"]
        for g in self.fusion_groups:
            kernel = f" -> kernel {g['kernel']}" if g["kernel"] else ""
            lines.append(f"  {g['call']} ({g['executor']}){kernel}: {len(g['ops'])} ops: "
                         + ", ".join(g["ops"]))
        if not self.fusion_groups:
            lines.append("  none")
        lines += ["", f"Left to torch ({len(self.left_to_torch)}):"]
        for item in self.left_to_torch:
            why = "; ".join(f"{r['executor']}: {r['kind']}: {r['reason']}" for r in item["reasons"])
            lines.append(f"  {item['output']} = {item['op']}" + (f"  <- {why}" if why else ""))
        if not self.left_to_torch:
            lines.append("  none")
        if self.module_calls:
            lines += ["", f"Modules called in eager ({len(self.module_calls)}; their parameters "
                      "are not inputs of the trace):"]
            lines += [f"  {c['outputs'] or '(no tensors)'} = {c['call']}: module {c['module']!r} "
                      f"({c['class']}): {c['reason']}" for c in self.module_calls]
        if self.cache == "symbolic values":
            lines += ["", f"Sizes specialized ({len(self.specialized)}):"]
            lines += [f"  {s['of']} = {s['value']} ({s['size']}): {s['cause']}"
                      for s in self.specialized] or ["  none"]
        lines += ["", f"Guards of the entry ({len(self.guards)}):"]
        lines += [f"  {g}" for g in self.guards]
        return "\n".join(lines)


def op_name(eqn) -> str:
    return eqn.params["fn_name"] if eqn.prim.name == "opaque" else eqn.prim.name


def _outputs(eqn) -> str:
    return ", ".join(v.name for v in eqn.outs if v is not None)


def fusion_groups(trace) -> list[dict]:
    """The calls that an executor other than torch runs, with the ops each one fuses."""
    groups = []
    for eqn in trace.eqns:
        if eqn.executor is None or eqn.executor is torch_executor or eqn.prim.kind == "host":
            continue
        body = eqn.params.get("body", (eqn,))
        groups.append({"call": eqn.prim.name, "executor": eqn.executor.name,
                       "kernel": eqn.params.get("kernel"), "ops": [op_name(e) for e in body]})
    return groups


def left_to_torch(trace, executors) -> list[dict]:
    """Every tensor op of the executed `trace` that torch runs, with each of `executors`' reason
    for leaving it."""
    named = [ex for ex in executors if ex is not torch_executor]
    left = []
    for eqn in trace.eqns:
        if eqn.executor is not torch_executor or eqn.prim.kind == "host":
            continue
        reasons = []
        for ex in named:
            kind, reason = ex.refusal(eqn)
            reasons.append({"executor": ex.name, "kind": kind, "reason": reason})
        left.append({"op": op_name(eqn), "output": _outputs(eqn), "reasons": reasons})
    return left


def module_calls(trace) -> list[dict]:
    """The opaque module calls of a trace (`ir.module_calls`), with why each runs in eager."""
    return [{"call": eqn.params["fn_name"], **eqn.params["module_call"],
             "outputs": _outputs(eqn)}
            for eqn in trace.eqns if "module_call" in eqn.params]


def _specialized(entry) -> list[dict]:
    origins = size_origins(entry)
    seen, found = set(), []
    for size, value, cause in entry.specializations:
        if id(size) in seen:
            continue
        seen.add(id(size))
        found.append({"size": size.name, "of": origins.get(id(size), size.name),
                      "value": value, "cause": cause})
    return found


def _input_lines(name, value) -> list[str]:
    if isinstance(value, TensorProxy):
        shape = ", ".join(str(s) for s in value.shape)
        grad = ", requires grad" if value.requires_grad else ""
        return [f"{name}: {str(value.dtype).removeprefix('torch.')}[{shape}] on "
                f"{value.device}{grad}"]
    if isinstance(value, IntProxy):
        return [f"{name}: an int (runtime value)"]
    if isinstance(value, tuple):
        return [line for i, item in enumerate(value) for line in _input_lines(f"{name}[{i}]", item)]
    if hasattr(value, "hint"):
        return [f"{name}: a {type(value.hint).__name__} (runtime value)"]
    return [f"{name} == {render(value)}"]


def guard_lines(entry) -> list[str]:
    """The entry's checks in words: each argument's metadata, then each guard with the sizes it
    reads (`i0 % 8 == 0  (i0 = x.shape[0])`)."""
    lines = [line for name, value in entry.traces[0].inputs for line in _input_lines(name, value)]
    origins = size_origins(entry)
    for guard in entry.guards:
        named = {v.name: origins[id(v)] for v in iter_vars(guard[1:])
                 if isinstance(v, IntProxy) and id(v) in origins}
        where = ", ".join(f"{n} = {o}" for n, o in named.items())
        lines.append(render_guard(guard) + (f"  ({where})" if where else ""))
    return lines


def explanation(jfn, entry) -> Explanation:
    trace = entry.traces[-1]
    return Explanation(
        function=jfn.__name__, cache=jfn.cache_mode, executors=[ex.name for ex in jfn.executors],
        fusion_groups=fusion_groups(trace), left_to_torch=left_to_torch(trace, jfn.executors),
        specialized=_specialized(entry), module_calls=module_calls(trace),
        guards=guard_lines(entry) + module_attributes.describe(
            entry.extra.get("module_attributes", {}), jfn.module),
        prologue=str(entry.prologue),
        trace=str(trace))


def _summary(reasons) -> str:
    counted = collections.Counter(f"{kind}: {reason}" for kind, reason in reasons)
    parts = [f"{text} ({n} op{'s' if n > 1 else ''})" for text, n in counted.most_common(3)]
    more = len(counted) - 3
    return "; ".join(parts) + (f"; and {more} other reasons" if more > 0 else "")


def _runs_on(eqn, executor) -> bool:
    """Whether the executor runs eqn: claimed it, or fused it into a differentiable unit."""
    return eqn.executor is executor or getattr(eqn.executor, "fusion_executor", None) is executor


def report_unruled_ops(jfn, entry) -> None:
    """After compiling `entry` in symbolic mode: an INFO record on the `ir.recompiles` logger per
    op without a symbolic shape rule, naming the op and the sizes it specialized (a call with
    other values of them is a new entry)."""
    if not recompile_log.isEnabledFor(logging.INFO):
        return
    pinned = collections.defaultdict(list)
    for item in _specialized(entry):
        if item["cause"].endswith(f"({NO_RULE})"):
            pinned[item["cause"].removesuffix(f" ({NO_RULE})")].append(
                f"{item['of']} = {item['value']}")
    for op, sizes in pinned.items():
        recompile_log.info("%s: %s has no symbolic shape rule: its sizes are specialized in "
                           "symbolic values mode (%s); other values of them are new entries",
                           jfn.__name__, op, ", ".join(sizes))


def report_fallbacks(jfn, entry, warned: set) -> None:
    """After compiling `entry`: a warning (once per executor in `warned`) for each executor the
    user named that runs nothing of it, and an INFO record per op left to torch."""
    named = [ex for ex in jfn.executors if ex is not torch_executor]
    if not named:
        return
    trace = entry.traces[-1]
    left = left_to_torch(trace, named)
    for item in left:
        log.info("%s: %s (%s) left to torch: %s", jfn.__name__, item["op"], item["output"],
                 "; ".join(f"{r['executor']}: {r['kind']}: {r['reason']}" for r in item["reasons"]))
    for k, ex in enumerate(named):
        reasons = [(item["reasons"][k]["kind"], item["reasons"][k]["reason"]) for item in left]
        if (ex.name in warned or any(_runs_on(e, ex) for e in trace.eqns)
                or all(kind == "view" for kind, _ in reasons)):
            continue
        warned.add(ex.name)
        warnings.warn(f"ir.jit: the {ex.name} executor runs nothing of {jfn.__name__} "
                      f"({len(reasons)} ops left to torch): {_summary(reasons)}", stacklevel=5)
