"""The executors API and the always-present torch executor.

An executor claims the equations it can run and renders each as Python source. A fusion executor
also gets a pass over the whole trace (`fusion_pass`), where it replaces groups of equations by
one call of its own. `ir` never imports an executor: executors register themselves by name, and
a name not registered yet is looked up in the `ir.executors` entry point group (pyproject), whose
entry loads the executor's package, so `ir.jit(fn, executors=["triton"])` needs no import first.
"""
from __future__ import annotations

import dataclasses
from importlib import metadata

import torch
import torch.nn.functional as F

from ir import prims
from ir.proxies import TensorProxy, same_size
from ir.tracing import guard_key
from ir.passes import dce
from ir.trace import Eqn, Trace, iter_vars, map_vars, render

_REGISTRY: dict[str, "Executor"] = {}


@dataclasses.dataclass
class CompileContext:
    """What a fusion pass may read and add to while a cache entry is built."""

    values: dict            # id(input Var) -> the runtime value it stands for in this call
    symbolic: bool          # "symbolic values" mode
    guards: list            # (op, a, b) guards the prologue will check; passes may append
    extra: dict = dataclasses.field(default_factory=dict)   # per-executor data of the entry
    name: str = "fn"        # the jitted function's name, unique per function: names kernels
    explaining: bool = False    # ir.explain: build everything, run and time no kernel
    direction: str = "forward"      # "backward" while a differentiable unit's backward compiles

    def add_guard(self, guard) -> None:
        """Adds an (op, a, b) guard unless the same one (by identity of its values) is there."""
        key = guard_key(guard)
        if all(guard_key(g) != key for g in self.guards):
            self.guards.append(guard)


class Executor:
    """Base class. `name` is how users ask for it; `claims` says which equations it runs."""

    name = "executor"

    def claims(self, eqn: Eqn) -> bool:
        return False

    def fusion_pass(self, trace: Trace, ctx: CompileContext) -> Trace:
        return trace

    def decomposes(self, tensor) -> bool:
        """Whether this executor fuses the decompositions of composite ops (softmax, the norms,
        cross_entropy: `ir/reductions.py`) on this tensor; where no executor does, the trace
        keeps eager's own op, so the torch executor runs it bit for bit as eager."""
        return False

    def refusal(self, eqn: Eqn) -> tuple[str, str]:
        """Why this executor left `eqn` (unclaimed) to another one, as (kind, reason), for
        `ir.explain` and the fallback warnings. By default: its `claims` refused it."""
        return "checker refused", f"{self.name}.claims() refused it"

    def render(self, eqn: Eqn):
        """(right-hand-side source, comment lines) for an equation this executor claimed."""
        return eqn.prim.render(eqn)

    def namespace(self, eqn: Eqn) -> dict:
        """Names that the rendered source of `eqn` refers to."""
        return {}

    def __repr__(self):
        return f"<executor {self.name}>"


def register_executor(ex: Executor) -> Executor:
    _REGISTRY[ex.name] = ex
    return ex


ENTRY_POINT_GROUP = "ir.executors"


def get_executor(name: str) -> Executor:
    """The executor registered as `name`, loading its package through the `ir.executors` entry
    point of that name when it is not registered yet."""
    if name not in _REGISTRY:
        found = metadata.entry_points(group=ENTRY_POINT_GROUP, name=name)
        for ep in found:
            ex = ep.load()
            if not isinstance(ex, Executor):
                raise TypeError(f"entry point {ep.value!r} ({ENTRY_POINT_GROUP}: {name}) is not an "
                                f"ir.Executor but {type(ex).__name__}")
            _REGISTRY.setdefault(name, ex)
            break
    try:
        return _REGISTRY[name]
    except KeyError:
        known = sorted(set(_REGISTRY) | set(metadata.entry_points(group=ENTRY_POINT_GROUP).names))
        raise ValueError(f"no executor named {name!r}; known: {known}") from None


# ---- the torch executor ------------------------------------------------------------------

def _is_zero(x) -> bool:
    return isinstance(x, int) and x == 0


def _slice_src(eqn):
    t, starts, stops, steps = eqn.args
    parts = [":" if _is_zero(a) and same_size(b, s) and c == 1 else
             f"{render(a)}:{render(b)}" + (f":{c}" if c != 1 else "")
             for a, b, c, s in zip(starts, stops, steps, t.shape)]
    full = next((i for i, p in enumerate(parts) if p != ":"), 0)
    if full:    # x[..., 0:8] indexes faster than x[:, :, :, 0:8]
        parts = ["..."] + parts[full:]
    return f"{t.name}[{', '.join(parts)}]"


def _pad_src(eqn):
    t, config = eqn.args
    first = min(i for i, (lo, hi) in enumerate(config) if not (_is_zero(lo) and _is_zero(hi)))
    widths = [w for lo_hi in reversed(config[first:]) for w in lo_hi]
    return f"F.pad({t.name}, {render(tuple(widths))}, value={render(eqn.params['value'])})"


def _broadcast_src(eqn):
    t, shape = eqn.args
    dims = eqn.params["dims"]
    src = t.name
    if len(dims) != len(shape):
        src += "[" + ", ".join(":" if d in dims else "None" for d in range(len(shape))) + "]"
    keep = {d: s for d, s in zip(dims, t.shape)}
    sizes = [-1 if d in keep and keep[d] is s else s for d, s in enumerate(shape)]
    return f"{src}.expand({render(tuple(sizes))})"


_INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/", "pow": "**", "gt": ">", "lt": "<",
          "ge": ">=", "le": "<=", "eq": "==", "ne": "!="}


def _elementwise_src(eqn):
    name, args = eqn.prim.name, eqn.args
    if name in _INFIX:
        return f"{render(args[0])} {_INFIX[name]} {render(args[1])}"
    return f"torch.{name}({', '.join(render(a) for a in args)})"


def _copy_src(eqn):
    x = eqn.args[0].name
    if eqn.params["memory_format"] == "contiguous":
        return f"{x}.clone(memory_format=torch.contiguous_format)"
    return f"{x}.clone()"


TORCH_RENDER = {
    "copy": _copy_src,
    "convert_element_type": lambda e: f"{e.args[0].name}.to({render(e.params['dtype'])})",
    "broadcast_in_dim": _broadcast_src,
    "slice": _slice_src,
    "pad": _pad_src,
    "cat": lambda e: f"torch.cat({render(e.args[0])}, {e.params['dim']})",
    "where": lambda e: f"torch.where({', '.join(render(a) for a in e.args)})",
    "full": lambda e: (f"torch.full({render(e.args[0])}, {render(e.params['value'])}, "
                       f"dtype={render(e.params['dtype'])}, device={render(e.params['device'])})"),
    "arange": lambda e: (f"torch.arange({', '.join(render(a) for a in e.args)}, "
                         f"dtype={render(e.params['dtype'])}, device={render(e.params['device'])})"),
    "reshape": lambda e: f"{e.args[0].name}.reshape({render(tuple(e.args[1]))})",
    "permute": lambda e: f"{e.args[0].name}.permute({render(e.params['perm'])})",
    "sum": lambda e: f"{e.args[0].name}.sum({render(e.params['dims'])})",
    "amax": lambda e: f"{e.args[0].name}.amax({render(e.params['dims'])})",
    "amin": lambda e: f"{e.args[0].name}.amin({render(e.params['dims'])})",
    "silu": lambda e: f"F.silu({e.args[0].name})",
    "gelu": lambda e: f"F.gelu({e.args[0].name}, approximate={render(e.params['approximate'])})",
    "opaque": prims.opaque.render_rhs,
}


def _covers(eqn: Eqn, operands) -> bool:
    """Whether some tensor operand already has the shape of eqn's output."""
    out = eqn.out.shape
    return any(isinstance(a, TensorProxy) and len(a.shape) == len(out)
               and all(same_size(x, y) for x, y in zip(a.shape, out)) for a in operands)


def elide_broadcasts(trace: Trace) -> Trace:
    """Drops unclaimed right-aligned broadcasts that only feed torch elementwise ops, which
    broadcast by themselves. Example: `t3 = broadcast_in_dim(cos, ...); t4 = mul(t0, t3)` becomes
    `t4 = mul(t0, cos)` when t0 already has t4's shape."""
    consumers: dict[int, list] = {}
    for eqn in trace.eqns:
        for v in eqn.input_vars():
            consumers.setdefault(id(v), []).append(eqn)
    output_ids = {id(v) for v in iter_vars(trace.outputs)}
    source: dict[int, object] = {}
    for eqn in trace.eqns:
        if (eqn.prim is prims.broadcast_in_dim and eqn.executor is None
                and eqn.params["dims"] == tuple(range(len(eqn.args[1]) - eqn.args[0].ndim,
                                                      len(eqn.args[1])))
                and id(eqn.out) not in output_ids
                and all(c.prim.kind == "elementwise" and c.executor is None
                        for c in consumers[id(eqn.out)])):
            source[id(eqn.out)] = eqn.args[0]
    if not source:
        return trace
    eqns = []   # a broadcast left unused is dropped by dce; one a consumer still needs stays
    for eqn in trace.eqns:
        args = map_vars(lambda v: source.get(id(v), v), eqn.args)
        if eqn.prim.kind == "elementwise" and not _covers(eqn, args):
            args = eqn.args
        eqns.append(eqn.replace(args=args))
    return dce(trace.replace(eqns=tuple(eqns), provenance="Broadcasts left to torch"))


class TorchExecutor(Executor):
    """Runs every tensor prim and opaque symbol with PyTorch; the fallback of every jit."""

    name = "torch"

    def fusion_pass(self, trace: Trace, ctx: CompileContext) -> Trace:
        return elide_broadcasts(trace)

    def claims(self, eqn: Eqn) -> bool:
        return eqn.prim.kind != "host"

    def render(self, eqn: Eqn):
        rule = TORCH_RENDER.get(eqn.prim.name, _elementwise_src)
        return rule(eqn), []

    def namespace(self, eqn: Eqn) -> dict:
        ns = {"torch": torch, "F": F}
        if eqn.prim is prims.opaque and not eqn.params["fn_name"].startswith("torch"):
            ns[eqn.params["fn_name"]] = eqn.params["fn"]
        return ns


torch_executor = register_executor(TorchExecutor())
