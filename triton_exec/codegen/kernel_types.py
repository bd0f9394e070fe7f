"""What kernel source is made of: Triton's dtypes, the compute dtype of each tensor dtype, number
literals (-0.0 built from its bits), the int32 limit of indices, and whether a size of the trace
is a constant. The ground floor of `triton_exec.codegen`: imports `ir` and torch only.
"""
from __future__ import annotations

import math

import torch

from ir import IntProxy
from ir.trace import render

TL_DTYPE = {torch.float32: "tl.float32", torch.float16: "tl.float16",
            torch.bfloat16: "tl.bfloat16", torch.int32: "tl.int32", torch.int64: "tl.int64",
            torch.int16: "tl.int16", torch.int8: "tl.int8", torch.uint8: "tl.uint8",
            torch.bool: "tl.int1"}
INT32_LIMIT = 2 ** 31
ARANGES = frozenset({"row_arange", "col_arange", "fcol_arange"})   # what varies within a tile
COMPUTE_DTYPE = {torch.float16: torch.float32, torch.bfloat16: torch.float32}


def compute_dtype(dtype):
    """The dtype kernels compute `dtype`'s values in: fp32 for fp16/bf16, else itself."""
    return COMPUTE_DTYPE.get(dtype, dtype)


def negative_zero(shape: str) -> str:
    """A tile of -0.0 of `shape` ("[ROWS, COLS]")."""
    return f"tl.full({shape}, -2147483648, tl.int32).to(tl.float32, bitcast=True)"


def is_negative_zero(value) -> bool:
    """Whether a Python number is -0.0."""
    return isinstance(value, float) and value == 0 and math.copysign(1.0, value) < 0


def literal(value, shape: str) -> str:
    """Kernel source of a Python number. Triton makes every constant equal to 0 a +0.0, so -0.0
    is built from its bits (a tile of `shape`)."""
    if isinstance(value, bool):
        return str(int(value))
    if is_negative_zero(value):
        return negative_zero(shape)
    return render(value)


def known(x) -> bool:
    """Whether a size of the trace is a constant (not a runtime IntProxy)."""
    return not isinstance(x, IntProxy)


def is_constant(x, value: int) -> bool:
    """x is the constant `value` (an IntProxy is not: comparing it would specialize it)."""
    return not isinstance(x, IntProxy) and x == value

