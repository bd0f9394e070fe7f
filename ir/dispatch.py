"""Dispatch of the traced code's torch calls: a torch function, a tensor method or a tensor
attribute goes to its decomposition into prims (the tables `HANDLERS`, `METHODS` and
`PROPERTIES` of `ir.ops.registry`, filled by the op families), after eager's own checks ran on
meta tensors (`eager_checks`); anything without one is an opaque call (`ir.recording.opaque`).
In-place forms reach here through `ir.functionalize`, as the functional ops they stand for.
"""
from __future__ import annotations

import functools

import torch
from torch.utils import _pytree as pytree

from ir.ops.registry import HANDLERS, METHODS, PROPERTIES
from ir.proxies import TensorProxy
from ir.recording import _opaque_name, _stand_in, current, opaque

_NOT_CHECKED = frozenset({"to", "size", "type_as", "float", "half", "bfloat16", "double", "int",
                          "long", "bool", "view"})


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


def data_free_refusal(func, args, kwargs) -> None:
    """Raises eager's exception where func (which reads its tensors' data) refuses these
    arguments whatever their data: `bool()` or `.item()` of a tensor of several elements or none,
    an index from a float tensor. It runs on meta tensors, whose refusal to read data (an error
    naming meta, or no meta kernel) is not eager's."""
    try:
        func(*_stand_in(args, "meta"), **{k: _stand_in(v, "meta") for k, v in kwargs.items()})
    except NotImplementedError:
        pass
    except Exception as error:     # noqa: BLE001  (eager decides what is raised)
        if "meta" not in str(error):
            raise


# torch functions returning a Python value of their tensors' data
_READ_DATA = {torch.equal: "torch.equal", torch.allclose: "torch.allclose",
              torch.is_nonzero: "torch.is_nonzero", torch.Tensor.item: ".item()",
              torch.Tensor.tolist: ".tolist()", torch.Tensor.__bool__: "bool()",
              torch.Tensor.__float__: "float()", torch.Tensor.__int__: "int()"}


def _shapes_differ(func, args, kwargs) -> bool:
    """`torch.equal` of two tensors of different shapes: False whatever their data, as eager
    answers (in symbolic mode the comparison of sizes is guarded like any other)."""
    if func is not torch.equal or kwargs or len(args) != 2:
        return False
    a, b = args
    return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
            and tuple(a.shape) != tuple(b.shape))


def call_torch(func, args, kwargs):
    if _shapes_differ(func, args, kwargs):
        return False
    if func in _READ_DATA:
        current().reads_data(_READ_DATA[func], func, args, kwargs)
    handler = HANDLERS.get(func)
    with current().op(_opaque_name(func)):
        if handler is None:
            return opaque(func, args, kwargs)
        eager_checks(func, args, kwargs)
        return handler(*args, **kwargs)


def call_method(name: str, self, args):
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
    if name in PROPERTIES:
        with current().op(f"Tensor.{name}"):
            return PROPERTIES[name](self)
    if name in METHODS:
        return functools.partial(_method_call, name, METHODS[name], self)
    method = getattr(torch.Tensor, name, None)
    if method is None:
        raise AttributeError(f"traced tensor has no attribute {name!r}")
    if not callable(method):    # eager's tensors have it: not an AttributeError (`hasattr`)
        raise NotImplementedError(
            f"ir.jit: Tensor.{name} of a traced tensor is not supported (it is autograd's or "
            f"the storage's state at run time); run code reading it eagerly")
    return functools.partial(_opaque_method, name, method, self)


def _opaque_method(name, method, self, *args, **kwargs):
    with current().op(f"Tensor.{name}"):
        return opaque(method, (self, *args), kwargs)
