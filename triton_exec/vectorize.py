"""Resize-aware vectorization analysis: the widest safe access per load and store.

A vector of V elements along the innermost dim is one instruction when the V lanes are contiguous,
the address is aligned, and the mask is the same for all V lanes. Through a resize the mask changes
only at its boundaries, so V must divide every boundary met along the innermost dim. The code
generator walks each access path from the output index to a load, folding what it meets into a
`Path` with the functions below; `load_width` and `store_width` close the path.

Example (fp32, V <= 4): `F.pad(x, (2, 2))` of a [64] tensor: the load path meets the pad
boundaries 2 and 66, so V = gcd(4, 64, 2, 66) = 2 (8-byte loads); the [68] output store gets
gcd(4, 68) = 4.
"""
from __future__ import annotations

import dataclasses
import math

from ir import IntProxy

ACCESS_BYTES = 16
DIVISOR_CAP = 16    # a runtime size is specialized on its power-of-two divisibility up to this


def pow2_divisor(n: int, cap: int = DIVISOR_CAP) -> int:
    """Largest power of two that divides n, capped (0 is divisible by anything)."""
    n = abs(int(n))
    if n == 0:
        return cap
    return min(n & -n, cap)


def hint_of(x) -> int:
    return x.hint if isinstance(x, IntProxy) else int(x)


def divisor_of(x, cap: int = DIVISOR_CAP) -> int:
    """What a boundary contributes: its own power-of-two divisibility; a runtime size contributes
    the divisibility of its value in this call, which the prologue then guards."""
    return pow2_divisor(x.hint if isinstance(x, IntProxy) else x, cap)


@dataclasses.dataclass(frozen=True)
class Path:
    """The state of one access path along the innermost dim: `gcd` of what was met so far, or
    `contiguous=False` once the innermost output index no longer walks the innermost input dim
    one element at a time (a strided slice, a broadcast, a permute or a reshape across it)."""

    gcd: int = DIVISOR_CAP
    contiguous: bool = True

    def through(self, *boundaries) -> "Path":
        g = self.gcd
        for b in boundaries:
            g = math.gcd(g, divisor_of(b))
        return Path(g, self.contiguous)

    def broken(self) -> "Path":
        return Path(1, False)


def load_width(path: Path, itemsize: int, inner_extent, inner_stride: int, outer_strides,
               data_ptr: int, enabled: bool = True) -> int:
    """V for a load of an input at the end of `path`."""
    if not enabled or not path.contiguous or inner_stride != 1:
        return 1
    if not isinstance(inner_extent, IntProxy) and inner_extent == 1:
        return 1
    if data_ptr % ACCESS_BYTES:     # Triton knows a pointer's alignment only as 16 bytes or not
        return 1
    g = math.gcd(path.gcd, ACCESS_BYTES // itemsize, divisor_of(inner_extent))
    for s in outer_strides:
        g = math.gcd(g, pow2_divisor(s))
    return max(g, 1)


def store_width(itemsize: int, inner_extent, enabled: bool = True) -> int:
    """V for the store of a contiguous output we allocate (aligned by the allocator)."""
    if not enabled or (not isinstance(inner_extent, IntProxy) and inner_extent == 1):
        return 1
    return max(math.gcd(ACCESS_BYTES // itemsize, divisor_of(inner_extent)), 1)
