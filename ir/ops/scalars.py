"""Dtypes and Python numbers as eager uses them: an op's result dtype found by running the torch
function on meta tensors (`meta_dtype`, which also raises eager's error for invalid input), a
number operand of an elementwise op (`operand_scalar`) and a number stored into a tensor
(`stored_scalar`) converted as eager converts it.
"""
from __future__ import annotations

import torch

from ir.proxies import FloatProxy, IntProxy, TensorProxy, hint
from ir.recording import specialize


def _meta(x):
    if isinstance(x, TensorProxy):
        return torch.empty([hint(s) for s in x.shape], dtype=x.dtype, device="meta")
    return hint(x)


def meta_dtype(fn, *args, **kwargs):
    """Result dtype of fn on these arguments, found by running it on meta tensors."""
    return fn(*[_meta(a) for a in args], **{k: _meta(v) for k, v in kwargs.items()}).dtype


_NARROW_FLOATS = (torch.float16, torch.bfloat16)


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, IntProxy)


def operand_scalar(value, dtype, *, rounded: bool, comparison: bool = False):
    """A Python number operand of an elementwise op computing in `dtype`, as eager sees it: an
    int wraps to an integer dtype's range (`uint8 + (-1)` adds 255, `int8 > 128` compares with
    -128). With `rounded` (a binary op or a comparison: eager's TensorIterator converts the
    number to the op's dtype first), an fp16/bf16 op uses the number rounded to that dtype
    (through fp32, as eager converts it: `bf16 + 1/3` adds 0.333984375); a clamp bound is used
    unrounded, in fp32, as eager's clamp does. A runtime float (symbolic mode) stays one where
    the kernel computes with it (it rounds one of an fp16/bf16 op itself), and is specialized
    for an fp16/bf16 comparison."""
    if isinstance(value, FloatProxy):   # a runtime float: kept where the kernel computes with it
        if dtype == torch.float32 or (dtype.is_floating_point and not comparison):
            return value
        value = specialize(value)       # eager rounds it to the dtype: a constant
    if not _is_number(value) or isinstance(value, bool) or dtype == torch.bool:
        return value
    if not dtype.is_floating_point and isinstance(value, int):
        return torch.tensor(value, dtype=torch.int64).to(dtype).item()
    if rounded and dtype in _NARROW_FLOATS:
        return torch.tensor(float(value), dtype=torch.float32).to(dtype).item()
    if isinstance(value, float) and dtype in (torch.float32, *_NARROW_FLOATS):
        return torch.tensor(value, dtype=torch.float32).item()  # eager computes with its fp32
    return value


def stored_scalar(value, dtype, check):
    """A Python number that eager stores into a tensor of `dtype` (a fill, pad or where value),
    converted as eager converts it (1.7 -> 1 for int32, rounded for bf16). `check(value)` runs
    the op eagerly on a one-element tensor first, so a value eager refuses (300 into int8) raises
    eager's error here. A runtime float is specialized: eager converts it, or refuses it (1e308
    into float32), by its value."""
    if isinstance(value, FloatProxy):
        value = specialize(value)
    if not _is_number(value):
        return value
    check(value)
    if dtype == torch.bool:
        return bool(value)
    source = torch.float32 if isinstance(value, float) else torch.int64
    return torch.tensor(value, dtype=source).to(dtype).item()


def _one(dtype):
    return torch.zeros(1, dtype=dtype)
