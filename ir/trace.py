"""The trace IR: one generic equation node and the trace that lists them, printable as Python.

An `Eqn` is (prim, args, params, outs): `args` may nest tuples of Vars and literals, `params` are
static keyword values, `outs` are the Vars it defines. A `Trace` is a function: named inputs, a flat
list of equations, an output structure. `str(trace)` is Python source; the last trace of a jitted
call is exactly the source that runs.
"""
from __future__ import annotations

import dataclasses
import math

import torch

from ir.proxies import TensorProxy, Var


@dataclasses.dataclass(frozen=True)
class Eqn:
    prim: object                    # an ir.prims.Prim (or a fusion executor's prim)
    args: tuple
    params: dict
    outs: tuple
    executor: object = None         # the executor that runs it, once claimed

    def replace(self, **changes) -> "Eqn":
        return dataclasses.replace(self, **changes)

    def input_vars(self) -> list[Var]:
        return list(iter_vars((self.args, tuple(self.params.values()))))

    @property
    def out(self):
        return self.outs[0]


def iter_vars(x):
    """Yields every Var inside a nested structure of tuples, lists and dicts."""
    if isinstance(x, Var):
        yield x
    elif isinstance(x, (tuple, list)):
        for item in x:
            yield from iter_vars(item)
    elif isinstance(x, dict):
        for item in x.values():
            yield from iter_vars(item)


def free_vars(trace) -> list:
    """Values the trace reads but does not define, in first-use order."""
    defined, free = set(), {}
    for e in trace.eqns:
        for v in e.input_vars():
            if id(v) not in defined:
                free.setdefault(id(v), v)
        defined.update(id(o) for o in e.outs if o is not None)
    for v in iter_vars(trace.outputs):
        if id(v) not in defined:
            free.setdefault(id(v), v)
    return list(free.values())


def check_defined(trace) -> None:
    """Raises where an equation or the outputs read a Var that the trace neither takes nor
    computes: a traced value of another call that the code kept (a `functools.lru_cache` of a
    function returning tensors, a global), which generated code would read as whatever value of
    this trace has its name."""
    defined = {id(v) for v in trace.input_vars()}
    for eqn in (*trace.eqns, None):
        read = eqn.input_vars() if eqn is not None else iter_vars(trace.outputs)
        stale = [v for v in read if id(v) not in defined]
        if stale:
            raise NotImplementedError(
                f"ir.jit: {stale[0].name} is a traced value of another call of the function, kept "
                "across calls (a functools.lru_cache or a global holding what traced code "
                "computed); compute it in every call")
        if eqn is not None:
            defined.update(id(v) for v in eqn.outs if v is not None)


def map_vars(fn, x):
    """Rebuilds a nested structure with every Var replaced by fn(var)."""
    if isinstance(x, Var):
        return fn(x)
    if isinstance(x, (tuple, list)):
        return type(x)(map_vars(fn, item) for item in x)
    if isinstance(x, dict):
        return {k: map_vars(fn, v) for k, v in x.items()}
    return x


_LITERAL_TYPES = (torch.dtype, torch.memory_format, torch.layout)   # repr is their Python name


def render(x) -> str:
    """Python source for a literal or a nested structure of Vars and literals. Values are written
    from what they are, never from an object's own repr: an int or float subclass (an IntEnum
    member, a NumPy float) is written as the plain number it equals."""
    if isinstance(x, Var):
        return x.name
    if isinstance(x, tuple):
        inner = ", ".join(render(item) for item in x)
        return f"({inner},)" if len(x) == 1 else f"({inner})"
    if isinstance(x, list):
        return "[" + ", ".join(render(item) for item in x) + "]"
    if isinstance(x, dict):
        return "{" + ", ".join(f"{render(k)}: {render(v)}" for k, v in x.items()) + "}"
    if isinstance(x, bool) or x is None or x is Ellipsis:
        return repr(x)
    if isinstance(x, int):
        return repr(int(x))
    if isinstance(x, float):
        return repr(float(x)) if math.isfinite(x) else f"float('{float(x)}')"
    if isinstance(x, complex):
        return f"complex({render(x.real)}, {render(x.imag)})"
    if isinstance(x, str):
        return repr(str(x))
    if isinstance(x, slice):
        return f"slice({render(x.start)}, {render(x.stop)}, {render(x.step)})"
    if isinstance(x, torch.device):
        return f"torch.device({str(x)!r})"
    if isinstance(x, _LITERAL_TYPES):
        return repr(x)
    raise TypeError(f"a {type(x).__name__} value cannot be written into generated code")


def type_comment(outs) -> str:
    typed = [f"{v.name}: {v.type_string()}" for v in outs if isinstance(v, TensorProxy)]
    return "  # " + ", ".join(typed) if typed else ""


def render_outs(outs) -> str:
    if len(outs) == 1:
        return outs[0].name if outs[0] is not None else "_"
    return "(" + ", ".join(v.name if v is not None else "_" for v in outs) + ")"


@dataclasses.dataclass(frozen=True)
class Trace:
    """A function as a flat list of equations. `outputs` is a nested structure of Vars and literals."""

    name: str
    inputs: tuple                   # (parameter name, Var | tuple of Vars | literal) pairs
    eqns: tuple
    outputs: object
    provenance: str = ""

    def replace(self, **changes) -> "Trace":
        return dataclasses.replace(self, **changes)

    def input_vars(self) -> list[Var]:
        return list(iter_vars([value for _, value in self.inputs]))

    def __str__(self) -> str:
        lines = [f"# {self.provenance}"] if self.provenance else []
        lines.append(f"def {self.name}({', '.join(name for name, _ in self.inputs)}):")
        for name, value in self.inputs:
            items = tuple(value.values()) if isinstance(value, dict) else value
            if isinstance(items, tuple) and any(isinstance(v, Var) for v in items):
                # constants inside are inlined where used
                targets = [v.name if isinstance(v, Var) else "_" for v in items]
                source = f"{name}.values()" if isinstance(value, dict) else name
                lines.append(f"  ({', '.join(targets)}{',' * (len(targets) == 1)}) = {source}")
        for v in self.input_vars():
            if isinstance(v, TensorProxy):
                lines.append(f"  # {v.name}: {v.type_string()}")
        indent = "  "
        for eqn in self.eqns:
            block = eqn.params.get("grad_block", 0)    # a `with` block's start (1) or end (-1)
            indent = indent[:-2] if block < 0 else indent
            lines.extend(indent + line for line in render_eqn(eqn))
            indent += "  " if block > 0 else ""
        lines.append(f"  return {render(self.outputs)}")
        return "\n".join(line for line in lines if line.strip())


def render_eqn(eqn: Eqn) -> list[str]:
    """Lines of source for one equation: its executor's rendering, or the prim's own."""
    renderer = eqn.executor.render if eqn.executor is not None else eqn.prim.render
    rhs, comments = renderer(eqn)
    lines = [f"{render_outs(eqn.outs)} = {rhs}{type_comment(eqn.outs)}" if eqn.outs
             else f"{rhs}"]
    lines.extend(f"  # {c}" for c in comments)
    return lines

