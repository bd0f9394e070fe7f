"""The narrow-float numerics of kernels: an fp16/bf16 value held as a tile of its dtype
(`NarrowTile`) beside its exact fp32 tile, rounding to nearest even as eager rounds every fp16/bf16
result, and whether a Python number is a value of a dtype. Functions take the kernel writer `w`
(duck-typed: `let`, `narrow_tiles`); imports `kernel_types` only from this package.
"""
from __future__ import annotations

import dataclasses
import math

import torch

from triton_exec.codegen.kernel_types import TL_DTYPE


@dataclasses.dataclass(frozen=True)
class NarrowTile:
    """A value of an fp16/bf16 tensor as a tile of that dtype: `name`, or minus it (`negated`:
    a negation is folded into the ops that use it, as `a - b` for `a + (-b)`). Every such value
    the kernel computes is held rounded to its dtype, as eager holds it; its fp32 tile, which
    the other ops use, is the same number."""

    name: str
    dtype: torch.dtype
    negated: bool = False


def held_tile(w, narrow: str, dtype, negated: bool = False) -> str:
    """The fp32 tile of the narrow tile `narrow` (exact), recorded as held in `dtype`."""
    wide = w.let("v", f"{narrow}.to(tl.float32)" + (" * -1.0" if negated else ""))
    w.narrow_tiles[wide] = NarrowTile(narrow, dtype, negated)
    return wide


def rounded_tile(w, src: str, dtype) -> str:
    """The fp32 tile `src` rounded to nearest even in the narrow float `dtype`, as eager rounds
    every fp16/bf16 result (an fp32 tile of the rounded values; `narrow.round`: Triton's
    interpreter truncates `.to(tl.bfloat16)`)."""
    narrow = w.let("v", f"narrow.round({src}, {TL_DTYPE[dtype]})",
                   f"rounded to {str(dtype).removeprefix('torch.')}")
    return held_tile(w, narrow, dtype)


def narrow_operand(w, wide: str, dtype) -> NarrowTile:
    """The narrow tile of a value held in `dtype` (rounding its fp32 tile, exactly, where the
    kernel has none)."""
    tile = w.narrow_tiles.get(wide)
    if tile is None or tile.dtype != dtype:
        tile = NarrowTile(w.let("v", f"narrow.round({wide}, {TL_DTYPE[dtype]})"), dtype)
        w.narrow_tiles[wide] = tile
    return tile


def representable(x, dtype) -> bool:
    """Whether a Python number is exactly a value of the float `dtype` (NaN and infinities are)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return False
    return math.isnan(x) or torch.tensor(float(x), dtype=torch.float64).to(dtype).item() == x

