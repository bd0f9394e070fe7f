"""The prologue: generated Python that checks a cache entry's guards on the call's arguments.

It checks the grad mode the entry was compiled for (`torch.is_grad_enabled()`), the autocast
state (`ir.autocast.state`), each tensor's type, dtype, device, rank and (in grad mode, or where
`fn` enables grad inside) requires_grad, its sizes (exactly in
"constant values" mode; 0/1-ness and the traced guards in "symbolic values" mode), each other
argument's value (constant mode) or type (symbolic mode), and the guards that tracing and the
executors recorded (size comparisons, pointer alignment, strides, divisibility). It returns True
when all hold. It only checks: it computes nothing that the computation needs.

A prologue never raises; on any input it returns True or False. Types are checked before any
attribute is read, lengths before tuples are unpacked, and guards run in dependency order: each
as soon as the sizes it reads are computed, and a division's divisor is guarded nonzero before
the size it defines is computed (`k != 0` before `i2 = 8 // k`). Constants are compared by type
and value and written as literals, never by an object's repr (an IntEnum member is checked as its
type, then as the int it equals; a NaN equals a NaN; floats compare by bits). What each guard
proves for the kernels is listed in `triton_exec.vectorize`.
"""
from __future__ import annotations

import dataclasses
import math

import torch

from ir import autocast
from ir.proxies import ScalarProxy, TensorProxy, Var
from ir.trace import iter_vars, render, render_eqn

GUARD_SOURCE = {
    "eq": "{a} == {b}", "ne": "{a} != {b}", "lt": "{a} < {b}", "le": "{a} <= {b}",
    "gt": "{a} > {b}", "ge": "{a} >= {b}",
    "divisible": "{a} % {b} == 0",
    "aligned": "{a}.data_ptr() % {b} == 0",
    "misaligned": "{a}.data_ptr() % {b} != 0",
    "not_neg": "not {a}.is_neg()",
    "stride_eq": "{a}_strides[{b[0]}] == {b[1]}",
    "stride_divisible": "{a}_strides[{b[0]}] % {b[1]} == 0",
    "stride_ne": "{a}_strides[{b[0]}] != {b[1]}",
    "stride_indivisible": "{a}_strides[{b[0]}] % {b[1]} != 0",
    "strides_compose": "{a}_strides[{b[0]}] == {a}_strides[{b[1]}] * {b[2]}",
    # the farthest element from the first: offsets into the tensor fit below b
    "stride_span_lt": "sum((size - 1) * abs(stride) for size, stride in zip({a}.shape, {a}_strides)) < {b}",
    "numel_lt": "{a} < {b}",        # a: a shape (a tuple of sizes)
    "numel_eq": "{a} == {b}",       # a, b: shapes (tuples of sizes), their products equal
    "contiguous": "{a}.is_contiguous() == {b}",
    "is_leaf": "{a}.is_leaf == {b}",
}


def render_guard(guard) -> str:
    op, a, b = guard
    a_source = " * ".join(render(x) for x in a) if op.startswith("numel") else render(a)
    if op == "numel_eq":
        b = " * ".join(render(x) for x in b)
    return GUARD_SOURCE[op].format(a=a_source, b=render(b) if not isinstance(b, (tuple, str)) else b)


@dataclasses.dataclass
class Prologue:
    source: str
    fn: object
    after_key: object   # the same checks less those a matching cache key implies (what lookup runs)

    def __str__(self) -> str:
        return self.source

    def __call__(self, *args) -> bool:
        return self.fn(*args)


def _check_value(name: str, value, symbolic: bool, lines: list, ns: dict, grad_mode: bool):
    """Appends (line, line after a key match) pairs; the second is None where the cache key
    (`cache_keys.arg_key`: types, dtypes, ranks, and in constant mode sizes and values) implies
    it."""
    if isinstance(value, TensorProxy):
        dtype = render(value.dtype)
        dev = _device_name(ns, value.device)
        # without grad mode nothing records a backward: requires_grad does not matter
        grad = (f" and {'' if value.requires_grad else 'not '}{name}.requires_grad"
                if grad_mode else "")
        if value.neg:   # resolved by the trace; entries that read raw storage guard the bit
            grad += f" and {name}.is_neg()"
        lines.append((f"if not (isinstance({name}, Tensor) and {name}.dtype is {dtype} and "
                      f"{name}.device == {dev} and {name}.ndim == {value.ndim}{grad}): "
                      "return False",
                      f"if not ({name}.device == {dev}{grad}): return False"))
        if not symbolic:
            lines.append((f"if {name}.shape != {render(tuple(value.shape))}: return False", None))
    elif isinstance(value, ScalarProxy):    # a runtime int or float of symbolic mode
        lines.append((f"if type({name}) is not {type(value.hint).__name__}: return False", None))
    elif isinstance(value, (tuple, dict)):
        keys = value
        if isinstance(value, dict):     # **kwargs: its names, in order, are part of the key
            lines.append((f"if not isinstance({name}, dict) or tuple({name}) != {tuple(value)!r}: "
                          "return False", None))
            source, value = f"{name}.values()", tuple(value.values())
        else:
            lines.append((f"if type({name}) not in (tuple, list) or len({name}) != {len(value)}: "
                          "return False", None))
            source = name
        keys = list(keys) if isinstance(keys, dict) else range(len(value))
        targets = [item.name if isinstance(item, Var) else "_" for item in value]
        unpack = f"({', '.join(targets)}{',' if len(targets) == 1 else ''}) = {source}"
        lines.append((unpack, unpack))
        for key, target, item in zip(keys, targets, value):   # constants are read in place
            _check_value(target if isinstance(item, Var) else f"{name}[{key!r}]", item, symbolic,
                         lines, ns, grad_mode)
    elif type(value) is float:      # by bits, as the key (`cache_keys.float_identity`)
        same = f"{name} != {name}" if value != value else f"{name}.hex() == {value.hex()!r}"
        lines.append((f"if type({name}) is not float or not ({same}): return False", None))
    else:
        lines.append((f"if {_literal_mismatch(name, value, ns)}: return False", None))


_BUILTIN_TYPES = (int, float, bool, str, complex)


def _device_name(ns: dict, device) -> str:
    name = next((k for k, v in ns.items() if k.startswith("DEVICE_") and v == device),
                f"DEVICE_{sum(k.startswith('DEVICE_') for k in ns)}")
    ns[name] = device
    return name


def _named(ns: dict, prefix: str, obj) -> str:
    """A name of the prologue's namespace bound to obj (types and values that have no literal)."""
    name = next((k for k, v in ns.items() if k.startswith(prefix) and v is obj), None)
    if name is None:
        name = f"{prefix}{sum(k.startswith(prefix) for k in ns)}"
        ns[name] = obj
    return name


def _literal_mismatch(name: str, value, ns: dict) -> str:
    """Source that is true when argument `name` differs from the traced constant `value`: in type
    (an IntEnum member is not its int) or value; a NaN equals a NaN, -0.0 differs from 0.0."""
    if value is None:
        return f"{name} is not None"
    kind = type(value)
    type_name = kind.__name__ if kind in _BUILTIN_TYPES else _named(ns, "TYPE_", kind)
    if isinstance(value, float) and value != value:
        differs = f"{name} == {name}"
    elif isinstance(value, float) and value == 0:
        differs = f"{name} != 0 or copysign(1.0, {name}) != {math.copysign(1.0, value)}"
    elif isinstance(value, torch.device):
        differs = f"{name} != {_device_name(ns, value)}"
    else:       # numbers, strings, dtypes
        differs = f"{name} != {render(value)}"
    return f"type({name}) is not {type_name} or {differs}"


def _needed_host_eqns(guards, host_eqns, inputs) -> list:
    """The host equations (shape queries, integer math) that the guards' values need."""
    producer = {id(v): e for e in host_eqns for v in e.outs if v is not None}
    available = {id(v) for v in inputs}
    needed: dict[int, object] = {}

    def visit(v):
        e = producer.get(id(v))
        if id(v) in available or e is None or id(e) in needed:
            return
        needed[id(e)] = e
        for dep in e.input_vars():
            visit(dep)

    for g in guards:
        for v in iter_vars(g[1:]):
            visit(v)
    return [e for e in host_eqns if id(e) in needed]


def _guards_in_order(guards, eqns, input_vars) -> list[str]:
    """Lines that compute the derived sizes and check the guards in dependency order: each guard
    as soon as the values it reads are computed, so a guard that makes a derived value defined
    (`k != 0` before `8 // k`) is checked before the value is computed."""
    available = {id(v) for v in input_vars}
    pending, lines = list(guards), []

    def check_ready():
        ready = [g for g in pending if all(id(v) in available for v in iter_vars(g[1:])
                                           if isinstance(v, ScalarProxy))]
        if ready:
            lines.append("if not (" + "\n      and ".join(render_guard(g) for g in ready)
                         + "): return False")
        pending[:] = [g for g in pending if not any(g is r for r in ready)]

    for eqn in eqns:
        check_ready()
        lines.extend(render_eqn(eqn))
        available.update(id(v) for v in eqn.outs if v is not None)
    check_ready()
    assert not pending, f"guards on values the prologue cannot compute: {pending}"
    return lines


def _guard_lines(inputs, guards, host_eqns) -> list[str]:
    """The prologue's body after the per-input checks: stride queries, the host equations the
    guards need, the guards in dependency order, then `return True`."""
    input_vars = [v for _, value in inputs for v in iter_vars(value)]
    strided = {g[1].name: None for g in guards if g[0].startswith("stride")}
    body = [f"{name}_strides = {name}.stride()" for name in strided]   # one query each
    body += _guards_in_order(guards, _needed_host_eqns(guards, host_eqns, input_vars),
                             input_vars)
    return body + ["return True"]


def build_guard_check(inputs, guards, host_eqns):
    """A function of the inputs checking only `guards` (no per-input type, dtype, device, rank
    or size check: for a caller that has checked those, as Dynamo has for a compiled graph)."""
    ns = {"torch": torch, "math": math}
    params = ", ".join(name for name, _ in inputs)
    source = f"def guard_check({params}):\n" + "\n".join(
        "  " + line for line in _guard_lines(inputs, guards, host_eqns))
    exec(compile(source, "<guard check>", "exec"), ns)
    ns["guard_check"].source = source
    return ns["guard_check"]


def build_prologue(inputs, guards, host_eqns, symbolic: bool, grad_mode: bool = True,
                   keyed: int | None = None, requires_grad: bool | None = None) -> Prologue:
    """inputs: the trace's (name, value) pairs; guards: (op, a, b) triples; host_eqns: the traced
    host equations, replayed here where a guard needs a derived size; grad_mode: whether the
    entry was compiled with grad mode on (the cache key holds it too, and the autocast state,
    checked as it is now); keyed: how many inputs the cache key covers (the rest, implicit
    inputs, are checked whole after a key match); requires_grad: whether the tensors'
    requires_grad is checked (by default in grad mode; also where `fn` enables grad inside)."""
    ns = {"torch": torch, "math": math, "Tensor": torch.Tensor, "copysign": math.copysign}
    checks: list[tuple] = [(f"if {'not ' if grad_mode else ''}torch.is_grad_enabled(): "
                            "return False", None), (autocast.prologue_check(), None)]
    requires_grad = grad_mode if requires_grad is None else requires_grad
    for i, (name, value) in enumerate(inputs):
        first = len(checks)
        _check_value(name, value, symbolic, checks, ns, requires_grad)
        if keyed is not None and i >= keyed:    # an implicit input: the cache key has not seen it
            checks[first:] = [(full, full) for full, _ in checks[first:]]
    body = _guard_lines(inputs, guards, host_eqns)
    devices = "".join(f"{k} = torch.device({str(v)!r})\n" for k, v in ns.items()
                      if k.startswith("DEVICE_"))
    devices += "".join(f"# {k} is the type {v.__module__}.{v.__qualname__}\n"
                       for k, v in ns.items() if k.startswith("TYPE_"))
    params = ", ".join(name for name, _ in inputs)
    source = ("# Prologue: checks this cache entry's guards\n" + devices + f"def prologue({params}):\n"
              + "\n".join("  " + line for line in [full for full, _ in checks] + body))
    after_key = (f"def prologue_after_key({params}):\n"
                 + "\n".join("  " + line for line in [a for _, a in checks if a] + body))
    exec(compile(source + "\n" + after_key, "<prologue>", "exec"), ns)
    return Prologue(source, ns["prologue"], ns["prologue_after_key"])
