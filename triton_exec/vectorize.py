"""Resize-aware vectorization analysis: the widest safe access per load and store.

A vector of V elements along the innermost dim is one instruction when the V lanes are contiguous,
the address is aligned, and the mask is the same for all V lanes. Through a resize the mask changes
only at its boundaries, so V must divide every boundary met along the innermost dim. The code
generator walks each access path from the output index to a load, folding what it meets into a
`Path` with the functions below; `load_width` and `store_width` close the path.

Example (fp32, V <= 4): `F.pad(x, (2, 2))` of a [64] tensor: the load path meets the pad
boundaries 2 and 66, so V = gcd(4, 64, 2, 66) = 2 (8-byte loads); the [68] output store gets
gcd(4, 68) = 4.

Soundness: a cache entry's kernels run on every input its prologue accepts, so each fact a width
rests on is proved, per call, by a guard of the prologue or by Triton's own specialization:

- Lanes contiguous. The innermost stride is 1: guarded (`x_strides[-1] == 1`) for arguments;
  an input made by torch in the computation is read at contiguous strides when the launcher finds
  it contiguous, else by a kernel lowered for its layout whose guards (these, on its strides) the
  launcher checks (`strided.py`). Inner dims merged
  into one (`merge.py`) are the tensor only where the strides compose: guarded exactly,
  `x_strides[d] == x_strides[-1] * P` for each merged dim of size > 1 (a size-1 dim is never
  indexed). A step slice, broadcast, permute or reshape across the innermost dim gives V = 1.
- Address aligned. Base pointers: 16 bytes, guarded (`x.data_ptr() % 16 == 0`) and specialized
  by Triton's launch. Outer strides: divisible by their power-of-two divisor (guarded), passed
  divided by it (`x_stride0_div4`) and multiplied back by a constant, which is what Triton can
  prove. Outputs: allocated contiguous by the launcher.
- Widest for each call. A layout fact that alone narrows an access (a misaligned base, an
  innermost stride other than 1, an outer stride divisible by less than the width needs) has its
  class guarded exactly (`x.data_ptr() % 16 != 0`, `x_strides[1] != 1`, `x_strides[0] % 8 != 0`),
  so an input without it misses that entry and compiles its own, wider one. Not guarded so:
  inner dims that could merge on another input, and runtime sizes (symbolic mode) divisible by
  more than guarded; an entry may serve those narrower than a fresh compile would.
- Mask constant over V lanes. Every boundary met (pad widths, slice starts and stops, cat
  offsets, extents) is a multiple of V: a constant of the trace in "constant values" mode (the
  prologue checks every size and value exactly); in "symbolic values" mode a runtime size whose
  divisibility is guarded and that arrives as `n_div8`, multiplied back in the kernel.
- Ranges of values scaled back and int32 logical indices: the innermost extent is guarded below
  2**30 and every shape of the group below 2**31 elements where it is not constant; offsets are
  int64 products.
- The values read are the tensor's. A view with the negative bit (`z.conj().imag`) is resolved by a
  torch op of the trace before any kernel sees it; every argument a kernel reads is guarded
  `not x.is_neg()`, and every other tensor it reads, made by torch in the computation (perhaps a
  view of an argument), is resolved by the launcher (`strided.py`: `t.resolve_neg()`); the
  conjugate bit exists only on complex tensors, which are refused. Tuple items are paired with
  their proxies by position, so each access is analysed on its own input's layout.

With IR_CHECK_GUARDS=1 (as in the tests) every call also runs the whole prologue of the entry it
used, the building call included; tests/test_soundness.py checks each width of every cache hit
by arithmetic on the call's pointers and strides.
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
