"""The row axis of a 2-D tile for a transpose: when a load is contiguous along an outer dim of the
output (NHWC read into NCHW, `x.permute(0, 2, 1).contiguous()`), ROWS walks that dim fastest
(`rows % S`), so the tile is contiguous along the rows for those loads and along the columns for
the stores: Triton gives each access its own layout, wide along its axis, and converts between
them in registers and shared memory (Inductor tiles pointwise transposes in two dims for the
same reason). `RowAxis` is the plan the loads read: the width a load at an index can have along
the rows, read from the index and the mask as Triton proves them. Imports nothing from this
package.
"""
from __future__ import annotations

import dataclasses
import math

from triton_exec import index, vectorize

_VARYING = frozenset({"row_arange", "col_arange", "fcol_arange"})


@dataclasses.dataclass(frozen=True)
class RowAxis:
    """The outer dim `dim` of the domain that ROWS walks fastest: its index is `fast` (`rows %
    S`, or `rows` when it is the only row dim), of extent `extent`."""

    dim: int
    fast: index.Expr
    extent: index.Expr
    rows: index.Leaf

    def gcd(self, inner: index.Expr, rest: index.Expr, mask: index.Mask) -> int:
        """The largest power of two (up to the analysis' cap) Triton can prove as the width along
        the rows of a load whose innermost index (stride 1) is `inner` and whose other offset
        terms sum to `rest`, under `mask`; 0 when the load does not walk the rows one element
        at a time. Triton proves it when `inner` is the fast index shifted by a constant or a
        host value, every other term and mask atom that varies along the rows is constant over
        aligned runs of the fast dim (a division of `rows` by a multiple of S), and the atoms on
        the fast index are `fast + k < b` or `>= b`: V divides the shift, S, every divisor
        and every such bound."""
        shift = index.add(inner, index.mul(self.fast, -1))
        if shift.deps & _VARYING:
            return 0
        g = math.gcd(vectorize.DIVISOR_CAP, shift.divisor, self.extent.divisor,
                     self._constant_runs(rest))
        for atom in mask.atoms:
            if not (atom.a.deps | atom.b.deps) & {"row_arange"}:
                continue
            g = math.gcd(g, self._atom(atom))
        return g

    def _atom(self, atom: index.Less) -> int:
        """What a mask atom that varies along the rows allows (1: nothing wider)."""
        if atom.b.deps & _VARYING:
            return 1
        if atom.a == self.rows:                             # the domain's `rows < R`
            return atom.b.divisor
        shift = index.add(atom.a, index.mul(self.fast, -1))
        if not shift.deps & _VARYING:                       # `fast + k < b`
            return index.add(atom.b, index.mul(shift, -1)).divisor
        return 1 if atom.a.deps & {"col_arange"} else self._constant_runs(atom.a)

    def _constant_runs(self, e: index.Expr) -> int:
        """A power of two d such that e is constant over aligned runs of d rows, as Triton's
        analysis of `rows // B` sees it (B's divisor); 1 where e varies otherwise."""
        if not e.deps & {"row_arange"}:
            return index.DIVISOR_LIMIT
        if isinstance(e, index.FloorDiv) and e.a == self.rows:
            return e.b.divisor if not e.b.deps & _VARYING else 1
        if isinstance(e, index.Sum):
            return math.gcd(*(self._constant_runs(t) for t, _ in e.terms))
        if isinstance(e, (index.Prod, index.Mod)):
            return math.gcd(self._constant_runs(e.a), self._constant_runs(e.b))
        if isinstance(e, index.Wide):
            return self._constant_runs(e.a)
        return 1
