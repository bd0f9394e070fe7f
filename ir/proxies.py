"""Proxy values that stand in for tensors and integer sizes while a function is traced.

A `TensorProxy` carries metadata only (shape, dtype, device); every torch call on it reaches the
tracer through `__torch_function__` or a method of the proxy. An `IntProxy` is a symbolic integer
(a size, or an int argument in "symbolic values" mode) with a hint: its value in the call being
traced; a `FloatProxy` a float the host computes from them. Arithmetic on them records host
prims; Python control flow on them specializes on the hint and records a guard that the prologue
checks.
"""
from __future__ import annotations

import operator
from contextvars import ContextVar

import torch


ACTIVE_TRACE: ContextVar = ContextVar("ir_active_trace", default=None)


def active_trace():
    """The trace being recorded in this thread (a `tracing.TraceContext`): the one hook through
    which proxies reach the tracer, so tracing state is per thread and this module never imports
    the tracer."""
    ctx = ACTIVE_TRACE.get()
    if ctx is None:
        raise RuntimeError("a traced value was used outside of ir.jit tracing")
    return ctx


def _user_code() -> bool:
    """Whether the traced function's own code runs now (not the tracer's, which runs deeper)."""
    ctx = ACTIVE_TRACE.get()
    return ctx is not None and not ctx.depth


class DataDependentError(NotImplementedError):
    """Python code read a traced tensor's data (`if mask.all():`, `bool(t)`, `t.item()`,
    `float(t)`): its value is known only when the computation runs, so no trace can branch on it."""


class Var:
    """A named value of a trace: an input, or an output of one equation (its `name`, a slot of
    each subclass: a TensorProxy's layout is a tensor's)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return self.name


class ScalarProxy(Var):
    """A symbolic number; `hint` is its value in the traced call. Python's number protocol on it
    records host prims (`i0 // 2`, `i0 ** -0.5` computed by the host at run time), comparisons
    answer from the hint and guard the answer, and forcing a value (`int()`, `float()`, `bool()`)
    guards it."""

    __slots__ = ("name", "hint")

    def __init__(self, name: str, hint):
        self.name = name
        self.hint = hint

    def __pos__(self): return self
    def __neg__(self): return active_trace().scalar_unary("neg", self)
    def __abs__(self): return active_trace().scalar_unary("abs", self)

    def __pow__(self, o, modulo=None):
        power = active_trace().scalar_op("pow", self, o)
        return power if modulo is None else power % modulo

    def __divmod__(self, o): return self // o, self % o
    def __rdivmod__(self, o): return o // self, o % self

    # Comparisons specialize: they answer from the hint and guard the answer.
    def __eq__(self, o): return active_trace().compare("eq", self, o)
    def __ne__(self, o): return active_trace().compare("ne", self, o)
    def __lt__(self, o): return active_trace().compare("lt", self, o)
    def __le__(self, o): return active_trace().compare("le", self, o)
    def __gt__(self, o): return active_trace().compare("gt", self, o)
    def __ge__(self, o): return active_trace().compare("ge", self, o)

    def __hash__(self):
        """Eager's hash of the number (`n in {64, 128}`, a dict keyed by a shape): specialized,
        as the lookup's `==` would be."""
        return hash(self.__float__() if isinstance(self, FloatProxy) else self.__index__())

    def __bool__(self): return active_trace().compare("ne", self, 0)

    # torch.sym_max / sym_min / sym_float, as on the numbers (a float result if either is one)
    def __sym_max__(self, o): return _promoted(self if self >= o else o, self, o)
    def __sym_min__(self, o): return _promoted(self if self <= o else o, self, o)
    def __sym_float__(self): return self * 1.0

    @property
    def node(self):
        """What torch's SymInt helpers read first (`torch.broadcast_shapes` asks
        `node.is_nested_int()`): a traced number is a plain one, not a nested int."""
        return _PLAIN_NUMBER_NODE

    def __float__(self) -> float:
        active_trace().compare("eq", self, self.hint)
        return float(self.hint)


def _promoted(x, a, b):
    return x * 1.0 if any(isinstance(v, (float, FloatProxy)) for v in (a, b)) else x


class _PlainNumberNode:
    """The `node` of a traced number: answers `is_nested_int()`; anything else of SymInt's
    machinery is refused with a clear error."""

    def is_nested_int(self) -> bool:
        return False

    def __getattr__(self, name):
        raise TypeError(f"SymInt's node.{name} is not supported on a number traced by ir.jit")


_PLAIN_NUMBER_NODE = _PlainNumberNode()


def _binary_op(op):
    def forward(self, o):
        return active_trace().scalar_op(op, self, o)

    def reverse(self, o):
        return active_trace().scalar_op(op, o, self)
    return forward, reverse


# Arithmetic records a host prim (constant-folded where it can be); the result is an IntProxy or
# a FloatProxy as Python's own result on the hints is an int or a float.
for _op in ("add", "sub", "mul", "truediv", "floordiv", "mod", "and", "or", "xor", "lshift",
            "rshift"):
    _forward, _reverse = _binary_op(_op)
    setattr(ScalarProxy, f"__{_op}__", _forward)
    setattr(ScalarProxy, f"__r{_op}__", _reverse)
ScalarProxy.__rpow__ = _binary_op("pow")[1]


class IntProxy(ScalarProxy, torch.SymInt):
    """A symbolic integer: a size, or an int argument in "symbolic values" mode.

    It derives from `torch.SymInt` only so that PyTorch's argument parser accepts it where a
    number goes (`torch.where(c, x, n)`, `torch.full_like(x, n)`), which lets the call reach
    the tracer; it has none of SymInt's machinery (see `_refuse_sym_methods`)."""

    __slots__ = ()

    @property
    def __class__(self):
        """`int` to the traced code, as `isinstance(n, int)` is True of eager's number (library
        code branches on it: transformers' `logits_to_keep`); IntProxy to the tracer."""
        return int if _user_code() else IntProxy

    def __invert__(self): return active_trace().scalar_unary("invert", self)

    def __index__(self) -> int:
        active_trace().compare("eq", self, self.hint)
        return self.hint

    __int__ = __index__

    def __trunc__(self): return self
    __floor__ = __ceil__ = __trunc__

    def bit_length(self) -> int:
        return self.__index__().bit_length()

    def __round__(self, ndigits=None):
        return self if ndigits is None or ndigits >= 0 else round(self.__index__(), ndigits)


class FloatProxy(ScalarProxy, torch.SymFloat):
    """A symbolic float computed on the host from sizes or int arguments (`n ** -0.5`); derives
    from `torch.SymFloat` for the same reason IntProxy derives from SymInt."""

    __slots__ = ()

    @property
    def __class__(self):
        """`float` to the traced code (`isinstance(scale, float)`), FloatProxy to the tracer."""
        return float if _user_code() else FloatProxy

    def __int__(self) -> int:
        return self.__trunc__().__index__()     # guards the int, not the float it came from

    def __trunc__(self): return active_trace().scalar_unary("trunc", self)
    def __floor__(self): return active_trace().scalar_unary("floor", self)
    def __ceil__(self): return active_trace().scalar_unary("ceil", self)

    def __round__(self, ndigits=None):
        if ndigits is None:
            return active_trace().scalar_unary("round", self)
        return round(self.__float__(), ndigits)


def _refuse_sym_methods(cls, base):
    """The methods of `base` (SymInt, SymFloat) that cls does not define work on a `node` it has
    not: refuse them with a clear error instead."""
    def refuse(name):
        def method(self, *args):
            raise TypeError(f"{name} is not supported on the traced number {self.name}")
        method.__name__ = name
        return method

    own = {k for c in cls.__mro__ if c is not base for k in vars(c)}
    for name, value in vars(base).items():
        if callable(value) and name not in own and name not in ("__init__", "__init_subclass__"):
            setattr(cls, name, refuse(name))


_refuse_sym_methods(IntProxy, torch.SymInt)
_refuse_sym_methods(FloatProxy, torch.SymFloat)


COMPARISONS = {"eq": operator.eq, "ne": operator.ne, "lt": operator.lt,
               "le": operator.le, "gt": operator.gt, "ge": operator.ge}
NEGATED = {"eq": "ne", "ne": "eq", "lt": "ge", "ge": "lt", "le": "gt", "gt": "le"}


def hint(x):
    """The concrete value of a number or ScalarProxy."""
    return x.hint if isinstance(x, ScalarProxy) else x


def same_size(a, b) -> bool:
    """True when a and b are the same size without specializing: one proxy (or two that a guard
    made equal, while tracing), or equal ints."""
    ctx = ACTIVE_TRACE.get()
    if ctx is not None:
        a, b = ctx.canonical(a), ctx.canonical(b)
    return a is b or (not isinstance(a, IntProxy) and not isinstance(b, IntProxy) and a == b)


def same_shape(a, b) -> bool:
    """`same_size` over two shapes: compares symbolic sizes through the trace's own relations,
    never with `==` (which on proxies would specialize, or fail outside tracing)."""
    return len(a) == len(b) and all(same_size(x, y) for x, y in zip(a, b))


class TensorProxy(Var, torch.Tensor):
    """Metadata of a traced tensor. Torch functions and methods on it are recorded as symbols.

    It is a `torch.Tensor` subclass (a wrapper without storage, on the meta device), so library
    code's `isinstance(t, torch.Tensor)` and `torch.is_tensor(t)` take eager's branch; its
    metadata are its own slots, which shadow the tensor's, and every torch function or method
    reaches the tracer through `__torch_function__` before any kernel could run."""

    __slots__ = ("name", "_size", "dtype", "device", "_requires_grad", "neg")

    @staticmethod
    def __new__(cls, name, shape, dtype, device, requires_grad=False, neg=False):
        return torch.Tensor._make_wrapper_subclass(cls, (), dtype=dtype, device="meta")

    def __init__(self, name, shape, dtype, device, requires_grad=False, neg=False):
        self.name = name
        self.shape = tuple(shape)
        self.dtype = dtype
        self.device = device
        self.requires_grad = requires_grad
        self.neg = neg      # an argument that is a view with the negative bit (`x.is_neg()`)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        name = _tensor_attribute(func)
        if name is not None and args and isinstance(args[0], TensorProxy):     # x.exp(), x.T
            return active_trace().tensor_attribute(args[0], name, args[1:], kwargs or {})
        return active_trace().call_torch(func, args, kwargs or {})

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        raise RuntimeError(f"ir.jit: {func} reached the dispatcher with a traced tensor")

    @property
    def shape(self) -> torch.Size:
        """A `torch.Size` as eager's (of ints and, in symbolic mode, IntProxy sizes, which
        torch.Size keeps as the SymInts they are), whatever sequence was assigned."""
        return self._size

    @shape.setter
    def shape(self, sizes) -> None:
        self._size = torch.Size(sizes)

    @property
    def requires_grad(self) -> bool:
        """Whether the value requires grad; to the traced code, its current value's (an
        in-place write of a value requiring grad makes a tensor require grad, as in eager)."""
        ctx = ACTIVE_TRACE.get()
        return self._requires_grad if ctx is None else ctx.requires_grad(self)

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        self._requires_grad = value

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def dim(self) -> int:
        return len(self.shape)

    def size(self, dim=None):
        if dim is None:
            return self.shape
        return self.shape[dim]

    def numel(self):
        n = 1
        for s in self.shape:
            n = n * s
        return n

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return operator.index(self.shape[0])

    def __iter__(self):
        """As eager: the tensor unbound along dim 0 (`a, b = x`; its size is specialized)."""
        if not self.shape:
            raise TypeError("iteration over a 0-d tensor")
        return iter(active_trace().call_method("unbind", self, ()))

    def __getattr__(self, name):
        return active_trace().tensor_method(self, name)

    def type_string(self) -> str:
        dims = ", ".join(str(s) for s in self.shape)
        return f"{DTYPE_ABBREV.get(self.dtype, str(self.dtype))}[{dims}]"


_TENSOR_ATTRIBUTES: dict = {}


def _tensor_attribute(func) -> str | None:
    """The name of the `torch.Tensor` method or property that `func` is (what
    `__torch_function__` receives for `x.exp()` or `x.T`), or None for a torch function."""
    if not _TENSOR_ATTRIBUTES:
        for name, value in [*vars(torch._C.TensorBase).items(), *vars(torch.Tensor).items()]:
            getter = getattr(value, "__get__", None) if not callable(value) else value
            if getter is not None:
                _TENSOR_ATTRIBUTES[getter] = name
    try:
        return _TENSOR_ATTRIBUTES.get(func)
    except TypeError:   # not hashable
        return None


def _dunder(torch_name):
    def method(self, *args):
        return active_trace().call_method(torch_name, self, args)
    method.__name__ = torch_name
    return method


for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
              "__rtruediv__", "__pow__", "__rpow__", "__neg__", "__abs__", "__getitem__", "__gt__",
              "__lt__", "__ge__", "__le__", "__eq__", "__ne__", "__matmul__", "__rmatmul__",
              "__and__", "__or__", "__xor__", "__invert__", "__floordiv__", "__mod__"):
    setattr(TensorProxy, _name, _dunder(_name))
TensorProxy.__hash__ = Var.__hash__


def _reads_data(name, operation):
    def method(self, *args, **kwargs):
        active_trace().reads_data(operation, getattr(torch.Tensor, name), (self, *args), kwargs)
    method.__name__ = name
    return method


# Python values of a tensor's data: refused while tracing (`DataDependentError`), after eager's
# own refusals that do not depend on the data (`bool()` of several elements)
for _name, _operation in (("__bool__", "bool()"), ("__float__", "float()"), ("__int__", "int()"),
                          ("__complex__", "complex()"), ("__index__", "an index"),
                          ("item", ".item()"),
                          ("tolist", ".tolist()"), ("numpy", ".numpy()")):
    setattr(TensorProxy, _name, _reads_data(_name, _operation))


# In-place operators: traced as their functional op, written into the tensor (`ir.functionalize`);
# they return the same proxy, which stands for the new value from then on.
for _name in ("__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__", "__imod__",
              "__ipow__", "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__",
              "__imatmul__", "__setitem__"):
    setattr(TensorProxy, _name, _dunder(_name))


def _dtype_abbrev():
    import torch
    return {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.float64: "f64",
            torch.int32: "i32", torch.int64: "i64", torch.int16: "i16", torch.int8: "i8",
            torch.uint8: "u8", torch.bool: "b8"}


DTYPE_ABBREV = _dtype_abbrev()

