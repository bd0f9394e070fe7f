"""Casts: the `convert_element_type` prim, its torch mapping (`x.float()`, `x.half()`, ...,
`type_as`; `.to(dtype)` is with the copies in `ir.ops.movement`) and its grad rule (the
gradient cast back to the input's dtype).
"""
from __future__ import annotations

import torch

from ir.ops.registry import METHODS, TORCH_SOURCE, define, grad_rule, register
from ir.ops.shapes import _same
from ir.ops.vjp import needs_grad
from ir.proxies import TensorProxy
from ir.recording import bind
from ir.trace import render

convert_element_type_p = define("convert_element_type", "elementwise",
                                lambda t, *, dtype: _same(t, dtype))
TORCH_SOURCE[convert_element_type_p] = lambda e: f"{e.args[0].name}.to({render(e.params['dtype'])})"


def convert(t, dtype):
    if not isinstance(t, TensorProxy) or t.dtype == dtype:
        return t
    return bind(convert_element_type_p, t, dtype=dtype)


_DTYPE_METHODS = {"float": torch.float32, "half": torch.float16, "bfloat16": torch.bfloat16,
                  "double": torch.float64, "int": torch.int32, "long": torch.int64,
                  "bool": torch.bool}
for _m, _dt in _DTYPE_METHODS.items():
    METHODS[_m] = (lambda dt: lambda x, memory_format=None: convert(x, dt))(_dt)


@register(torch.Tensor.type_as, methods=("type_as",))
def type_as(input, other):
    return convert(input, other.dtype)


@grad_rule(convert_element_type_p)
def _convert(eqn, cts):
    x = eqn.args[0]
    return [(x, convert(cts[0], x.dtype))] if needs_grad(x) else []
