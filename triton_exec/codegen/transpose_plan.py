"""The 2-D tile of a transpose: which outer dim of the domain ROWS walk fastest (`plan_rows`),
chosen by building the kernel in a scratch writer and reading the loads whose contiguous
innermost dim the columns do not walk: the outer dim most of their bytes are contiguous along
(NHWC read into NCHW: the channels). The tile is then wide along the rows for those loads and
along the columns for the stores (`row_axis`). Imports `analysis`, `assembly`, `pairs` and
`tile_plan` from this package.
"""
from __future__ import annotations

import math

from triton_exec import index, vectorize
from triton_exec.codegen.analysis import Group
from triton_exec.codegen.assembly import build, kernel_writer
from triton_exec.codegen.pairs import pair_tiling
from triton_exec.codegen.tile_plan import plan_tile

_VARYING = frozenset({"row_arange", "col_arange", "fcol_arange"})


def plan_rows(group: Group, vectorize_enabled: bool, chunks=None,
              loop_dim: int | None = None) -> int | None:
    """The outer dim (not the loop's, of extent >= 2) that ROWS walk fastest: the one along
    which the most bytes of loads are contiguous (a load whose innermost index is that dim's
    index, shifted by a value constant over the tile), ties to the inner dim, counting only
    tensors of at least half the domain's size (a per-channel scale broadcast over an NCHW
    tensor is read from cache: it does not reorder the rows); None when no load is, and for
    kernels in column chunks or pair tiling, or without vectorization."""
    if not vectorize_enabled or chunks or pair_tiling(group, vectorize_enabled):
        return None
    w = kernel_writer(group, vectorize_enabled)
    tile = plan_tile(group, w, loop_dim)
    build(group, tile, w)
    weights = {}
    domain_bytes = math.prod(vectorize.hint_of(s) for s in group.domain) * min(
        t.dtype.itemsize for t in group.outputs)
    for d, o in enumerate(tile.outer):
        if d == loop_dim or vectorize.hint_of(group.domain[d]) < 2:
            continue
        for inner, nbytes in w.across:
            if 2 * nbytes >= domain_bytes and not index.add(inner, index.mul(o, -1)).deps & _VARYING:
                weights[d] = weights.get(d, 0) + nbytes
    return max(weights, key=lambda d: (weights[d], d)) if weights else None
