"""Pair tiling: the plan for groups that interleave pairs along the innermost dim (the
interleaved RoPE). `pair_tiling` says whether a group is tiled by pairs; `Pairs` is the plan the
writer and the loads read (the full tile's column index, the widths Triton can prove, a pair
lane's mask carried to the full tile). Imports `kernel_types` and `analysis` from this package.
"""
from __future__ import annotations

import dataclasses

from ir import prims
from ir.proxies import same_size
from triton_exec import index, vectorize
from triton_exec.codegen.analysis import Group
from triton_exec.codegen.kernel_types import is_constant


@dataclasses.dataclass
class Pairs:
    """Pair tiling, for groups that interleave pairs along the innermost dim (`unflatten(-1,
    (-1, 2))`, `x[..., ::2]`, `torch.stack((a, b), -1).flatten(-2)`: the interleaved RoPE).

    Each lane of the [ROWS, COLS] tile computes both elements of one pair of the innermost
    output dim: `cols` walks the pairs, and the group's values are computed twice, for the
    element index 2 * cols + 0 and 2 * cols + 1 (`trailing`: the domain's innermost dim is the
    pair itself, indexed 0 and 1). The two results are interleaved in registers (`tl.join`) and
    stored as one contiguous tile [ROWS, 2 * COLS] walked by `full_cols`. A load at `2 * cols +
    c` is one contiguous load of the full tile split in registers (`tl.split`), so both elements
    come from one vector access; a load at `cols + c` (per pair: a RoPE's cos and sin) is a
    contiguous load of the pair tile. Widths are read from the index and the mask, as Triton
    proves them: contiguous along the column leaf, V dividing the offset's remainder and every
    mask boundary along it."""

    trailing: bool
    extent: index.Expr          # pairs along the innermost dim
    full_cols: index.Leaf       # index along the innermost dim of the full tile
    full_extent: index.Expr

    def gcd(self, inner, mask, leaf) -> int:
        """The largest power of two (up to the analysis' cap) that divides the innermost index
        less its column leaf and each mask boundary along that leaf (`index.aligned_run`)."""
        return min(index.aligned_run(inner, mask, leaf), vectorize.DIVISOR_CAP)

    def to_full(self, mask, cols):
        """The mask of a pair lane as a mask of both its elements on the full tile: an atom
        `cols + e < b` holds for the pair exactly when `full_cols + 2e < 2b` holds for each
        element (also for `>=`); None when an atom has another form."""
        atoms = []
        for atom in mask.atoms:
            if not (atom.a.deps | atom.b.deps) & {"col_arange"}:
                atoms.append(atom)
                continue
            if index.coefficient(atom.a, cols) != 1 or atom.b.tiled:
                return None
            e = index.add(atom.a, index.mul(cols, -1))
            atoms.append(index.Less(index.add(self.full_cols, index.mul(e, 2)),
                                    index.mul(atom.b, 2), atom.negated))
        return index.Mask(tuple(atoms))


def pair_tiling(group: Group, enabled: bool) -> str | None:
    """Whether the group is tiled by pairs (see `Pairs`): "trailing" when the domain ends in a
    dim of 2 (`torch.stack((a, b), -1)`) and every output has the domain's size along the dim
    before it (COLS walks that dim: an output smaller along it, a horizontal fusion's, nests
    along the rows only), "interleaved" when its innermost dim is even and the
    group splits it into pairs or merges pairs into it (a reshape from or to an innermost dim of
    2, a step-2 slice of the innermost dim); None otherwise."""
    domain = group.domain
    if not enabled:
        return None
    if (len(domain) >= 2 and is_constant(domain[-1], 2) and not is_constant(domain[-2], 1)
            and all(same_size(o.shape[-2], domain[-2]) for o in group.outputs)):
        return "trailing"
    if vectorize.hint_of(domain[-1]) % 2 or vectorize.hint_of(domain[-1]) < 4:
        return None
    for e in group.eqns:
        if e.prim is prims.reshape and e.args[0].ndim and e.out.ndim and (
                is_constant(e.args[0].shape[-1], 2) != is_constant(e.out.shape[-1], 2)):
            return "interleaved"
        if e.prim is prims.slice_ and e.args[0].ndim and e.args[3][-1] == 2:
            return "interleaved"
    return None


