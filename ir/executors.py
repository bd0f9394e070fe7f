"""The executors API and the always-present torch executor.

An executor claims the equations it can run and renders each as Python source (`claim`); a
fully claimed trace compiles to the Python function that runs (`compile_trace`). A fusion executor
also gets a pass over the whole trace (`fusion_pass`), where it replaces groups of equations by
one call of its own. `ir` never imports an executor: executors register themselves by name, and
a name not registered yet is looked up in the `ir.executors` entry point group (pyproject), whose
entry loads the executor's package, so `ir.jit(fn, executors=["triton"])` needs no import first.
"""
from __future__ import annotations

import dataclasses
import math
from importlib import metadata

import torch
import torch.nn.functional as F

from ir import prims
from ir.ops.registry import TORCH_SOURCE
from ir.passes import dce
from ir.proxies import TensorProxy, same_size
from ir.recording import guard_key
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

    def decomposes(self, tensor, dims: tuple = ()) -> bool:
        """Whether this executor fuses the decompositions of composite ops (softmax, the norms,
        cross_entropy: `ir/reductions.py`) on this tensor; with `dims`, those of the softmax
        family over these dims (sorted), whose max and sum it must fuse too. Where no executor
        does, the trace keeps eager's own op, so the torch executor runs it bit for bit as
        eager."""
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


def compile_trace(trace: Trace):
    """Python function from the source of a fully claimed trace."""
    ns = {"torch": torch, "math": math}
    for eqn in trace.eqns:
        if eqn.executor is not None:
            ns.update(eqn.executor.namespace(eqn))
    exec(compile(str(trace), f"<{trace.name}>", "exec"), ns)
    return ns[trace.name]


def claim(trace: Trace, executors) -> Trace:
    """Gives each unclaimed tensor equation to the first executor that claims it."""
    eqns = []
    for eqn in trace.eqns:
        if eqn.executor is None and eqn.prim.kind != "host":
            eqn = eqn.replace(executor=next(ex for ex in executors if ex.claims(eqn)))
        eqns.append(eqn)
    return trace.replace(eqns=tuple(eqns), provenance="Claimed by executors: " + ", ".join(
        ex.name for ex in executors))


# ---- the torch executor ------------------------------------------------------------------

_INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/", "pow": "**", "gt": ">", "lt": "<",
          "ge": ">=", "le": "<=", "eq": "==", "ne": "!="}


def _elementwise_src(eqn):
    """A prim without a rule in `TORCH_SOURCE` (the elementwise ones): its torch function."""
    name, args = eqn.prim.name, eqn.args
    if name in _INFIX:
        return f"{render(args[0])} {_INFIX[name]} {render(args[1])}"
    return f"torch.{name}({', '.join(render(a) for a in args)})"


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
        rule = TORCH_SOURCE.get(eqn.prim, _elementwise_src)
        return rule(eqn), []

    def namespace(self, eqn: Eqn) -> dict:
        ns = {"torch": torch, "F": F}
        if eqn.prim is prims.opaque and not eqn.params["fn_name"].startswith("torch"):
            ns[eqn.params["fn_name"]] = eqn.params["fn"]
        return ns


torch_executor = register_executor(TorchExecutor())
