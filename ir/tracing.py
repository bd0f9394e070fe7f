"""The tracer: records equations while a user function runs on proxies.

One `TraceContext` is active per thread during tracing (a ContextVar that proxies reach through
`ir.proxies.active_trace`). Torch calls on proxies arrive here (in-place forms through
`ir.functionalize`, which traces them as their functional ops) and are
dispatched to the decompositions of `ir.torch_ops`; anything without one becomes an opaque symbol
whose outputs' metadata come from running it on `meta` tensors.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import linecache
import logging
import os
import re
import sys

import torch
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree

from ir import autocast, prims
from ir.grad_regions import output_requires_grad
from ir.proxies import (ACTIVE_TRACE, COMPARISONS, NEGATED, DataDependentError, FloatProxy,
                        IntProxy, ScalarProxy, TensorProxy, Var, active_trace, hint)
from ir.trace import Eqn


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
    # the executors of the jitted function: whether one fuses a composite op's decomposition
    # (`Executor.decomposes`), else the trace keeps eager's op
    executors: tuple = ()

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
    mutations: object = dataclasses.field(default_factory=lambda: _functionalize().Mutations())

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
        return pytree.tree_map(lambda v: self.capture(v) if type(v) in _REAL_TENSORS else v, x)

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
        return self.run(_functionalize().call_torch, self, func, args, kwargs)

    def call_method(self, name: str, tensor, args):
        (tensor, *args), _ = self.autocast(name, (tensor, *self.run(self.captured, args)), {})
        return self.run(_functionalize().call_method, self, name, tensor, tuple(args))

    def tensor_method(self, tensor, name: str):
        attribute = self.run(_functionalize().tensor_method, self, tensor, name)
        if not callable(attribute):
            return attribute

        def method(*args, **kwargs):
            (self_, *args), kwargs = self.autocast(name, (tensor, *self.run(self.captured, args)),
                                                   self.run(self.captured, kwargs))
            bound = attribute if self_ is tensor else self.run(
                _functionalize().tensor_method, self, self_, name)
            return bound(*args, **kwargs)
        return method

    def reads_data(self, operation: str, tensor) -> None:
        """Raises DataDependentError for Python code reading a traced tensor's data, naming the
        user's line and the operation."""
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
        functionalize = _functionalize()
        if functionalize.is_in_place_name(name):
            return args, kwargs
        resolved = self.run(functionalize.resolve, self, (args, kwargs))
        cast = self.run(autocast.cast_arguments, name, *resolved)
        return (args, kwargs) if cast[0] is resolved[0] and cast[1] is resolved[1] else cast


def _functionalize():
    from ir import functionalize
    return functionalize


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
            from ir.shape_rules import SHAPE_RULES
            from ir.torch_ops import FACTORIES, HANDLERS
            functionalize = _functionalize()
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


current = active_trace
_IR_DIR = os.path.dirname(os.path.abspath(__file__))
_SKIPPED = (_IR_DIR, os.path.dirname(os.path.abspath(torch.__file__)),
            os.path.dirname(os.path.abspath(contextlib.__file__)) + os.sep + "contextlib")


def user_line() -> str:
    """`file:line: source` of the innermost frame outside ir, torch and the standard library's
    contextlib: the user's code being traced."""
    frame = sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_SKIPPED):
        frame = frame.f_back
    if frame is None:
        return "unknown"
    path, line = frame.f_code.co_filename, frame.f_lineno
    source = linecache.getline(path, line).strip()
    return f"{os.path.basename(path)}:{line}" + (f": {source}" if source else "")


def new_tensor(shape, dtype, device, requires_grad=False) -> TensorProxy:
    return TensorProxy(current().new_name("t"), [canonical(s) for s in shape], dtype, device,
                       requires_grad and dtype.is_floating_point)


def _needs_grad(args) -> bool:
    """Whether an output computed from `args` now requires grad, as autograd would say (for a
    float output): grad mode is on (`ir.grad_regions`) and an input requires grad."""
    return output_requires_grad(pytree.tree_flatten(args)[0])


def canonical(x):
    """The representative of x among the sizes that guards made equal (an int where one is)."""
    ctx = ACTIVE_TRACE.get()
    return x if ctx is None else ctx.canonical(x)


def new_int(value: int) -> IntProxy:
    return IntProxy(current().new_name("i"), value)


def new_scalar(value) -> ScalarProxy:
    """An IntProxy or a FloatProxy holding `value` as its hint."""
    if isinstance(value, int):
        return new_int(int(value))
    if isinstance(value, float):
        return FloatProxy(current().new_name("f"), value)
    raise TypeError(f"ir.jit: a traced size computation gave {type(value).__name__} {value!r}; "
                    "only int and float results are supported")


def bind(prim, *args, **params):
    """Records `prim(*args, **params)` and returns its output proxy (or proxies)."""
    metas = prim.meta(*args, **params)
    grad = _needs_grad(args)
    outs = tuple(new_tensor(*m, requires_grad=grad) for m in metas)
    current().eqns.append(Eqn(prim, args, params, outs))
    return outs[0] if len(outs) == 1 else outs


def record(prim, args, params, outs):
    current().eqns.append(Eqn(prim, tuple(args), params, tuple(outs)))


# ---- integer arithmetic and specialization ---------------------------------------------------

_IDENTITIES = {"add": (0, 0), "sub": (None, 0), "mul": (1, 1), "floordiv": (None, 1)}


def _identity(x):
    return ("var", id(x)) if isinstance(x, ScalarProxy) else (type(x).__name__, x)


def _undo(op: str, a, b, definitions):
    """(x - y) + y -> x, y + (x - y) -> x, (x + y) - y -> x, (x + y) - x -> y; else None."""
    if op == "add":
        for x, y in ((a, b), (b, a)):
            d = definitions.get(id(x))
            if d is not None and d[0] == "sub" and d[2] is y:
                return d[1]
    if op == "sub":
        d = definitions.get(id(a))
        if d is not None and d[0] == "add":
            if d[2] is b:
                return d[1]
            if d[1] is b:
                return d[2]
    return None


def scalar_op(op: str, a, b):
    """a <op> b on numbers or ScalarProxies, as Python computes it: folds constants, integer
    identities and repeats, else records a host prim whose output is an IntProxy or a FloatProxy
    as the result on the hints is an int or a float (`i0 * 0.5`, `i0 ** -1` are floats)."""
    if not isinstance(a, _NUMBERS) or not isinstance(b, _NUMBERS):
        return NotImplemented
    a, b = canonical(a), canonical(b)
    fn = prims.SCALAR_OPS[op][1]
    if op in ("truediv", "floordiv", "mod") and isinstance(b, ScalarProxy):
        compare("ne", b, 0)     # the value is defined: the prologue checks this before it
    if op == "pow" and isinstance(b, IntProxy):
        compare("ge", b, 0)     # int ** int is an int exactly when the exponent is >= 0
    if not isinstance(a, ScalarProxy) and not isinstance(b, ScalarProxy):
        return fn(a, b)
    ctx = current()
    if all(isinstance(x, (int, IntProxy)) for x in (a, b)):
        folded = _fold_int(op, a, b, ctx)
        if folded is not None:
            return folded
    key = (op, _identity(a), _identity(b))
    if key in ctx.scalar_results:
        return ctx.scalar_results[key]
    out = new_scalar(fn(hint(a), hint(b)))
    record(prims.PRIMS["scalar_" + op], (a, b), {}, (out,))
    if isinstance(out, IntProxy):
        ctx.definitions[id(out)] = (op, a, b)
    ctx.scalar_results[key] = out
    return out


_NUMBERS = (int, float, ScalarProxy)


def _fold_int(op: str, a, b, ctx):
    """a <op> b on ints and IntProxies without a new prim (x + 0, x * 1, x - x, (x - y) + y,
    ...), or None."""
    left_id, right_id = _IDENTITIES.get(op, (None, None))
    if right_id is not None and not isinstance(b, IntProxy) and b == right_id:
        return a
    if left_id is not None and not isinstance(a, IntProxy) and a == left_id:
        return b
    if op == "mul" and any(not isinstance(x, IntProxy) and x == 0 for x in (a, b)):
        return 0
    if op == "sub" and a is b:
        return 0
    return _undo(op, a, b, ctx.definitions)


def scalar_unary(op: str, a):
    """<op> a (neg, abs, invert, floor, ceil, trunc, round) on a ScalarProxy: a host prim."""
    a = canonical(a)
    if not isinstance(a, ScalarProxy):
        return prims.SCALAR_UNARY[op][1](a)
    if op == "neg" and isinstance(a, IntProxy):
        return scalar_op("sub", 0, a)       # so that (0 - x) folds as subtractions do
    ctx = current()
    key = (op, _identity(a))
    if key not in ctx.scalar_results:
        out = new_scalar(prims.SCALAR_UNARY[op][1](a.hint))
        record(prims.PRIMS["scalar_" + op], (a,), {}, (out,))
        ctx.scalar_results[key] = out
    return ctx.scalar_results[key]


def compare(op: str, a, b) -> bool:
    """Answers a comparison from the hints and guards the answer, so the trace stays valid."""
    a, b = canonical(a), canonical(b)
    result = COMPARISONS[op](hint(a), hint(b))
    if a is b or not (isinstance(a, ScalarProxy) or isinstance(b, ScalarProxy)):
        return result
    ctx = current()
    nan = next((x for x in (a, b) if isinstance(x, FloatProxy) and x.hint != x.hint), None)
    if nan is not None:     # NaN compares false, so no guard can spell the negation: pin it
        ctx.add_guard(("ne", nan, nan))
        ctx.specialized(nan, nan.hint)
        return result
    guard = op if result else NEGATED[op]
    if guard == "eq" and any(isinstance(x, FloatProxy) for x in (a, b)):
        pinned = [x for x in (a, b) if not isinstance(x, ScalarProxy)]
        if pinned:          # a float forced to its value
            ctx.specialized(a if isinstance(a, FloatProxy) else b, pinned[0])
    if guard == "eq" and all(type(x) is int or isinstance(x, IntProxy) for x in (a, b)):
        # from now on the two are one size: the int, or the one the trace defines first (so
        # every use of the pair comes after its definition); else the right one
        if isinstance(a, IntProxy) and (not isinstance(b, IntProxy)
                                        or _definition(ctx, b) <= _definition(ctx, a)):
            ctx.aliases[id(a)] = b
        else:
            ctx.aliases[id(b)] = a
        if not isinstance(a, IntProxy) or not isinstance(b, IntProxy):
            ctx.specialized(*((a, b) if isinstance(a, IntProxy) else (b, a)))
    if not isinstance(a, ScalarProxy) or (isinstance(b, ScalarProxy) and b.name < a.name):
        a, b, guard = b, a, FLIPPED[guard]      # one spelling per guard: a proxy on the left
    if _implied(ctx, guard, a, b):
        return result
    ctx.add_guard((guard, a, b))
    if guard in ("ge", "gt") and isinstance(a, IntProxy) and type(b) is int:
        ctx.lower_bounds[id(a)] = max(ctx.lower_bounds.get(id(a), b), b + (guard == "gt"))
    return result


def _definition(ctx, size: IntProxy) -> int:
    """The position in the trace of the equation defining size (-1: an input, defined first)."""
    return next((i for i, eqn in enumerate(ctx.eqns) if any(o is size for o in eqn.outs)), -1)


def guard_key(guard) -> tuple:
    """A hashable key of an (op, a, b) guard by the identity of its values: a guard holding
    proxies must never be compared with ==, which would record a new guard."""
    op, a, b = guard
    return (op,) + tuple(("var", id(x)) if isinstance(x, Var) else ("value", repr(x))
                         for x in (a, b))


FLIPPED = {"lt": "gt", "gt": "lt", "le": "ge", "ge": "le", "eq": "eq", "ne": "ne"}


def _lower_bound(ctx, x):
    """A lower bound of x that the recorded guards imply, or None: an int is its own; a proxy has
    its guarded bound, or one derived through its definition (sums, products and floor divisions
    of non-negative values)."""
    if not isinstance(x, ScalarProxy):
        return x
    if id(x) in ctx.lower_bounds:
        return ctx.lower_bounds[id(x)]
    op, a, b = ctx.definitions.get(id(x), (None, None, None))
    if op not in ("add", "mul", "floordiv"):
        return None
    low_a, low_b = _lower_bound(ctx, a), _lower_bound(ctx, b)
    if low_a is None or low_b is None or low_a < 0 or low_b < 0:
        return None
    if op == "floordiv":    # a // b >= low_a // b for a constant b; only >= 0 for a runtime b
        if low_b <= 0:
            return None
        return 0 if isinstance(b, IntProxy) else low_a // b
    return low_a + low_b if op == "add" else low_a * low_b


def _implied(ctx, op, a, b) -> bool:
    """Whether the guards already recorded imply `a op b`: the same guard, a lower bound of a,
    or a = b // c with b >= 0 and c >= 1 (then a <= b)."""
    if guard_key((op, a, b)) in ctx.guards:
        return True
    if op == "le" and isinstance(b, IntProxy):
        definition = ctx.definitions.get(id(a))
        if (definition and definition[0] == "floordiv" and definition[1] is b
                and not isinstance(definition[2], IntProxy) and definition[2] >= 1):
            low = _lower_bound(ctx, b)
            return low is not None and low >= 0
    if isinstance(b, ScalarProxy):
        return False
    low = _lower_bound(ctx, a)
    if low is None:
        return False
    return (op == "ge" and low >= b) or (op == "gt" and low > b) or (op == "ne" and low > b)


def specialize(x):
    """The concrete value of x, guarded: IntProxies become ints, FloatProxies floats."""
    if isinstance(x, IntProxy):
        return x.__index__()
    return x.__float__() if isinstance(x, FloatProxy) else x


# ---- dispatch -----------------------------------------------------------------------------

_NOT_CHECKED = frozenset({"to", "size", "type_as", "float", "half", "bfloat16", "double", "int",
                          "long", "bool", "view"})


def _stand_in(x, device: str):
    """x with empty tensors on `device` for proxies and hints for sizes, inside tuples, lists and
    slices."""
    if isinstance(x, TensorProxy):
        return torch.empty([hint(s) for s in x.shape], dtype=x.dtype, device=device)
    if isinstance(x, ScalarProxy):
        return x.hint
    if isinstance(x, (tuple, list)):
        return type(x)(_stand_in(i, device) for i in x)
    if isinstance(x, slice):
        return slice(*(_stand_in(i, device) for i in (x.start, x.stop, x.step)))
    return x


def eager_checks(func, args, kwargs) -> None:
    """Runs func on meta tensors of the proxies' shapes (sizes at their hints, nothing guarded),
    so a call eager refuses (`x.t()` of a 3-d tensor, `narrow` past the end, clamp without
    bounds, ...) raises while tracing; where meta refuses, the call is repeated on empty CPU
    tensors, which raises eager's own exception (meta's type can differ)."""
    if func is None or getattr(func, "__name__", "") in _NOT_CHECKED:
        return
    if not any(isinstance(x, TensorProxy) for x in pytree.tree_flatten((args, kwargs))[0]):
        return

    def run(device):
        func(*_stand_in(args, device), **{k: _stand_in(v, device) for k, v in kwargs.items()})

    try:
        run("meta")
    except NotImplementedError:
        pass        # no meta kernel: the decomposition checks what it needs
    except Exception:    # noqa: BLE001  (eager decides what is raised)
        run("cpu")


# torch functions returning a Python value of their tensors' data
_READ_DATA = {torch.equal: "torch.equal", torch.allclose: "torch.allclose",
              torch.is_nonzero: "torch.is_nonzero", torch.Tensor.item: ".item()",
              torch.Tensor.tolist: ".tolist()", torch.Tensor.__bool__: "bool()",
              torch.Tensor.__float__: "float()", torch.Tensor.__int__: "int()"}


def call_torch(func, args, kwargs):
    from ir.torch_ops import HANDLERS
    if func in _READ_DATA:
        current().reads_data(_READ_DATA[func], next(
            x for x in pytree.tree_leaves((args, kwargs)) if isinstance(x, TensorProxy)))
    handler = HANDLERS.get(func)
    with current().op(_opaque_name(func)):
        if handler is None:
            return opaque(func, args, kwargs)
        eager_checks(func, args, kwargs)
        return handler(*args, **kwargs)


def call_method(name: str, self, args):
    from ir.torch_ops import METHODS
    handler = METHODS.get(name)
    with current().op(f"Tensor.{name}"):
        if handler is None:     # an operator the tracer does not model, e.g. `@`
            return opaque(getattr(torch.Tensor, name), (self, *args), {})
        eager_checks(getattr(torch.Tensor, name, None), (self, *args), {})
        return handler(self, *args)


def _method_call(name, handler, self, *args, **kwargs):
    with current().op(f"Tensor.{name}"):
        method = getattr(torch.Tensor, name, None)
        eager_checks(method, (self, *args), kwargs)
        return handler(self, *args, **kwargs)


def tensor_method(self, name: str):
    """The attribute `name` of a traced tensor: a method, or the value of a property (`x.T`)."""
    from ir.torch_ops import METHODS, PROPERTIES
    if name in PROPERTIES:
        with current().op(f"Tensor.{name}"):
            return PROPERTIES[name](self)
    if name in METHODS:
        return functools.partial(_method_call, name, METHODS[name], self)
    method = getattr(torch.Tensor, name, None)
    if method is None or not callable(method):
        raise AttributeError(f"traced tensor has no attribute {name!r}")
    return functools.partial(_opaque_method, name, method, self)


def _opaque_method(name, method, self, *args, **kwargs):
    with current().op(f"Tensor.{name}"):
        return opaque(method, (self, *args), kwargs)


# ---- opaque symbols ----------------------------------------------------------------------

def _to_meta(x):
    """x for a run on meta tensors: sizes and numbers at their values in this call, unguarded."""
    if isinstance(x, TensorProxy):
        return torch.empty([hint(s) for s in x.shape], dtype=x.dtype, device="meta")
    if isinstance(x, ScalarProxy):
        return x.hint
    if isinstance(x, torch.device):
        return torch.device("meta")
    return x


def _opaque_name(fn) -> str:
    name = getattr(fn, "__name__", "fn")
    for prefix, space in (("torch", torch), ("torch.Tensor", torch.Tensor),
                          ("torch.nn.functional", torch.nn.functional)):
        if getattr(space, name, None) is fn:
            return f"{prefix}.{name}"
    return f"opaque_{name}"


NO_RULE = "no symbolic shape rule"


def opaque(fn, args, kwargs):
    """Records a torch function the tracer does not model; torch runs it at call time. It runs
    on meta tensors here (the sizes at their values in this call), which raises eager's errors
    and gives the outputs' dtypes. In symbolic mode the outputs' shapes come from the op's shape
    rule (`ir.shape_rules`), as size expressions; an op without one specializes every size of its
    tensor arguments, each recorded as caused by the op having no rule. Where meta refuses the
    call, it is repeated on empty CPU tensors, which raises eager's own exception."""
    name = getattr(fn, "__name__", repr(fn))
    if name.endswith("_") and not name.endswith("__"):
        raise NotImplementedError(f"in-place torch function {name} is not supported by ir.jit")
    flat, spec = pytree.tree_flatten((args, kwargs))
    devices = [x.device for x in flat if isinstance(x, TensorProxy)]
    devices += [torch.device(x) for x in flat if isinstance(x, torch.device)]
    meta_args, meta_kwargs = pytree.tree_unflatten([_to_meta(x) for x in flat], spec)
    try:
        result = fn(*meta_args, **meta_kwargs)
    except Exception as e:      # noqa: BLE001  (eager decides what is raised)
        if not isinstance(e, NotImplementedError):
            fn(*_stand_in(args, "cpu"), **{k: _stand_in(v, "cpu") for k, v in kwargs.items()})
        raise NotImplementedError(        # meta refuses what eager accepts
            f"ir.jit cannot trace {name}: running it on meta tensors failed ({e})") from e
    results = list(result) if isinstance(result, (tuple, list)) else [result]
    if not all(isinstance(r, torch.Tensor) for r in results):
        raise NotImplementedError(
            f"ir.jit cannot trace {name}: it returns {type(result).__name__}, not tensors")
    shapes = _symbolic_shapes(fn, args, kwargs, results) if current().symbolic else None
    if shapes is None:
        shapes = [r.shape for r in results]
        with current().op(f"{_opaque_name(fn)} ({NO_RULE})"):
            for x in flat:
                if isinstance(x, TensorProxy):
                    for s in x.shape:
                        specialize(s)
                elif isinstance(x, IntProxy):
                    specialize(x)
    device = devices[0] if devices else torch.device("cpu")
    outs = [new_tensor(shape, r.dtype, device, _needs_grad(flat))
            for r, shape in zip(results, shapes)]
    # ints the rule left symbolic (a size in `normalized_shape`, `roll`'s shifts) are passed at
    # run time; floats are specialized (eager's kernels may round them by value)
    args = pytree.tree_unflatten([canonical(x) if isinstance(x, IntProxy) else specialize(x)
                                  for x in flat], spec)
    record(prims.opaque, args[0], {"fn": fn, "fn_name": _opaque_name(fn), "kwargs": args[1],
                                   "sequence": isinstance(result, (tuple, list))}, outs)
    if isinstance(result, (tuple, list)):
        return list(outs) if isinstance(result, list) else type(result)(outs)
    return outs[0]


def _symbolic_shapes(fn, args, kwargs, results):
    """The outputs' shapes by fn's shape rule, or None where it has none (or one that disagrees
    with the meta run, a defect in the rule: logged, and the sizes are specialized)."""
    from ir.shape_rules import output_shapes
    shapes = output_shapes(fn, args, kwargs)
    if shapes is None:
        return None
    shapes = [tuple(canonical(s) for s in shape) for shape in shapes]
    if [[hint(s) for s in shape] for shape in shapes] != [list(r.shape) for r in results]:
        logging.getLogger("ir.recompiles").warning(
            "the shape rule of %s gave %s where torch gives %s; its sizes are specialized",
            _opaque_name(fn), [tuple(hint(s) for s in shape) for shape in shapes],
            [tuple(r.shape) for r in results])
        return None
    return shapes
