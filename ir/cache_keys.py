"""The hashed part of a call's cache key: per argument its type, and for a tensor its dtype and
rank (its sizes too, and an int's or float's value, in "constant values" mode), containers item
by item; what `ir.jit` refuses (complex, sparse or subclassed tensors, unsupported objects)
raises `UnsupportedArgument` here, before anything is traced.
"""
from __future__ import annotations

import torch
from torch.utils import _pytree as pytree

from ir import containers, transforms
from ir.containers import Keywords

_SCALARS = (int, float, bool, str, type(None), torch.dtype, torch.device)


class UnsupportedArgument(TypeError):
    pass


def _tensor_key(t: torch.Tensor, constant: bool):
    if type(t) is not torch.Tensor and not isinstance(t, torch.nn.Parameter):
        raise transforms.subclass_reason(t)
    if t.is_complex() or t.layout is not torch.strided:
        raise UnsupportedArgument(f"a {t.dtype} {t.layout} tensor is not supported")
    if isinstance(t, torch.nn.Parameter):   # `isinstance(x, nn.Parameter)` is True in the trace
        return (t.dtype, t.shape if constant else t.ndim, torch.nn.Parameter)
    return (t.dtype, t.shape if constant else t.ndim)


def float_identity(x: float) -> str:
    """A float argument's identity for keys and guards: its bits (0.0 and -0.0 differ, and NaN is
    NaN), where == would merge 0.0 with -0.0 and miss NaN on every call."""
    return "nan" if x != x else x.hex()


def arg_key(a, constant: bool, nested: bool = False):
    """The hashed part of an argument's guards; raises UnsupportedArgument for what we refuse."""
    kind = type(a)
    if kind is torch.Tensor and a.layout is torch.strided:   # the common cases first, kept short
        return (a.dtype, a.shape if constant else a.ndim)
    if kind is int:
        return (int, a) if constant else int
    if isinstance(a, torch.Tensor):
        return _tensor_key(a, constant)
    if kind is float:       # a runtime value in symbolic mode
        return (float, float_identity(a)) if constant else float
    if isinstance(a, _SCALARS):
        return int if type(a) is int and not constant else (type(a), a if a == a else "nan")
    if nested or pytree.tree_is_leaf(a):
        raise UnsupportedArgument(f"{type(a).__name__} arguments"
                                  f"{' inside a container' if nested else ''} are not supported")
    if containers.is_shallow(a):    # a tuple, list or **kwargs of leaves: passed as it is
        if kind is Keywords:
            return (dict, tuple((k, arg_key(x, constant, True)) for k, x in a.items()))
        return (kind, tuple(arg_key(x, constant, True) for x in a))
    leaves, structure = pytree.tree_flatten(a)      # any other container: passed flat
    return (structure, tuple(arg_key(x, constant, True) for x in leaves))
