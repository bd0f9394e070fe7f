"""Module attributes a trace read as constants, guarded by its cache entry.

While `ir.jit` traces (inside `module_calls.intercepting`), `nn.Module.__getattribute__`
records each read of an attribute held in a module's `__dict__` whose value is an int, float,
bool, str or None, or a tuple of them: a hyperparameter the trace took as a constant
(`self.eps`, `self.temperature`, `self.causal`). The entry then checks, with its prologue, that
each still has that type and value (floats by their bits: a NaN equals itself, -0.0 is not 0.0);
a change misses the entry, and the `ir.recompiles` record names the attribute (`module 'norm':
attribute 'eps' changed 1e-05 -> 0.001`). `training` is in the cache key already (`ir.modules`).
Attributes of other objects (a config dataclass) are constants of the trace, not guarded.
"""
from __future__ import annotations

import dataclasses
from contextvars import ContextVar

from ir import modules

_SCALARS = frozenset({int, float, bool, str, type(None)})
_GUARDED = _SCALARS | {tuple}
_MISSING = object()
READS: ContextVar = ContextVar("ir_module_attribute_reads", default=None)
_object_getattribute = object.__getattribute__


def _held(value):
    """A value as its guard holds it: a float by its bits."""
    return value.hex() if type(value) is float else value


def tracked_getattribute(module, name: str):
    """`nn.Module.__getattribute__` while tracing: records the guarded reads (`READS`)."""
    value = _object_getattribute(module, name)
    kind = type(value)
    if kind in _GUARDED and name[0] != "_" and name != "training":
        reads = READS.get()
        if (reads is not None and name in _object_getattribute(module, "__dict__")
                and (kind is not tuple or all(type(v) in _SCALARS for v in value))):
            reads.setdefault((id(module), name), (module, name, kind, _held(value)))
    return value


def describe(reads: dict, root) -> list[str]:
    """One line per attribute read: `module 'norm': eps is float 1e-05`."""
    return [f"module {modules.module_path(root, module)!r}: {name} is {kind.__name__} "
            f"{float.fromhex(value) if kind is float else value!r}"
            for module, name, kind, value in reads.values()]


def guarded(prologue, reads: dict, root):
    """The prologue, also checking (first) that the attributes read keep their type and value;
    its source lists them."""
    if not reads:
        return prologue
    checks = tuple((module.__dict__, name, kind, value)
                   for module, name, kind, value in reads.values())

    def unchanged() -> bool:
        for d, name, kind, value in checks:
            now = d.get(name, _MISSING)
            if type(now) is not kind or _held(now) != value:
                return False
        return True
    listed = "".join(f"\n#   {line}" for line in describe(reads, root))
    return dataclasses.replace(
        prologue, source=f"{prologue.source}\n# and, checked first, the module attributes the "
                         f"trace read (ir.module_attributes):{listed}",
        fn=lambda *args: unchanged() and prologue.fn(*args),
        after_key=lambda *args: unchanged() and prologue.after_key(*args))


def change(entries, key, root) -> str | None:
    """The first attribute read by the newest of `entries` stored under `key` whose value
    changed since, in words, or None."""
    for entry in reversed(entries):
        if entry.key != key:
            continue
        for module, name, kind, value in entry.extra.get("module_attributes", {}).values():
            now = module.__dict__.get(name, _MISSING)
            if type(now) is not kind or _held(now) != value:
                was = float.fromhex(value) if kind is float else value
                shown = "(unset)" if now is _MISSING else repr(now)
                return (f"module {modules.module_path(root, module)!r}: attribute {name!r} "
                        f"changed {was!r} -> {shown}")
    return None
