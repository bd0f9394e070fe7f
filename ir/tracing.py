"""The tracer: records equations while a user function runs on proxies.

One `TraceContext` is active per thread during tracing (a ContextVar that proxies reach through
`ir.proxies.active_trace`). Torch calls on proxies arrive here (in-place forms through
`ir.functionalize`, which traces them as their functional ops) and are
dispatched (`ir.dispatch`) to the decompositions of the op families (`ir.ops`); anything without
one becomes an opaque symbol whose outputs' metadata come from running it on `meta` tensors.
Recording itself (prims, sizes, guards) is `ir.recording`.
"""
from __future__ import annotations

import contextlib
import dataclasses
import re

import torch
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree

from ir import autocast, containers, dispatch, functionalize
from ir.ops.registry import FACTORIES, HANDLERS, SHAPE_RULES
from ir.proxies import ACTIVE_TRACE, DataDependentError, IntProxy, TensorProxy
from ir.recording import compare, guard_key, scalar_op, scalar_unary, user_line


@dataclasses.dataclass
class TraceContext:
    symbolic: bool
    eqns: list = dataclasses.field(default_factory=list)
    guards: dict = dataclasses.field(default_factory=dict)   # guard_key -> (op, a, b), ordered
    counters: dict = dataclasses.field(default_factory=lambda: {"t": 0, "i": 0, "f": 0})
    aliases: dict = dataclasses.field(default_factory=dict)  # id(IntProxy) -> equal value
    definitions: dict = dataclasses.field(default_factory=dict)  # id(IntProxy) -> (op, a, b)
    scalar_results: dict = dataclasses.field(default_factory=dict)  # (op, a, b) -> IntProxy
    lower_bounds: dict = dataclasses.field(default_factory=dict)    # id(IntProxy) -> int
    taken: set = dataclasses.field(default_factory=set)     # names in use: never generated again
    ops: list = dataclasses.field(default_factory=list)     # the torch ops being traced, nested
    # (IntProxy, value, cause): sizes pinned to a value in symbolic mode, and what pinned them
    specializations: list = dataclasses.field(default_factory=list)
    # input name -> dims whose sizes are constants in symbolic mode (a caller fixes them: the
    # dims Dynamo holds static in a graph with symbolic sizes)
    static_dims: dict = dataclasses.field(default_factory=dict)

    def specialized(self, size, value, cause=None) -> None:
        self.specializations.append((size, value, cause or self.cause()))

    def cause(self) -> str:
        """What is being traced: the innermost torch op, else the user's line."""
        return self.ops[-1] if self.ops else user_line()

    @contextlib.contextmanager
    def op(self, name: str):
        self.ops.append(name)
        try:
            yield
        finally:
            self.ops.pop()
    input_layouts: dict = dataclasses.field(default_factory=dict)   # id(input) -> (strides, contiguous)
    depth: int = 0      # > 0 while tracer code runs: the torch calls made there are its own
    # tensors the traced code reads without receiving them (closures, globals): implicit inputs
    captures: list = dataclasses.field(default_factory=list)    # (proxy, tensor, source name)
    capture_sources: dict = dataclasses.field(default_factory=dict)  # id(tensor) -> source name
    make_input: object = None           # (name, tensor) -> the proxy of an input (set by the jit)
    grad_ops: bool = False              # whether an op was traced in grad mode (ir.grad_regions)
    # the values that in-place ops wrote, and the views that see them (`ir.functionalize`)
    mutations: object = dataclasses.field(default_factory=lambda: functionalize.Mutations())

    def add_guard(self, guard) -> None:
        self.guards.setdefault(guard_key(guard), guard)

    def canonicalize_shapes(self, tensors) -> None:
        """Rewrites each traced tensor's shape with the representatives of its sizes, once tracing
        is done: a size that a later guard made 1 (or equal to another size) reads so in every
        pass and lowering, e.g. as a broadcast dimension."""
        for t in tensors:
            t.shape = tuple(self.canonical(s) for s in t.shape)

    def new_name(self, prefix: str) -> str:
        """A fresh `t<n>` / `i<n>`, skipping the names of the function's parameters."""
        while True:
            n = self.counters[prefix]
            self.counters[prefix] = n + 1
            if f"{prefix}{n}" not in self.taken:
                return f"{prefix}{n}"

    def fresh_name(self, base: str) -> str:
        """base, or base with `_` appended until it names nothing else in the traces."""
        while base in self.taken or _generated(base):
            base += "_"
        self.taken.add(base)
        return base

    def parameter_name(self, name: str) -> str:
        """The trace's name for a parameter: its own, unless generated code needs that name."""
        return self.fresh_name(name + "_") if _generated(name) else name

    def canonical(self, x):
        """The representative of x among the sizes that guards made equal (an int where one is)."""
        while isinstance(x, IntProxy) and id(x) in self.aliases:
            x = self.aliases[id(x)]
        return x

    def run(self, fn, *args, **kwargs):
        """fn(*args, **kwargs) as tracer code: torch calls inside it are not the user's."""
        self.depth += 1
        try:
            return fn(*args, **kwargs)
        finally:
            self.depth -= 1

    def capture(self, tensor):
        """The implicit input standing for a tensor the traced code captured (read at each call
        from its source, and guarded like an argument)."""
        for proxy, captured, _ in self.captures:
            if captured is tensor:
                return proxy
        source = self.capture_sources.get(id(tensor))
        proxy = self.make_input(self.fresh_name(source or "captured"), tensor)
        self.captures.append((proxy, tensor, source))
        return proxy

    def captured(self, x):
        """x with every real tensor inside replaced by its implicit input."""
        return containers.tree_map(
            lambda v: self.capture(v) if type(v) in _REAL_TENSORS else v, x)

    # What proxies ask of the active trace (through `ir.proxies.active_trace()`).
    def scalar_op(self, op: str, a, b):
        return self.run(scalar_op, op, a, b)

    def scalar_unary(self, op: str, a):
        return self.run(scalar_unary, op, a)

    def compare(self, op: str, a, b) -> bool:
        return self.run(compare, op, a, b)

    # Torch calls of the traced code, made on the current values of the tensors it holds (in-place
    # forms traced functionally, see `ir.functionalize`).
    def call_torch(self, func, args, kwargs):
        args, kwargs = self.run(self.captured, (args, kwargs))
        args, kwargs = self.autocast(getattr(func, "__name__", ""), args, kwargs)
        return self.run(functionalize.call_torch, self, func, args, kwargs)

    def call_method(self, name: str, tensor, args):
        (tensor, *args), _ = self.autocast(name, (tensor, *self.run(self.captured, args)), {})
        return self.run(functionalize.call_method, self, name, tensor, tuple(args))

    def tensor_method(self, tensor, name: str):
        attribute = self.run(functionalize.tensor_method, self, tensor, name)
        if not callable(attribute):
            return attribute

        def method(*args, **kwargs):
            (self_, *args), kwargs = self.autocast(name, (tensor, *self.run(self.captured, args)),
                                                   self.run(self.captured, kwargs))
            bound = attribute if self_ is tensor else self.run(
                functionalize.tensor_method, self, self_, name)
            return bound(*args, **kwargs)
        return method

    def requires_grad(self, proxy) -> bool:
        """`proxy.requires_grad`: to the traced code, that of the value an in-place op last
        wrote into it (`ir.functionalize`); to the tracer, the proxy's own."""
        if self.depth:
            return proxy._requires_grad
        return functionalize.requires_grad_now(self, proxy)

    def reads_data(self, operation: str, func, args, kwargs) -> None:
        """Raises DataDependentError for Python code reading a traced tensor's data
        (`func(*args, **kwargs)`), naming the user's line and the operation; or eager's error
        where eager refuses the call whatever the data (`bool()` of several elements)."""
        self.run(dispatch.data_free_refusal, func, args, kwargs)
        tensor = next(x for x in pytree.tree_leaves((args, kwargs)) if isinstance(x, TensorProxy))
        raise DataDependentError(
            f"ir.jit: data-dependent Python at {user_line()}\n{operation} of the traced tensor "
            f"{tensor.name} reads its data, which is known only when the computation runs "
            "(data-dependent Python control flow cannot be traced). Use torch.compile(fn, "
            "backend=\"triton_exec\"), which runs such code eagerly between compiled graphs, or "
            "compute both branches with torch.where.")

    def tensor_attribute(self, tensor, name: str, args, kwargs):
        """`tensor.name(*args, **kwargs)`, or the property `tensor.name` (no arguments)."""
        attribute = self.tensor_method(tensor, name)
        return attribute(*args, **kwargs) if callable(attribute) else attribute

    def autocast(self, name: str, args, kwargs):
        """The user's call's arguments as eager's autocast casts them (`ir.autocast`), on the
        tensors' current values (`ir.functionalize`); calls made by tracer code are the user's
        op's own parts, which eager does not cast again. Unchanged (the same objects) where
        nothing is cast."""
        if self.depth or not torch._C._is_any_autocast_enabled():
            return args, kwargs
        if functionalize.is_in_place_name(name):
            return args, kwargs
        resolved = self.run(functionalize.resolve, self, (args, kwargs))
        cast = self.run(autocast.cast_arguments, name, *resolved)
        return (args, kwargs) if cast[0] is resolved[0] and cast[1] is resolved[1] else cast


_REAL_TENSORS = (torch.Tensor, torch.nn.Parameter)


class _TracingMode(TorchFunctionMode):
    """Catches the torch calls of traced code that no proxy dispatches: factories
    (`torch.ones(8, device=x.device)`, `torch.arange(n)`), modeled ops and in-place ops on
    captured tensors, which become implicit inputs (an in-place op never runs at tracing), and
    reads of the data of a captured tensor the code wrote (refused). Calls made by tracer code
    itself pass through."""

    def __init__(self, ctx):
        super().__init__()
        self.ctx = ctx

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.ctx.depth == 0:
            if func in FACTORIES or ((func in HANDLERS or func in SHAPE_RULES
                                      or functionalize.is_in_place(func, args, kwargs)) and any(
                    type(v) in _REAL_TENSORS for v in pytree.tree_flatten((args, kwargs))[0])):
                return self.ctx.call_torch(func, args, kwargs)
            functionalize.check_data_read(self.ctx, func, args)
        return func(*args, **kwargs)


# Globals of generated traces, prologues and launchers, which a parameter must not shadow.
_GENERATED_GLOBALS = frozenset({"torch", "F", "math", "Tensor", "prims"})


def _generated(name: str) -> bool:
    """Whether generated code may define `name` (a name ending in `_` never is)."""
    return (name in _GENERATED_GLOBALS or (name.startswith("opaque_") and not name.endswith("_"))
            or re.fullmatch(r"DEVICE_\d+|\w+_fusion_\d+", name) is not None)


@contextlib.contextmanager
def tracing(ctx: TraceContext):
    """Makes ctx the trace that proxies record into, in this thread (or asyncio task) only."""
    token = ACTIVE_TRACE.set(ctx)
    try:
        with _TracingMode(ctx):
            yield ctx
    finally:
        ACTIVE_TRACE.reset(token)
