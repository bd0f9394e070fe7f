"""Proxy values that stand in for tensors and integer sizes while a function is traced.

A `TensorProxy` carries metadata only (shape, dtype, device); every torch call on it reaches the
tracer through `__torch_function__` or a method of the proxy. An `IntProxy` is a symbolic integer
(a size, or an int argument in "symbolic values" mode) with a hint: its value in the call being
traced. Arithmetic on it records host prims; Python control flow on it specializes on the hint and
records a guard that the prologue checks.
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


class Var:
    """A named value of a trace: an input, or an output of one equation."""

    __slots__ = ("name",)

    def __repr__(self) -> str:
        return self.name


def _other_hint(x):
    return x.hint if isinstance(x, IntProxy) else x


class IntProxy(Var, torch.SymInt):
    """A symbolic integer; `hint` is its value in the traced call.

    It derives from `torch.SymInt` only so that PyTorch's argument parser accepts it where a
    number goes (`torch.where(c, x, n)`, `torch.full_like(x, n)`), which lets the call reach
    the tracer; it has none of SymInt's machinery (see `_refuse_symint_methods`)."""

    __slots__ = ("hint",)

    def __init__(self, name: str, hint: int):
        self.name = name
        self.hint = hint

    # Arithmetic records a host prim (constant-folded where it can be).
    def __add__(self, o): return active_trace().scalar_op("add", self, o)
    def __radd__(self, o): return active_trace().scalar_op("add", o, self)
    def __sub__(self, o): return active_trace().scalar_op("sub", self, o)
    def __rsub__(self, o): return active_trace().scalar_op("sub", o, self)
    def __mul__(self, o): return active_trace().scalar_op("mul", self, o)
    def __rmul__(self, o): return active_trace().scalar_op("mul", o, self)
    def __floordiv__(self, o): return active_trace().scalar_op("floordiv", self, o)
    def __rfloordiv__(self, o): return active_trace().scalar_op("floordiv", o, self)
    def __mod__(self, o): return active_trace().scalar_op("mod", self, o)
    def __rmod__(self, o): return active_trace().scalar_op("mod", o, self)
    def __neg__(self): return active_trace().scalar_op("sub", 0, self)
    def __pos__(self): return self

    # Comparisons specialize: they answer from the hint and guard the answer.
    def __eq__(self, o): return active_trace().compare("eq", self, o)
    def __ne__(self, o): return active_trace().compare("ne", self, o)
    def __lt__(self, o): return active_trace().compare("lt", self, o)
    def __le__(self, o): return active_trace().compare("le", self, o)
    def __gt__(self, o): return active_trace().compare("gt", self, o)
    def __ge__(self, o): return active_trace().compare("ge", self, o)
    __hash__ = Var.__hash__

    def __bool__(self): return active_trace().compare("ne", self, 0)

    def __index__(self) -> int:
        active_trace().compare("eq", self, self.hint)
        return self.hint

    __int__ = __index__

    def __truediv__(self, o):
        return self.__index__() / _other_hint(o)


def _refuse_symint_methods():
    """SymInt's methods that IntProxy does not define work on a `node` it has not: refuse them
    with a clear error instead."""
    def refuse(name):
        def method(self, *args):
            raise TypeError(f"{name} is not supported on the traced integer {self.name}")
        method.__name__ = name
        return method

    own = {k for c in IntProxy.__mro__ if c is not torch.SymInt for k in vars(c)}
    for name, value in vars(torch.SymInt).items():
        if callable(value) and name not in own and name not in ("__init__", "__init_subclass__"):
            setattr(IntProxy, name, refuse(name))


_refuse_symint_methods()


COMPARISONS = {"eq": operator.eq, "ne": operator.ne, "lt": operator.lt,
               "le": operator.le, "gt": operator.gt, "ge": operator.ge}
NEGATED = {"eq": "ne", "ne": "eq", "lt": "ge", "ge": "lt", "le": "gt", "gt": "le"}


def hint(x):
    """The concrete value of an int or IntProxy."""
    return x.hint if isinstance(x, IntProxy) else x


def same_size(a, b) -> bool:
    """True when a and b are the same size without specializing: one proxy (or two that a guard
    made equal, while tracing), or equal ints."""
    ctx = ACTIVE_TRACE.get()
    if ctx is not None:
        a, b = ctx.canonical(a), ctx.canonical(b)
    return a is b or (not isinstance(a, IntProxy) and not isinstance(b, IntProxy) and a == b)


class TensorProxy(Var):
    """Metadata of a traced tensor. Torch functions and methods on it are recorded as symbols."""

    __slots__ = ("shape", "dtype", "device", "requires_grad", "neg")

    def __init__(self, name, shape, dtype, device, requires_grad=False, neg=False):
        self.name = name
        self.shape = tuple(shape)
        self.dtype = dtype
        self.device = device
        self.requires_grad = requires_grad
        self.neg = neg      # an argument that is a view with the negative bit (`x.is_neg()`)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return active_trace().call_torch(func, args, kwargs or {})

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
        raise NotImplementedError("iterating over a traced tensor is not supported")

    def __bool__(self):
        raise NotImplementedError(
            f"the truth value of traced tensor {self.name} depends on data; data-dependent control "
            "flow is not supported")

    def __getattr__(self, name):
        return active_trace().tensor_method(self, name)

    def type_string(self) -> str:
        dims = ", ".join(str(s) for s in self.shape)
        return f"{DTYPE_ABBREV.get(self.dtype, str(self.dtype))}[{dims}]"


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


def _in_place(name):
    def method(self, *args):
        raise NotImplementedError(f"in-place tensor operation {name} is not supported by ir.jit "
                                  "(eager would mutate the tensor; write x = x + y instead)")
    method.__name__ = name
    return method


for _name in ("__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__", "__imod__",
              "__ipow__", "__iand__", "__ior__", "__ixor__", "__setitem__"):
    setattr(TensorProxy, _name, _in_place(_name))


def _dtype_abbrev():
    import torch
    return {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.float64: "f64",
            torch.int32: "i32", torch.int64: "i64", torch.int16: "i16", torch.int8: "i8",
            torch.uint8: "u8", torch.bool: "b8"}


DTYPE_ABBREV = _dtype_abbrev()

