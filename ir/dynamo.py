"""The `torch.compile` backend: each graph Dynamo captures runs through `ir.jit`.

    torch.compile(model, backend="triton_exec")     # found by the torch_dynamo_backends entry point
    torch.compile(model, backend=ir.dynamo.Backend(executors=["triton"], cache_limit=4))

Dynamo (the capture half of `torch.compile`) runs the Python: data-dependent branches, side
effects on Python objects, `ModelOutput`s, KV cache objects. It hands each straight-line piece
as a torch-level FX graph, with its guards, to the backend. The backend jits the graph's forward
like any function: the graph's ops go through our tracer, passes, fusion, vectorization and
fused backward (`ir.autodiff`), exactly as `ir.jit(fn)` would run them. A static graph is jitted
in "constant values" mode, a graph with symbolic sizes (`dynamic=True`, `mark_dynamic`, or
Dynamo's automatic dynamic shapes after a size changed) in "symbolic values" mode.

Guards once: Dynamo already checks each input's type, dtype, device, rank, requires_grad, the
grad mode, static sizes and strides, and the facts its shape environment holds on symbolic
ones. A call of a compiled graph checks only what Dynamo's guards do not imply
(`ir.dynamo_guards`): pointer alignment, the negative bit, divisibility and spans. Where they
fail, the full `ir.jit` lookup runs (it may compile another entry).

Autocast and grad-mode blocks in a graph are traced with it. Where the tracer refuses an op (an
in-place op changing a tensor's shape, `.item()`, a complex argument, ...), the graph is split
around it (`ir.dynamo_split`): the refused ops run on PyTorch, the rest is jitted, and
`ir.explain(compiled)` shows each piece. Only where no op is to blame does the whole graph run
as Dynamo captured it, on PyTorch, with a warning naming the graph and the reason.
"""
from __future__ import annotations

import copy
import logging
import operator
import os
import re
import warnings
import weakref
from importlib import metadata

import torch
import torch.nn.functional as F

from ir import diagnostics, dynamo_split
from ir.dynamo_guards import thin_guards
from ir.dynamo_split import NodeTracker
from ir.executors import ENTRY_POINT_GROUP, Executor, _REGISTRY
from ir.jit import CACHE_MODES, DEFAULT_CACHE_LIMIT, JitFunction, explain as jit_explain
from ir.prologue import build_guard_check

log = logging.getLogger("ir.dynamo")
fallback_log = diagnostics.log      # ir.fallbacks

def _example_values(gm) -> dict:
    """Placeholder name -> Dynamo's example value (a FakeTensor, SymInt or int)."""
    return {node.name: node.meta.get("example_value") for node in gm.graph.nodes
            if node.op == "placeholder"}


def _static_dims(values: dict) -> dict[str, set]:
    """Placeholder name -> the dims of a tensor input whose sizes are constants of the graph
    (Dynamo guards them equal)."""
    return {name: {d for d, s in enumerate(v.shape) if type(s) is int}
            for name, v in values.items() if isinstance(v, torch.Tensor)}


def _static_inputs(values: dict) -> set[str]:
    """Placeholder names of the tensor inputs whose sizes and strides are all constants of the
    graph, so that Dynamo guards them exactly."""
    return {name for name, v in values.items() if isinstance(v, torch.Tensor)
            and all(type(s) is int for s in (*v.shape, *v.stride()))}


def is_dynamic(gm) -> bool:
    """Whether the graph has symbolic inputs: a SymInt (or, in a piece of a split graph, the
    SymFloat of an `.item()`), or a tensor of symbolic shape."""
    values = _example_values(gm)
    static = _static_inputs(values)
    return any(isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool))
               or (isinstance(v, torch.Tensor) and name not in static)
               for name, v in values.items())


def _sum(*args):
    return sum(args[0] if len(args) == 1 and isinstance(args[0], (list, tuple)) else args)


# What Dynamo writes into a graph -> what our tracer knows it as: its functions on symbolic
# sizes, as Python computes them on our size proxies (they are not SymInts), and the C bindings
# it records for Python functions of torch.nn.functional (F.pad calls torch._C._nn.pad)
GRAPH_FUNCTIONS = {torch.sym_sum: _sum, torch.sym_max: max, torch.sym_min: min,
                   torch.sym_not: operator.not_, torch.sym_int: int, torch.sym_float: float,
                   torch._C._nn.pad: F.pad}


def traceable_copy(gm) -> torch.fx.GraphModule:
    """A copy of the graph our tracer runs: calls rewritten by `GRAPH_FUNCTIONS`. Autocast
    and grad-mode blocks stay: the tracer honours the state their calls set while tracing."""
    graph = copy.deepcopy(gm.graph)
    for node in graph.nodes:
        if node.op == "call_function" and node.target in GRAPH_FUNCTIONS:
            node.target = GRAPH_FUNCTIONS[node.target]
    return torch.fx.GraphModule(gm, graph)


def graph_function(tracker: NodeTracker, name: str):
    """A plain function named `name` taking the graph's placeholders and running the graph
    node by node (`tracker`), so that the jit names kernels after it and sees no module (a
    graph has no hooks or tree), and a refused op is known by its node."""
    params = [node.name for node in tracker.graph.nodes if node.op == "placeholder"]
    ns = {"run": tracker.run}
    exec(f"def {name}({', '.join(params)}):\n    return run({', '.join(params)})\n", ns)
    return ns[name]


class CompiledGraph:
    """What Dynamo calls in place of one captured graph (or one piece of a split graph): the
    jitted graph, behind thin guards; where the tracer refuses an op, the graph split around
    it (`ir.dynamo_split`). `graph_inputs`: the names of Dynamo's graph inputs, whose sizes
    and strides Dynamo guards (a piece's other inputs are computed by other pieces)."""

    def __init__(self, gm, name: str, backend: Backend, graph_inputs: set[str]):
        self.name = name
        self.graph_module = gm      # as Dynamo captured it (a piece: as split)
        self.backend, self.graph_inputs = backend, graph_inputs
        self.traced = traceable_copy(gm)
        self.tracker = NodeTracker(self.traced)
        cache = backend.cache or ("symbolic values" if is_dynamic(gm) else "constant values")
        self.jitted = JitFunction(graph_function(self.tracker, name), backend.executors, cache,
                                  backend.cache_limit)
        self.example_values = _example_values(gm)    # FakeTensors: no real memory held
        self.jitted.static_dims = _static_dims(self.example_values)
        self.fast: list[tuple] = []     # (thin check, entry) per entry served, oldest first
        self.split: torch.fx.GraphModule | None = None     # the graph of pieces, once split
        self.pieces: list = []      # CompiledGraph and TorchPiece, in the order they run
        self.refused: str | None = None     # why the whole graph runs on PyTorch

    @property
    def last_entry(self):
        return self.jitted.last_entry

    def last_entries(self) -> list:
        """The entry the last call used, or each jitted piece's where the graph is split."""
        if self.split is not None:
            return [e for p in self.pieces if isinstance(p, CompiledGraph)
                    for e in p.last_entries()]
        return [self.last_entry] if self.last_entry is not None else []

    def __call__(self, *args):
        for check, entry in self.fast:
            if check(*args):
                self.jitted.last_entry = entry
                return entry.computation(*args)
        if self.split is not None:
            return self.split(*args)
        if self.refused is not None:
            return self.graph_module.forward(*args)
        entry = self.lookup(args)
        return entry.computation(*args)

    def lookup(self, args):
        """The full `ir.jit` lookup (compiling on a miss); an entry it returns joins the fast
        path. Where the tracer refuses an op, the graph is split around it from then on
        (entries built before keep serving the calls whose thin checks they pass)."""
        jitted, known = self.jitted, self.jitted.stats.misses
        try:
            entry = jitted.lookup(jitted.bind(args, {}))
        except (NotImplementedError, TypeError) as error:     # what the tracer refuses
            self.split_around(error)
            return _EagerEntry(self.graph_module.forward if self.split is None else self.split)
        if entry.prologue is not None and not any(e is entry for _, e in self.fast):
            check = self.thin_check(entry)
            if check is not None:
                self.fast.append((check, entry))
        if (self.backend.explain_each and jitted.stats.misses > known
                and entry.prologue is not None):
            log.warning("%s", self.explanation(entry))
        return entry

    def split_around(self, error: Exception) -> None:
        """Splits the graph into pieces around the ops the tracer refused (each logged on the
        `ir.fallbacks` logger); where no op is to blame, the whole graph runs on PyTorch."""
        refused = {node.name: why for node, why in
                   dynamo_split.refused_nodes(self.traced, self.tracker, error).items()}
        if not refused:
            return self.refuse(error)
        self.split = dynamo_split.split(self.traced, refused)
        for attr, gm in dynamo_split.pieces(self.split):
            name = f"{self.name}_{attr.removeprefix('submod_')}"
            reasons = {n.name: (dynamo_split.python_line(n), refused[n.name])
                       for n in gm.graph.nodes if n.name in refused and n.op != "placeholder"}
            if reasons:
                self.pieces.append(TorchPiece(name, reasons))
                for op, why in reasons.values():
                    fallback_log.info("%s: %s runs on PyTorch: %s", self.name, op, why)
            else:
                piece = type(self)(gm, name, self.backend, self.graph_inputs)
                self.pieces.append(piece)
                delattr(self.split, attr)       # the split graph calls the piece ...
                setattr(self.split, attr, piece)    # ... as a plain attribute, not a module

    def refuse(self, error: Exception) -> None:
        """From now on the graph runs as Dynamo captured it, on PyTorch; warns why."""
        self.refused = f"{type(error).__name__}: {error}"
        warnings.warn(f"ir.dynamo: graph {self.name} runs on PyTorch: {self.refused}",
                      stacklevel=5)

    def thin_check(self, entry):
        """The entry's guards less those Dynamo checks, as one function of the graph's inputs;
        None where the entry reads implicit inputs (their checks stay in the full prologue)."""
        if len(entry.traces[0].inputs) != len(self.jitted.param_names):
            return None
        return build_guard_check(entry.traces[0].inputs, thin_guards(entry, self),
                                 entry.host)

    def explanation(self, entry=None) -> str:
        if self.split is not None:
            return "\n\n".join([f"graph {self.name}: split into {len(self.pieces)} pieces "
                                 "around the ops ir.jit refuses, run in this order:"]
                                + [p.explanation() for p in self.pieces])
        entry = entry or self.last_entry
        if self.refused is not None:
            return f"graph {self.name}: runs whole on PyTorch: {self.refused}"
        if entry is None:
            return f"graph {self.name}: not run yet"
        if entry.prologue is None:
            return f"graph {self.name}: runs eagerly on PyTorch"
        text = str(diagnostics.explanation(self.jitted, entry))
        thin = thin_guards(entry, self)
        return (f"graph {self.name} (from torch.compile: Dynamo checks each input's dtype, "
                f"device, rank, requires_grad, static sizes and strides, and the grad mode; "
                f"the backend checks {len(thin)} guards per call)\n{text}")


class TorchPiece:
    """A piece of a split graph made of ops the tracer refuses: the split graph runs it as
    Dynamo captured it, on PyTorch. `reasons`: node name -> (the node, why it was refused)."""

    def __init__(self, name: str, reasons: dict):
        self.name, self.reasons = name, reasons

    def explanation(self) -> str:
        return "\n".join([f"graph {self.name}: runs on PyTorch (ops ir.jit refuses):"]
                         + [f"  {op}\n    {why}" for op, why in self.reasons.values()])


class CheckedCompiledGraph(CompiledGraph):
    """Under IR_CHECK_GUARDS=1 (the tests): a call that an entry's thin check accepts must pass
    that entry's whole prologue too, as Dynamo's guards and the thin check together imply it."""

    def __call__(self, *args):
        for check, entry in self.fast:
            if check(*args) and not entry.prologue(*args):
                raise AssertionError(f"ir.dynamo: graph {self.name}: the thin check accepts a "
                                     f"call that the entry's prologue rejects:\n{entry.prologue}")
        return super().__call__(*args)


class _EagerEntry:
    prologue = None

    def __init__(self, fn):
        self.computation = fn


class Backend:
    """A `torch.compile` backend running each captured graph through `ir.jit`.

    executors: executor objects or registered names, as `ir.jit` takes them (default: the
    Triton executor). cache: an `ir.jit` cache mode, or None (default) for "constant values"
    on static graphs and "symbolic values" on graphs with symbolic sizes. cache_limit: entries
    per cache key of each graph, as `ir.jit`'s. explain: log each new entry's `ir.explain`
    text on the `ir.dynamo` logger (WARNING, so it shows without configuring logging).
    `graphs` lists the compiled graphs still alive, in compile order."""

    def __init__(self, *, executors=("triton",), cache: str | None = None,
                 cache_limit: int | None = DEFAULT_CACHE_LIMIT, explain: bool = False):
        if cache is not None and cache not in CACHE_MODES:
            raise ValueError(f"cache must be None or one of {CACHE_MODES}, got {cache!r}")
        if cache_limit is not None and (type(cache_limit) is not int or cache_limit < 1):
            raise ValueError(f"cache_limit must be a positive int or None, got {cache_limit!r}")
        executors = [executors] if isinstance(executors, (str, Executor)) else list(executors)
        for ex in executors:
            _check_executor(ex)
        self.executors, self.cache, self.cache_limit = executors, cache, cache_limit
        self.explain_each = explain
        self._graphs: list[weakref.ref] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs) -> CompiledGraph:
        checked = os.environ.get("IR_CHECK_GUARDS") == "1"
        inputs = {node.name for node in gm.graph.nodes if node.op == "placeholder"}
        graph = (CheckedCompiledGraph if checked else CompiledGraph)(gm, _graph_name(), self,
                                                                      inputs)
        self._graphs.append(weakref.ref(graph))
        return graph

    @property
    def graphs(self) -> list[CompiledGraph]:
        self._graphs = [ref for ref in self._graphs if ref() is not None]
        return [ref() for ref in self._graphs]

    def explain(self) -> str:
        """Per graph (compile order): its fusion groups, what was left to torch and why, and
        the guards of the entry its last call used."""
        graphs = self.graphs
        return "\n\n".join([f"ir.dynamo: {len(graphs)} graphs"]
                           + [g.explanation() for g in graphs])

    def __repr__(self):
        return (f"ir.dynamo.Backend(executors={self.executors!r}, cache={self.cache!r}, "
                f"cache_limit={self.cache_limit!r})")


def backend_of(compiled) -> Backend | None:
    """The `Backend` that a function or module returned by `torch.compile` runs its graphs on
    (a `Backend` itself), or None."""
    if isinstance(compiled, Backend):
        return compiled
    context = getattr(compiled, "dynamo_ctx", None)    # a compiled module
    for cell in getattr(compiled, "__closure__", None) or ():   # a compiled function
        if isinstance(cell.cell_contents, torch._dynamo.eval_frame._TorchDynamoContext):
            context = cell.cell_contents
    if context is None:
        return None
    backend = torch._dynamo.eval_frame.innermost_backend(context.callback)
    backend = getattr(backend, "compiler_fn", backend)     # torch.compile's wrapper
    return backend if isinstance(backend, Backend) else None


def explain(fn, *args, **kwargs):
    """`ir.explain`: for a function or module compiled by `torch.compile(...,
    backend="triton_exec")` (or an `ir.dynamo.Backend`), no arguments, the text of
    `Backend.explain` (per graph of that backend); for a function of `ir.jit`, its
    `ir.jit.explain(fn, *args, **kwargs)`."""
    backend = backend_of(fn)
    return backend.explain() if backend is not None else jit_explain(fn, *args, **kwargs)


def _check_executor(ex) -> None:
    if isinstance(ex, Executor):
        return
    if not isinstance(ex, str):
        raise TypeError(f"executors: expected ir.Executor objects or names, got {ex!r}")
    if ex not in _REGISTRY and ex not in metadata.entry_points(group=ENTRY_POINT_GROUP).names:
        raise ValueError(f"no executor named {ex!r}")


def _graph_name() -> str:
    """`graph_0_1` for Dynamo's compile id 0/1 (frame 0, its second compile), as its logs
    name the graph; `graph` outside a Dynamo compile."""
    compile_id = torch._guards.CompileContext.current_compile_id()
    return "graph_" + re.sub(r"\W", "_", str(compile_id)) if compile_id is not None else "graph"


backend = Backend()     # the `triton_exec` entry point of the torch_dynamo_backends group


def last_entries(compiled) -> list:
    """The entry the last call of each graph (each jitted piece of a split graph) used; graphs
    not run yet are left out."""
    return [entry for g in compiled.graphs for entry in g.last_entries()]
