"""Why a call missed the cache: the first failing check of the nearest cache entry, in words.

On every cache miss of a jitted function that already has entries, `log_recompile` writes one
record on the `ir.recompiles` logger naming the function and the first check that failed for the
entry nearest to the call (the one failing fewest checks; the newest among equals), e.g.
`x: size 0 changed 32 -> 16 (constant values)` or `s: value 0.5 != 0.25`. The checks are the
prologue's, spelled for people: each argument's type, dtype, device, rank, requires_grad, sizes
(constant mode, or sizes symbolic mode specialized) and values, then the entry's guards one by
one, with the sizes they read (`guard i0 % 8 == 0 failed: i0 = x.shape[0] = 12`).

Nothing here runs on a hit: it is built on the first miss that needs it.
"""
from __future__ import annotations

import logging
import math

import torch

from ir.prologue import _needed_host_eqns, render_guard
from ir.proxies import IntProxy, ScalarProxy, TensorProxy, Var
from ir.trace import iter_vars, render_eqn

log = logging.getLogger("ir.recompiles")


def _tensor_mismatches(name: str, proxy: TensorProxy, value, constant: bool):
    if not isinstance(value, torch.Tensor):
        yield f"{name}: expected a tensor, got {type(value).__name__}"
        return
    if value.dtype != proxy.dtype:
        yield f"{name}: dtype changed {_short(proxy.dtype)} -> {_short(value.dtype)}"
    if value.device != proxy.device:
        yield f"{name}: device changed {proxy.device} -> {value.device}"
    if value.ndim != proxy.ndim:
        yield f"{name}: rank changed {proxy.ndim} -> {value.ndim}"
        return
    # without grad mode no traced value needs grad, whatever the tensor's flag (the prologue
    # does not check it then)
    if torch.is_grad_enabled() and value.requires_grad != proxy.requires_grad:
        yield f"{name}: requires_grad changed {proxy.requires_grad} -> {value.requires_grad}"
    for d, (traced, size) in enumerate(zip(proxy.shape, value.shape)):
        if not isinstance(traced, IntProxy) and traced != size:
            why = "constant values" if constant else "specialized in symbolic values mode"
            yield f"{name}: size {d} changed {traced} -> {size} ({why})"


def _short(dtype) -> str:
    return str(dtype).removeprefix("torch.")


def mismatches(inputs, args, constant: bool):
    """Yields, in the prologue's order, each check of the traced `inputs` ((name, proxy or
    literal) pairs) that `args` fail, spelled for people."""
    for (name, traced), value in zip(inputs, args):
        yield from _value_mismatches(name, traced, value, constant)


def _value_mismatches(name, traced, value, constant):
    if isinstance(traced, TensorProxy):
        yield from _tensor_mismatches(name, traced, value, constant)
    elif isinstance(traced, Var):       # a runtime number of symbolic mode
        kind = type(traced.hint)
        if type(value) is not kind:
            yield f"{name}: expected {kind.__name__}, got {type(value).__name__}"
    elif isinstance(traced, dict):      # **kwargs
        if not isinstance(value, dict) or tuple(value) != tuple(traced):
            yield f"{name}: expected the keywords {tuple(traced)}, got {_describe(value)}"
            return
        for k, t in traced.items():
            yield from _value_mismatches(f"{name}[{k!r}]", t, value[k], constant)
    elif isinstance(traced, tuple):
        if not isinstance(value, (tuple, list)) or len(value) != len(traced):
            yield f"{name}: expected a tuple or list of {len(traced)}, got {_describe(value)}"
            return
        for i, (t, v) in enumerate(zip(traced, value)):
            yield from _value_mismatches(f"{name}[{i}]", t, v, constant)
    elif type(value) is not type(traced):
        yield f"{name}: expected {type(traced).__name__}, got {type(value).__name__}"
    elif (_bits(value) != _bits(traced) if isinstance(value, float)      # NaN is NaN,
          else value != traced and not (value is None and traced is None)):  # -0.0 is not 0.0
        yield f"{name}: value {value!r} != {traced!r}"


def _bits(x: float) -> str:
    return "nan" if x != x else x.hex()


def _describe(value) -> str:
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)}"
    if isinstance(value, dict):
        return f"the keywords {tuple(value)}"
    return type(value).__name__


def size_origins(entry) -> dict:
    """id(IntProxy) -> how people name it: `x.shape[0]`, or its definition `i0 // 2`."""
    origins = {}
    for eqn in entry.traces[0].eqns:
        if eqn.prim.kind != "host":
            continue
        if eqn.prim.name == "shape":
            for d, out in enumerate(eqn.outs):
                if out is not None:
                    origins[id(out)] = f"{eqn.args[0].name}.shape[{d}]"
        else:
            origins[id(eqn.out)] = render_eqn(eqn)[0].split("=", 1)[1].split("#")[0].strip()
    return origins


class GuardChecker:
    """The entry's guards one at a time: `first_failure(*args)` is None or a sentence."""

    def __init__(self, entry):
        inputs = entry.traces[0].inputs
        guards = list(entry.guards)
        host = [e for e in entry.traces[0].eqns if e.prim.kind == "host"]
        input_vars = [v for _, value in inputs for v in iter_vars(value)]
        lines = []
        for name, value in inputs:
            lines += _unpack(name, value)
        for eqn in _needed_host_eqns(guards, host, input_vars):
            lines += render_eqn(eqn)
        strided = {g[1].name: None for g in guards if g[0].startswith("stride")}
        lines += [f"{name}_strides = {name}.stride()" for name in strided]
        lines += [f"if not ({render_guard(g)}): return {i}, locals()"
                  for i, g in enumerate(guards)]
        lines.append("return None, None")
        params = ", ".join(name for name, _ in inputs)
        source = f"def check({params}):\n" + "\n".join("  " + line for line in lines)
        ns = {"torch": torch, "math": math}
        exec(compile(source, "<guard check>", "exec"), ns)
        self.check, self.guards, self.origins = ns["check"], guards, size_origins(entry)

    def first_failure(self, *args) -> str | None:
        try:
            failed, scope = self.check(*args)
        except Exception as error:      # e.g. a guard reading a size of a tensor of other rank
            return f"the guards could not be evaluated ({type(error).__name__}: {error})"
        if failed is None:
            return None
        guard = self.guards[failed]
        shown = []
        for v in iter_vars(guard[1:]):
            if isinstance(v, ScalarProxy) and v.name in scope and v.name not in shown:
                shown.append(v.name)
        values = ", ".join(f"{n} = {self.origins.get(id(v), n)} = {scope[n]}" if
                           self.origins.get(id(v), n) != n else f"{n} = {scope[n]}"
                           for n, v in ((n, _var(guard, n)) for n in shown))
        return f"guard {render_guard(guard)} failed" + (f": {values}" if values else "")


def _var(guard, name):
    return next(v for v in iter_vars(guard[1:]) if v.name == name)


def _unpack(name, value) -> list[str]:
    source = f"{name}.values()" if isinstance(value, dict) else name
    value = tuple(value.values()) if isinstance(value, dict) else value
    if not isinstance(value, tuple):
        return []
    targets = [item.name if isinstance(item, Var) else "_" for item in value]
    return [f"({', '.join(targets)}{',' if len(targets) == 1 else ''}) = {source}"]


def entry_failures(entry, args, constant: bool) -> list[str]:
    """Every argument check of `entry` that `args` fail; else the first failing guard, if any.
    The checks read what the entry's traces take: deep containers flat, implicit inputs (captured
    tensors, module state) read from their sources."""
    if entry.arguments is not None:
        args = entry.arguments(args)
    failed = list(mismatches(entry.traces[0].inputs, args, constant))
    if failed:
        return failed
    checker = entry.__dict__.get("_guard_checker")
    if checker is None:
        checker = entry.__dict__["_guard_checker"] = GuardChecker(entry)
    guard = checker.first_failure(*args)
    return [guard] if guard else []


def miss_reason(entries, args, constant: bool) -> str:
    """The first failing check of the entry nearest to `args`, with how many entries there are."""
    ranked = []
    for age, entry in enumerate(entries):     # an entry failing one guard only is the nearest
        failures = entry_failures(entry, args, constant)
        guard_only = len(failures) == 1 and failures[0].startswith(("guard", "the guards"))
        ranked.append((0.5 if guard_only else len(failures) or 1, -age, failures))
    _, _, failures = min(ranked, key=lambda r: r[:2])
    reason = failures[0] if failures else "the cache key differs (no single check failed)"
    return f"{reason} (nearest of {len(entries)} entr{'y' if len(entries) == 1 else 'ies'})"


def log_recompile(name: str, entries, args, constant: bool, reason: str | None = None) -> None:
    """Logs why a call missed: `reason` where the caller knows it (a jitted module's tree
    changed), else the first failing check of the nearest entry."""
    if log.isEnabledFor(logging.INFO):
        log.info("recompiling %s: %s", name, reason or miss_reason(entries, args, constant))

