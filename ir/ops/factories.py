"""Factories: the `full` and `arange` prims and the torch functions that make a tensor from
numbers (`torch.full`, `zeros`, `ones`, `empty`, `*_like`, `arange`, `torch.tensor` of a number);
they have no gradient. `FACTORIES` lists the torch functions without a tensor argument that the
tracer intercepts (these, or opaque calls torch runs at each call: `torch.rand`, ...).
"""
from __future__ import annotations

import math

import torch

from ir.ops.registry import FACTORIES, HANDLERS, TORCH_SOURCE, define, register
from ir.ops.scalars import stored_scalar
from ir.ops.shapes import _sizes
from ir.proxies import IntProxy, hint
from ir.recording import bind, opaque, specialize
from ir.trace import render

def _arange_meta(start, end, step, *, dtype, device):
    if all(isinstance(v, (int, IntProxy)) for v in (start, end, step)):
        length = (end - start + step - (1 if step > 0 else -1)) // step
    else:       # float bounds (constants: the tracer pins them)
        length = math.ceil((end - start) / step)
    return [((max(length, 0) if not isinstance(length, IntProxy) else length,), dtype, device)]


arange_p = define("arange", "tensor", _arange_meta)
full_p = define("full", "tensor",
                lambda shape, *, value, dtype, device: [(tuple(shape), dtype, device)])
TORCH_SOURCE.update({
    full_p: lambda e: (f"torch.full({render(e.args[0])}, {render(e.params['value'])}, "
                       f"dtype={render(e.params['dtype'])}, "
                       f"device={render(e.params['device'])})"),
    arange_p: lambda e: (f"torch.arange({', '.join(render(a) for a in e.args)}, "
                         f"dtype={render(e.params['dtype'])}, device={render(e.params['device'])})"),
})


@register(torch.full)
def full(size, fill_value, *, dtype=None, device=None, layout=None, pin_memory=False,
         requires_grad=False):
    dtype = dtype or torch.full((), hint(fill_value)).dtype
    fill_value = stored_scalar(fill_value, dtype, lambda v: torch.full((1,), v, dtype=dtype))
    return bind(full_p, tuple(_sizes((size,))), value=fill_value, dtype=dtype,
                device=torch.device(device or "cpu"))


def _constant_factory(value):
    def factory(*size, dtype=None, device=None, layout=None, pin_memory=False,
                requires_grad=False):
        return full(_sizes(size), value, dtype=dtype or torch.get_default_dtype(), device=device)
    return factory


HANDLERS[torch.zeros] = _constant_factory(0)
HANDLERS[torch.ones] = _constant_factory(1)


def _like_factory(value):
    def factory(input, fill_value=None, *, dtype=None, device=None, layout=None,
                pin_memory=False, requires_grad=False, memory_format=None):
        fill = value if value is not None else fill_value
        return full(input.shape, fill, dtype=dtype or input.dtype, device=device or input.device)
    return factory


@register(torch.arange)
def arange(start, end=None, step=1, *, dtype=None, device=None, layout=None, pin_memory=False,
           requires_grad=False, out=None):
    if end is None:
        start, end = 0, start
    if hint(step) == 0:
        raise RuntimeError("step must be nonzero")
    integral = all(isinstance(hint(v), int) for v in (start, end, step))
    dtype = dtype or (torch.int64 if integral else torch.get_default_dtype())
    step = specialize(step)     # its sign decides the length: one entry per step
    if not integral:            # a float range's length has no size proxy: its bounds are pinned
        start, end = specialize(start), specialize(end)
    if (hint(end) - hint(start)) * step < 0:
        raise RuntimeError("upper bound and larger bound inconsistent with step sign")
    return bind(arange_p, start, end, step, dtype=dtype, device=torch.device(device or "cpu"))


@register(torch.tensor, torch.as_tensor, torch.scalar_tensor)
def tensor(data, *, dtype=None, device=None, requires_grad=False, pin_memory=False):
    """A Python number becomes a 0-d `full`; other data (lists) is a constant torch makes at
    each call."""
    if not isinstance(data, (int, float, bool, IntProxy)):
        return opaque(torch.tensor, (data,), {"dtype": dtype, "device": device})
    dtype = dtype or torch.tensor(hint(data)).dtype
    return full((), data, dtype=dtype, device=device)


HANDLERS[torch.empty] = _constant_factory(0)     # any value is eager's: zeros are one
# Torch functions with no tensor argument that traced code may call: the jit's torch function
# mode routes them here (handlers above, or opaque calls torch runs at each call).
FACTORIES.update({torch.full, torch.zeros, torch.ones, torch.empty, torch.arange, torch.tensor,
                  torch.as_tensor, torch.scalar_tensor, torch.rand, torch.randn, torch.randint,
                  torch.linspace, torch.eye})

HANDLERS[torch.zeros_like] = _like_factory(0)
HANDLERS[torch.ones_like] = _like_factory(1)
HANDLERS[torch.full_like] = _like_factory(None)
