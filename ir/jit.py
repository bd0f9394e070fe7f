"""`ir.jit`: traces a function into prologue and computation traces, caches them, runs them.

A call computes a hashed key from the grad mode, the autocast state and its arguments (dtypes,
ranks, devices; sizes and int values in "constant values" mode), runs the prologues of that key's
entries until one accepts, and calls that entry's computation. A miss traces the function on
proxies, runs the passes, lets the executors claim the equations, and stores a new entry.
"""
from __future__ import annotations

import dataclasses
import inspect
import itertools
import os
import re
import threading
import warnings
import weakref

import torch

from ir import (autocast, containers, diagnostics, grad_regions, module_attributes,
                module_calls, module_state, modules, passes, recompiles, transforms,
                whole_backward, write_back)
from ir.cache_keys import UnsupportedArgument, arg_key
from ir.captures import _reader, _taking_arguments, _trace_arguments, capture_sources
from ir.containers import Keywords
from ir.executors import (CompileContext, Executor, claim, compile_trace, get_executor,
                          torch_executor)
from ir.inputs import input_proxy
from ir.prologue import Prologue, build_prologue
from ir.proxies import TensorProxy, Var
from ir.recording import opaque
from ir.trace import Trace, check_defined, iter_vars
from ir.tracing import TraceContext, tracing

CACHE_MODES = ("constant values", "symbolic values", "no caching")
DEFAULT_CACHE_LIMIT = 8
_P = inspect.Parameter
_POSITIONAL, _POSITIONAL_ONLY = _P.POSITIONAL_OR_KEYWORD, _P.POSITIONAL_ONLY
_VAR_POSITIONAL, _KEYWORD_ONLY, _VAR_KEYWORD = _P.VAR_POSITIONAL, _P.KEYWORD_ONLY, _P.VAR_KEYWORD
# Compiles (tracing, kernel files, tuning) run one at a time; cache hits never take it.
_COMPILE_LOCK = threading.RLock()


@dataclasses.dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    eager: int = 0      # misses past the cache limit, run eagerly without compiling


@dataclasses.dataclass
class Entry:
    prologue: Prologue
    computation: object
    traces: list
    extra: dict         # per-executor data (e.g. the kernels a fusion executor built)
    guards: list = dataclasses.field(default_factory=list)     # (op, a, b) the prologue checks
    specializations: list = dataclasses.field(default_factory=list)  # (size, value, cause)
    backward: dict = dataclasses.field(default_factory=dict)  # unit name -> backward traces
    key: tuple = ()     # the cache key the entry is stored under
    # fn's arguments -> the traces' inputs (deep containers flat, implicit inputs appended);
    # None where they are the same
    arguments: object = None
    host: tuple = ()    # the host equations (shape queries, size math) the guards may read


class BoundCall(tuple):
    """A call's values, one per parameter of fn, and `form`: how the caller passed them (the
    number of positional arguments, the keyword names). Decorators of fn may read their *args and
    **kwargs (transformers' read `use_cache` from either), so fn is traced as the call called it,
    and the form is part of the cache key."""


@dataclasses.dataclass
class TracedCall:
    """What tracing fn on one call's arguments gave (`JitFunction.trace`)."""
    ctx: TraceContext
    inputs: tuple           # (name, proxy) per parameter of fn
    outputs: object         # the trace's outputs (state written back included)
    structure: object       # the containers of fn's outputs (`ir.containers`), or None
    rebindings: object      # the module slots fn rebound (`ir.module_state`), or None
    reads: dict             # the module attributes the trace read (`ir.module_attributes`)
    grad_mode: bool         # at the call
    final_grad_mode: bool   # the one fn left set


_names_taken: dict[str, itertools.count] = {}
_names: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def function_name(fn) -> str:
    """An identifier naming `fn`'s kernels: its `__name__` (`rope`), made unique among jitted
    functions (`rope_1` for another function also called rope); the same function keeps its name."""
    try:
        return _names[fn]
    except (KeyError, TypeError):
        pass
    base = getattr(fn, "__name__", "fn")
    owner = modules.owner_module(fn)
    if owner is not None:       # GPT for model.forward, GPT_generate for model.generate
        base = type(owner).__name__ + ("" if base == "forward" else "_" + base)
    base = re.sub(r"\W", "_", base).strip("_") or "fn"
    if base[0].isdigit():
        base = "fn_" + base
    n = next(_names_taken.setdefault(base, itertools.count()))
    name = base if n == 0 else f"{base}_{n}"
    try:
        _names[fn] = name
    except TypeError:       # not weak-referenceable: named afresh per ir.jit
        pass
    return name


def _resolved(proxy):
    """What the traced function receives for an argument: a view with the negative bit (e.g.
    `z.conj().imag`) is resolved first (a torch op of the trace), so no kernel reads its raw
    storage; such an entry's prologue checks the bit, and an executor whose kernels read an
    argument's storage guards that it is not set."""
    if isinstance(proxy, tuple):
        return tuple(_resolved(p) for p in proxy)
    if isinstance(proxy, dict):
        return {k: _resolved(p) for k, p in proxy.items()}
    if isinstance(proxy, TensorProxy) and proxy.neg:
        return opaque(torch.Tensor.resolve_neg, (proxy,), {})
    return proxy


def _pair_values(proxy, value, values: dict) -> None:
    """Records the runtime value of each Var of an argument's proxy structure, pairing items by
    position (a tuple's non-tensor items hold places too; a dict's by name)."""
    if isinstance(proxy, dict):
        proxy, value = tuple(proxy.values()), tuple(value.values())
    if isinstance(proxy, tuple):
        for p, v in zip(proxy, value):
            _pair_values(p, v, values)
    elif isinstance(proxy, Var):
        values[id(proxy)] = value


def _wrapped(computation, plan, call: TracedCall):
    """The compiled computation as a call runs it: as one autograd Function where the whole
    trace has one backward (`ir.whole_backward`), with autocast off (its casts are in the
    trace), then rebinding the module state and rebuilding the output containers it changed."""
    if plan is not None:
        plan.forward, computation = computation, plan
    if autocast.enabled():
        computation = autocast.disabled(computation)
    if call.rebindings is not None:
        computation = module_state.rebinding(computation, call.rebindings)
    if call.structure is not None:
        computation = containers.rebuilding(computation, call.structure)
    return computation


def _paired_values(inputs, args) -> dict:
    """id(Var) -> its runtime value, for the traces' inputs and arguments."""
    values = {}
    for (_, proxy), a in zip(inputs, args):
        _pair_values(proxy, a, values)
    return values


class JitFunction:
    """The callable returned by `ir.jit`."""

    def __init__(self, fn, executors, cache, cache_limit=DEFAULT_CACHE_LIMIT):
        if cache not in CACHE_MODES:
            raise ValueError(f"cache must be one of {CACHE_MODES}, got {cache!r}")
        if cache_limit is not None and (type(cache_limit) is not int or cache_limit < 1):
            raise ValueError(f"cache_limit must be a positive int or None, got {cache_limit!r}")
        self.cache_limit = cache_limit
        self.fn = fn
        self.cache_mode = cache
        self.caching = cache != "no caching"
        self.constant = cache == "constant values"
        if isinstance(executors, (str, Executor)):
            executors = [executors]
        self.executors = [get_executor(e) if isinstance(e, str) else e for e in executors or ()]
        for e in self.executors:
            if not isinstance(e, Executor):
                raise TypeError(f"executors: expected ir.Executor objects or names, got {e!r}")
        if torch_executor not in self.executors:
            self.executors.append(torch_executor)
        self.signature = inspect.signature(fn)
        self.param_names = list(self.signature.parameters)
        self.param_kinds = [p.kind for p in self.signature.parameters.values()]
        # calls with exactly this many positional arguments and no keywords bind as they are
        self.plain_arity = len(self.param_names) if all(
            k in (_POSITIONAL, _POSITIONAL_ONLY) for k in self.param_kinds) else -1
        self.stats = CacheStats()
        self.entries: dict[tuple, list[Entry]] = {}
        self.history: list[Entry] = []         # every cached entry, oldest first
        self.eager_entry = Entry(None, lambda *values: self.call_fn(values), [], {})
        self.warned_limit = False
        self.warned_eager: set[str] = set()     # reasons for running eagerly, warned
        self.warned_executors: set[str] = set()     # named executors that ran nothing, warned
        self.last_entry: Entry | None = None
        self.__wrapped__ = fn
        if os.environ.get("IR_CHECK_GUARDS") == "1":     # debug and test mode
            self.lookup = self.checked_lookup
        self.__name__ = getattr(fn, "__name__", "jitted")
        self.name = function_name(fn)
        self.__doc__ = fn.__doc__
        if modules.owner_module(fn) is not None:    # GPT.forward
            self.__name__ = f"{type(fn.__self__).__name__}.{self.__name__}"
        # a bound method of a module: its module tree joins the cache key (`ir.modules`)
        self.module = modules.owner_module(fn)
        # parameter name -> dims whose sizes symbolic mode takes as constants (`ir.dynamo`)
        self.static_dims: dict[str, set] = {}

    def options(self) -> dict:
        """The keyword arguments of `ir.jit` that made this function (executors by name where
        registered under it)."""
        executors = [ex.name if _registered(ex) else ex for ex in self.executors
                     if ex is not torch_executor]
        return {"executors": executors, "cache": self.cache_mode, "cache_limit": self.cache_limit}

    def bind(self, args, kwargs):
        """One value per parameter of fn (a tuple for *args, a dict for **kwargs): the call's
        arguments, or a `BoundCall` that also says how they were passed."""
        if not kwargs and len(args) == self.plain_arity:
            return args
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        values = BoundCall(Keywords(v) if kind is _VAR_KEYWORD else v
                           for v, kind in zip(bound.arguments.values(), self.param_kinds))
        values.form = (len(args), tuple(kwargs))
        return values

    def call_fn(self, values, form=None):
        """fn called with one value per parameter, each passed as its kind requires; with a
        `BoundCall.form`, as that call passed them (a parameter it left to its default is left
        out)."""
        positional, keywords = [], {}
        given, named = form if form is not None else (len(self.param_names), None)
        for i, (name, kind, value) in enumerate(zip(self.param_names, self.param_kinds, values)):
            if kind is _VAR_POSITIONAL:
                positional.extend(value)
            elif kind is _VAR_KEYWORD:
                keywords.update(value)
            elif kind is not _KEYWORD_ONLY and i < given:
                positional.append(value)
            elif named is None or name in named:
                keywords[name] = value
        return self.fn(*positional, **keywords)

    def key(self, args):
        """The hashed cache key: the grad mode, the autocast state, then each argument's key."""
        constant = self.constant
        try:
            key = (torch.is_grad_enabled(), autocast.state(),
                   *[arg_key(a, constant) for a in args])
        except UnsupportedArgument:
            for name, a in zip(self.param_names, args):
                try:
                    arg_key(a, constant)
                except UnsupportedArgument as e:
                    raise TypeError(f"ir.jit: argument {name!r}: {e}") from None
            raise
        if type(args) is BoundCall:
            key = (*key, args.form)
        if self.module is not None:
            return (modules.structure_key(self.module), *key)
        return key

    def __call__(self, *args, **kwargs):
        args = self.bind(args, kwargs)
        entry = self.lookup(args)
        if entry is self.eager_entry:   # fn itself, called as the caller called it
            return self.call_fn(args, getattr(args, "form", None))
        return entry.computation(*args)

    def lookup(self, args) -> Entry:
        """The cache entry whose guards these arguments pass; compiles a new one on a miss.
        Hits read the entries without a lock; a miss takes the compile lock and looks again, as
        another thread may have compiled the entry meanwhile. A compile that raises stores
        nothing. Under a function transform, or with a tensor subclass, the eager entry."""
        reason = transforms.active_transform()
        if reason is not None:
            return self.run_eagerly(reason)
        try:
            key = self.key(args)
        except transforms.RunsEagerly as why:
            return self.run_eagerly(str(why))
        if self.caching:    # the hit path, inlined (no call more than before the lock existed)
            for entry in self.entries.get(key, ()):
                if entry.prologue.after_key(*args):
                    self.stats.hits += 1
                    self.last_entry = entry
                    return entry
        with _COMPILE_LOCK:
            entry = self._find(key, args) or self.miss(key, args)
        self.last_entry = entry
        return entry

    def miss(self, key, args) -> Entry:
        """Compiles and stores a new entry, or past the cache limit returns the eager one."""
        self.stats.misses += 1
        if self.caching and self.history:
            recompiles.log_recompile(self.__name__, self.history, args, self.constant,
                                     self.module_change(key) or self.state_change(key))
            if (self.cache_limit is not None
                    and len(self.entries.get(key, ())) >= self.cache_limit):
                return self.past_limit()
        entry = self.compile(args)
        entry.key = key
        diagnostics.report_fallbacks(self, entry, self.warned_executors)
        diagnostics.report_unruled_ops(self, entry)
        if self.caching:
            self.entries.setdefault(key, []).append(entry)
            self.history.append(entry)
        return entry

    def module_change(self, key) -> str | None:
        """How the module tree differs from the nearest entry's (the fewest modules differing;
        the newest among equals), where no entry has this one; else which module attribute an
        entry of this key read has changed."""
        if self.module is None or any(e.key[:1] == key[:1] for e in self.history):
            return module_attributes.change(self.history, key, self.module)
        nearest = min(reversed(self.history), key=lambda e: modules.distance(e.key[0], key[0]))
        return modules.describe_change(self.module, nearest.key[0], key[0])

    def state_change(self, key) -> str | None:
        """How the grad mode or the autocast state differs from the newest entry's, where no
        entry was compiled in this call's."""
        at = 0 if self.module is None else 1     # a module's structure comes first
        state = key[at:at + 2]
        if any(e.key[at:at + 2] == state for e in self.history):
            return None
        before = self.history[-1].key[at:at + 2]
        if before[0] != state[0]:
            return f"grad mode changed {before[0]} -> {state[0]}"
        return (f"autocast state changed {autocast.describe(before[1])} -> "
                f"{autocast.describe(state[1])}")

    def compile_for_explain(self, args) -> Entry:
        """The entry these arguments would get, built without running a kernel, not cached."""
        with _COMPILE_LOCK:
            return self.compile(args, explaining=True)

    def _find(self, key, args) -> Entry | None:
        """The hit path's lookup, run again under the compile lock."""
        if self.caching:
            for entry in self.entries.get(key, ()):
                if entry.prologue.after_key(*args):
                    self.stats.hits += 1
                    return entry
        return None

    def past_limit(self) -> Entry:
        """The eager entry: the function itself, run by PyTorch without compiling."""
        self.stats.eager += 1
        if not self.warned_limit:
            self.warned_limit = True
            warnings.warn(f"ir.jit: {self.__name__} reached its cache limit ({self.cache_limit} "
                          "entries for one cache key); calls that miss the cache now run "
                          "eagerly on PyTorch without compiling (see the ir.recompiles log for "
                          "why each call missed; raise cache_limit in ir.jit, or use "
                          'cache="symbolic values")', stacklevel=5)
        recompiles.log.info("%s: past its cache limit of %d, running eagerly", self.__name__,
                            self.cache_limit)
        return self.eager_entry

    def run_eagerly(self, reason: str) -> Entry:
        """The eager entry for a call the traces cannot represent (`ir.transforms`), with a
        warning once per reason."""
        self.stats.eager += 1
        if reason not in self.warned_eager:
            self.warned_eager.add(reason)
            warnings.warn(f"ir.jit: {self.__name__} was {reason}; such calls run eagerly on "
                          "PyTorch without compiling, which gives eager's results",
                          stacklevel=4)
        self.last_entry = self.eager_entry
        return self.eager_entry

    def checked_lookup(self, args) -> Entry:
        """`lookup` that also runs the whole prologue of the entry it returns (not only what
        the key leaves to check) and fails loudly where the entry does not accept the call,
        a building call included: its guards were derived from these very arguments."""
        misses = self.stats.misses
        entry = type(self).lookup(self, args)
        if entry.prologue is not None and not entry.prologue(*args):     # None: eager
            built = "built" if self.stats.misses > misses else "hit"
            raise AssertionError(f"ir.jit: the cache entry this call {built} rejects its "
                                 f"arguments; its prologue:\n{entry.prologue}")
        return entry

    def trace(self, args, sources) -> TracedCall:
        """Runs fn on proxies of `args` under a new trace (module calls intercepted, module
        state watched); `sources`: the tensors fn captures (`capture_sources`)."""
        ctx = TraceContext(symbolic=self.cache_mode == "symbolic values",
                           taken=set(self.param_names),
                           capture_sources={id(t): name for name, (t, _) in sources.items()},
                           static_dims=self.static_dims, executors=tuple(self.executors))
        grad_mode = torch.is_grad_enabled()
        ctx.make_input = lambda name, tensor: input_proxy(name, tensor, ctx)
        try:
            with module_calls.intercepting(self.module) as calls, tracing(ctx), \
                    module_state.watched(self.module) as rebound:
                names = list(map(ctx.parameter_name, self.param_names))
                inputs = ctx.run(lambda: tuple((name, input_proxy(name, a, ctx))
                                               for name, a in zip(names, args)))
                outputs = self.call_fn([containers.rebuild(a, ctx.run(_resolved, value))
                                        for (_, value), a in zip(inputs, args)],
                                       getattr(args, "form", None))
                outputs, structure = containers.output_structure(ctx.run(ctx.captured, outputs))
                outputs, rebindings = ctx.run(self.state_outputs, ctx, inputs, outputs,
                                              rebound())
        finally:    # the mode fn left set is set by the computation (`grad_regions.regions`)
            final_grad_mode = torch.is_grad_enabled()
            torch.set_grad_enabled(grad_mode)
        return TracedCall(ctx, inputs, outputs, structure, rebindings, calls.reads, grad_mode,
                          final_grad_mode)

    def compile(self, args, explaining: bool = False) -> Entry:
        """Traces fn on `args` and builds their entry: the traces of the passes and executors,
        the prologue that checks the guards, and the computation that runs."""
        sources = capture_sources(self.fn)
        call = self.trace(args, sources)
        ctx, inputs, outputs, grad_mode = call.ctx, call.inputs, call.outputs, call.grad_mode
        captured = tuple((proxy.name, proxy) for proxy, _, _ in ctx.captures)
        # implicit inputs: read from their sources at every call
        readers = [_reader(sources, source, tensor) for _, tensor, source in ctx.captures]
        deep = [i for i, a in enumerate(args) if containers.is_deep(a)]
        arguments = _trace_arguments(deep, readers) if readers or deep else None
        args = _trace_arguments(deep, ())(args) + tuple(tensor for _, tensor, _ in ctx.captures)
        inputs += captured
        # requires_grad of the inputs matters where an op was traced in grad mode
        checks_requires_grad = grad_mode or ctx.grad_ops
        if not checks_requires_grad:
            for v in iter_vars(inputs):
                if isinstance(v, TensorProxy):
                    v.requires_grad = False
        ctx.canonicalize_shapes(v for v in iter_vars((inputs, [(e.args, e.outs) for e in ctx.eqns]))
                                if isinstance(v, TensorProxy))
        traced = Trace("computation", inputs, tuple(ctx.eqns), outputs, "Constructed by tracing")
        check_defined(traced)
        traces = [traced]
        trace = traced
        values = _paired_values(inputs, args)
        write_back.refuse_shared_written_inputs(ctx, values)
        cctx = CompileContext(values, ctx.symbolic, list(ctx.guards.values()), name=self.name,
                              explaining=explaining)
        found = {}      # in grad mode: {name: backward traces}, their host equations, the plan
        def differentiate(fused, before):   # one backward for the trace, or one per group
            if checks_requires_grad:
                fused, *found["backward"] = whole_backward.differentiate(
                    before, fused, ctx, cctx, lambda t, c: self.lower(t, c)[1:],
                    (grad_mode, call.final_grad_mode))
            return fused

        traces += self.lower(trace, cctx, differentiate)[1:]
        backward, backward_host, plan = found.get("backward", ({}, [], None))
        traces[-1] = grad_regions.regions(traces[-1], grad_mode, call.final_grad_mode)
        host = [e for e in traced.eqns if e.prim.kind == "host"] + backward_host
        prologue = build_prologue(inputs, cctx.guards, host, ctx.symbolic, grad_mode,
                                  keyed=len(inputs) - len(captured),
                                  requires_grad=checks_requires_grad)
        prologue = write_back.guarded_apart(prologue, ctx.mutations.written_inputs,
                                            lambda args: _paired_values(inputs, args))
        computation = _wrapped(compile_trace(traces[-1]), plan, call)
        if arguments is not None:
            prologue, computation = _taking_arguments(prologue, computation, arguments)
        prologue = module_attributes.guarded(prologue, call.reads, self.module)
        cctx.extra["module_attributes"] = call.reads
        return Entry(prologue, computation, traces, cctx.extra, cctx.guards,
                     ctx.specializations, backward, arguments=arguments, host=tuple(host))

    @staticmethod
    def state_outputs(ctx, inputs, outputs, rebound):
        """The trace's outputs once the state the traced code changed is written: each written
        input copied into (`ir.write_back.write_backs`), each rebound module slot an extra
        output. Without rebound slots: (outputs, None); else ((outputs, (written inputs, values
        of the slots)), the slots), which `module_state.rebinding` unpacks at every call."""
        values = [ctx.captured(value) for _, value in rebound]
        tensors = [v for v in iter_vars([value for _, value in inputs] +
                                        [proxy for proxy, _, _ in ctx.captures])
                   if isinstance(v, TensorProxy)]
        written = write_back.write_backs(ctx, tensors)
        outputs, values = write_back.final_outputs(ctx, (outputs, tuple(values)), written)
        if not rebound:
            if not written:
                return outputs, None
            return (outputs, (tuple(written.values()), ())), []
        return (outputs, (tuple(written.values()), tuple(values))), [slot for slot, _ in rebound]

    def lower(self, trace: Trace, cctx: CompileContext, differentiate=None) -> list[Trace]:
        """The traces of the passes and executors from a constructed trace (first) to the one
        that runs (last); `differentiate` rewrites the trace after the fusion passes."""
        traces = [trace]
        trace = passes.dce(passes.cse(trace), keep_host=True)
        traces.append(trace)
        for ex in self.executors:
            fused = ex.fusion_pass(trace, cctx)
            if fused is not trace:
                trace = fused
                traces.append(trace)
        if differentiate is not None:
            changed = differentiate(trace, traces[1])
            if changed is not trace:
                trace = changed
                traces.append(trace)
        trace = passes.sink_host_work(passes.dce(claim(trace, self.executors)))
        traces.append(trace.replace(provenance="Executed: " + trace.provenance))
        return traces


def jit(fn, *, executors=None, cache="constant values",
        cache_limit: int | None = DEFAULT_CACHE_LIMIT):
    """Traces `fn` on its first call (per cache entry) and runs the executors' code for it.

    fn: a function, a bound method, or an `nn.Module` (then a `JitModule` is returned: the
    module with its forward jitted, see `ir.modules`). executors: executor objects or registered
    names, in priority order; the torch executor is always appended. cache: "constant values",
    "symbolic values" or "no caching". cache_limit: entries per cache key (the arguments' types,
    dtypes and ranks, and in constant mode sizes and values) past which a miss runs `fn`
    eagerly, with a warning once (None: no limit).
    """
    if isinstance(fn, modules.JitModule):
        fn = fn._orig_mod
    if isinstance(fn, torch.nn.Module):
        modules.refuse_wrapper(fn)
        return modules.JitModule(fn, JitFunction(fn.forward, executors, cache, cache_limit))
    return JitFunction(fn, executors, cache, cache_limit)


def _registered(executor) -> bool:
    try:
        return get_executor(executor.name) is executor
    except (KeyError, ValueError):
        return False


def _jitted(jfn) -> JitFunction:
    if isinstance(jfn, modules.JitModule):
        jfn = jfn._jitted
    if not isinstance(jfn, JitFunction):
        raise TypeError(f"expected a function returned by ir.jit, got {type(jfn).__name__}")
    return jfn


def _last(jfn) -> Entry:
    entry = _jitted(jfn).last_entry
    if entry is None:
        raise RuntimeError("this jitted function has not been called yet")
    return entry


def last_traces(jfn) -> list[Trace]:
    """The computation traces of the last call, one per pass; the last one is what ran."""
    return list(_last(jfn).traces)


def last_backward_traces(jfn) -> dict[str, list[Trace]]:
    """The backward traces of the last call's cache entry: for each differentiable unit (by the
    name of its call in the forward trace), one trace per pass; the last one is what runs."""
    return {name: list(traces) for name, traces in _last(jfn).backward.items()}


def last_prologue(jfn) -> Prologue:
    """The prologue of the cache entry the last call used."""
    return _last(jfn).prologue


def cache_stats(jfn) -> CacheStats:
    return _jitted(jfn).stats


def thin(jfn, *args, **kwargs):
    """Runs the prologue once on these arguments and returns the selected entry's computation.

    The computation takes the same positional arguments as the function; it checks nothing: the
    caller takes over the prologue's job of passing only arguments that satisfy its guards."""
    jfn = _jitted(jfn)
    return jfn.lookup(jfn.bind(args, kwargs)).computation


def last_entry(jfn) -> Entry:
    return _last(jfn)


def explain(jfn, *args, **kwargs) -> diagnostics.Explanation:
    """Traces `jfn` (a function returned by `ir.jit`) on these arguments and builds the entry
    they would get, without running or timing a kernel and without caching it; returns what
    fuses, what is left to torch and why, what symbolic mode specialized, and the guards."""
    jfn = _jitted(jfn)
    return diagnostics.explanation(jfn, jfn.compile_for_explain(jfn.bind(args, kwargs)))
