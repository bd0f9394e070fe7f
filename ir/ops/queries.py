"""Tensor queries: methods and attributes answered from the traced tensor's metadata at tracing
time (`size`, `numel`, `dim`, `stride`, `is_contiguous`, `dtype` properties, ...), guarded where
the answer is a layout's (`layout_meta`); they record no prim, or host prims for sizes.
"""
from __future__ import annotations

import torch

from ir.ops.movement import layout_meta
from ir.ops.registry import HANDLERS, METHODS, PROPERTIES, register
from ir.proxies import TensorProxy
from ir.recording import opaque, specialize

METHODS["size"] = TensorProxy.size
HANDLERS[torch.numel] = HANDLERS[torch.Tensor.numel] = TensorProxy.numel
METHODS["numel"] = METHODS["nelement"] = TensorProxy.numel
METHODS["dim"] = METHODS["ndimension"] = TensorProxy.dim
METHODS["element_size"] = lambda input: input.dtype.itemsize
METHODS["get_device"] = lambda input: input.device.index if input.device.type != "cpu" else -1
METHODS["is_signed"] = lambda input: input.dtype.is_signed
METHODS["is_conj"] = lambda input: False        # traced tensors are real
METHODS["is_same_size"] = lambda input, other: input.shape == other.shape
METHODS["dim_order"] = lambda input, **kwargs: layout_meta(input).dim_order(**kwargs)
HANDLERS[torch.Tensor.get_device] = METHODS["get_device"]
HANDLERS[torch.Tensor.is_signed] = METHODS["is_signed"]


@register(torch.is_floating_point, torch.Tensor.is_floating_point, methods=("is_floating_point",))
def is_floating_point(input):
    return input.dtype.is_floating_point


@register(torch.is_complex, torch.Tensor.is_complex, methods=("is_complex",))
def is_complex(input):
    return input.dtype.is_complex


@register(torch.Tensor.is_contiguous, methods=("is_contiguous",))
def is_contiguous(input, memory_format=torch.contiguous_format):
    return layout_meta(input).is_contiguous(memory_format=memory_format)


@register(torch.Tensor.stride, methods=("stride",))
def stride(input, dim=None):
    """Eager's strides of the traced tensor (`layout_meta`): of a contiguous one, products of its
    sizes (symbolic where they are); of another, its strides with its sizes specialized."""
    meta = layout_meta(input)
    if meta.is_contiguous():
        strides, step = [], 1
        for size in reversed(input.shape):
            strides.insert(0, step)
            step = step * size
    else:
        for size in input.shape:
            specialize(size)
        strides = list(meta.stride())
    return tuple(strides) if dim is None else strides[dim]


@register(torch.Tensor.type, methods=("type",))
def type_(input, dtype=None, non_blocking=False, **kwargs):
    """`x.type()`: the legacy type name ('torch.FloatTensor'); with a type, the conversion."""
    if dtype is not None:
        return opaque(torch.Tensor.type, (input, dtype, non_blocking), kwargs)
    name = torch.empty(0, dtype=input.dtype).type()
    return name if input.device.type == "cpu" else name.replace(
        "torch.", f"torch.{input.device.type}.", 1)


PROPERTIES["data"] = lambda input: opaque(torch.Tensor.detach, (input,), {})   # an alias
# Attributes that library code reads of a tensor, answered from the metadata (traced tensors are
# dense, strided and real: `ir.jit` refuses other arguments)
PROPERTIES.update({
    "layout": lambda input: torch.strided, "itemsize": lambda input: input.dtype.itemsize,
    "nbytes": lambda input: input.numel() * input.dtype.itemsize,
    "is_cpu": lambda input: input.device.type == "cpu",
    "is_meta": lambda input: input.device.type == "meta",
    **dict.fromkeys(("is_sparse", "is_quantized", "is_nested", "is_mkldnn", "is_sparse_csr"),
                    lambda input: False)})
