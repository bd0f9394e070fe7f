"""Step 2 of lowering a group: the tile (`Tile`): the domain's sizes as index nodes, the
[ROWS, COLS] tiling with its row and column indices, their widths and bounds, the domain mask,
the outer indices, and optionally the loop over an outer dim inside each program (`Loop`) or
pair tiling (`triton_exec.codegen.pairs`), or the 2-D tile of a transpose, whose ROWS walk one
outer dim fastest (`row_axis`). Imports `kernel_types`, `analysis`, `pairs`, `row_axis` and
`writer` from this package.
"""
from __future__ import annotations

import dataclasses

from triton_exec import index, vectorize
from triton_exec.codegen import kernel_types
from triton_exec.codegen.analysis import Group
from triton_exec.codegen.kernel_types import known
from triton_exec.codegen.pairs import Pairs, pair_tiling
from triton_exec.codegen.row_axis import RowAxis
from triton_exec.codegen.writer import KernelWriter

LOOP_MAX_EXTENT = 65535         # the grid's second axis: one program per block at most


@dataclasses.dataclass
class Tile:
    """Step 2's result: the domain as index nodes and its [ROWS, COLS] tiling."""

    sizes: list                 # one index node per domain dim
    rows: index.Leaf            # flattened outer index of each lane
    cols: index.Leaf            # innermost index of each lane
    rows_extent: index.Expr
    cols_extent: index.Expr
    in_domain: index.Mask
    outer: list                 # index node of each outer dim, from `rows`
    points: list                # the output index of each lane: one, or one per pair element
    pairs: Pairs | None = None  # pair tiling
    tiled: tuple = ()           # the sizes the tile walks (pairs: the pairs' count innermost)
    loop: "Loop | None" = None  # the outer dim a loop inside each program walks, if any
    row_axis: RowAxis | None = None     # the outer dim ROWS walks fastest (a transpose's tile)
    reordered: bool = False     # ROWS walk the outer dims in another order than row-major

    @property
    def flat_rows(self):
        """The row-major index of each lane's outer indices in the domain: `rows` itself; when
        ROWS walk them `reordered`, the outer indices' row-major sum; or with a loop over dim L, `rows` with the loop's index put back in: the dims after L
        (A indices in all) stay where they are, those before L move by (E - 1) * A per step
        (E: L's extent); none when no dim before L is larger than 1."""
        if self.reordered:
            flat, scale = index.Const(0), index.Const(1)
            for d in range(len(self.sizes) - 2, -1, -1):
                flat = index.add(flat, index.mul(self.outer[d], scale))
                scale = index.mul(scale, self.sizes[d])
            return flat
        if self.loop is None:
            return self.rows
        before, after = index.Const(1), index.Const(1)
        for s in self.sizes[:self.loop.dim]:
            before = index.mul(before, s)
        for s in self.sizes[self.loop.dim + 1:-1]:
            after = index.mul(after, s)
        flat = index.add(self.rows, index.mul(self.loop.leaf, after))
        if before == index.Const(1):
            return flat
        return index.add(flat, index.mul(index.mul(index.floordiv(self.rows, after),
                                                   index.add(self.loop.extent, -1)), after))


@dataclasses.dataclass(frozen=True)
class Loop:
    """An outer dim of the domain walked by a loop inside each program (`for j in
    tl.static_range(LOOP)`): each program covers a block of LOOP consecutive indices of it, and
    ROWS walks the other outer dims. Code that does not depend on the loop's index (loads of
    inputs broadcast along that dim, their conversions, per-row index math) runs once per
    program, before the loop."""

    dim: int                    # in the tiled domain
    extent: index.Expr          # >= 2: a constant, or a runtime size (guarded below 2**16)
    leaf: index.Leaf            # the dim's index inside the loop (`o1 = o1_start + j`)
    start: str                  # the kernel name of the block's first index
    last: str | None = None     # a runtime extent's last index (the kernel name of E - 1)

    @property
    def index_line(self) -> str:
        """The line that sets the loop dim's index, the first of the loop's body: past a runtime
        extent, the last block repeats its last index."""
        if self.last is None:
            return f"{self.leaf.name} = {self.start} + j"
        return f"{self.leaf.name} = tl.minimum({self.start} + j, {self.last})"


def plan_tile(group: Group, w: KernelWriter, loop_dim: int | None = None,
              pairing_allowed: bool = True, row_dim: int | None = None) -> Tile:
    """Step 2: the domain's sizes as index nodes (runtime ones become parameters of `w`), the
    tile indices with their widths and bounds (over the lanes inside the domain: masks keep no
    other), the domain mask and the outer indices. With `loop_dim` (an outer dim), that dim is
    walked by a loop inside each program (see `Loop`) and `rows` by the other outer dims.
    `pairing_allowed`: False for a plan that needs the plain [ROWS, COLS] tile (`row_plan`).
    With `row_dim` (an outer dim, not the loop's), ROWS walk it fastest (see `RowAxis`); a
    runtime extent of it arrives divided by its guarded divisor, as the innermost's does."""
    domain = group.domain
    pairing = pair_tiling(group, w.vectorize) if pairing_allowed else None
    inner = len(domain) - (2 if pairing == "trailing" else 1)
    sizes = [w.size(s, inner=d in (inner, row_dim)) for d, s in enumerate(domain)]
    tiled = [vectorize.hint_of(s) for s in domain]
    if pairing == "trailing":
        sizes, tiled = sizes[:-1], tiled[:-1]
        full_extent = index.mul(sizes[-1], 2)
    elif pairing == "interleaved":
        full_extent = sizes[-1]
        sizes = sizes[:-1] + [index.floordiv(full_extent, 2)]
        tiled[-1] //= 2
    # dims of size 1 have index 0: rows walks the others
    row_dims = [d for d in range(len(sizes) - 1) if d != loop_dim and sizes[d] != index.Const(1)]
    reordered = row_dim in row_dims[:-1]
    if reordered:               # walked fastest: last
        row_dims = [d for d in row_dims if d != row_dim] + [row_dim]
    rows_extent = index.Const(1)
    for d in row_dims:
        rows_extent = index.mul(rows_extent, sizes[d])
    cols_extent = sizes[-1]
    rows = index.Leaf("rows", frozenset({"pid", "row_arange"}), 32 if group.narrow else 64, 1,
                      0, rows_extent.value if isinstance(rows_extent, index.Const) else None)
    cols = index.Leaf("cols", frozenset({"pid", "col_arange"}), 64 if group.wide_cols else 32,
                      1, 0, cols_extent.value if isinstance(cols_extent, index.Const)
                      else kernel_types.INT32_LIMIT // 2)
    outer, inner = [index.Const(0)] * (len(sizes) - 1), index.Const(1)
    for k in range(len(row_dims) - 1, -1, -1):
        d = row_dims[k]
        outer[d] = (index.mod(index.floordiv(rows, inner), sizes[d]) if k
                    else index.floordiv(rows, inner))
        inner = index.mul(inner, sizes[d])
    loop = None if loop_dim is None else _loop(group, w, sizes[loop_dim], loop_dim)
    if loop is not None:
        outer[loop_dim] = loop.leaf
    in_domain = index.Mask((index.Less(rows, rows_extent), index.Less(cols, cols_extent)))
    row_axis = (RowAxis(row_dim, outer[row_dim], sizes[row_dim], rows)
                if row_dim in row_dims and pairing is None else None)
    if pairing is None:
        return Tile(sizes, rows, cols, rows_extent, cols_extent, in_domain, outer,
                    [outer + [cols]], tiled=tuple(domain), loop=loop, row_axis=row_axis,
                    reordered=reordered)
    full_cols = index.Leaf("full_cols", frozenset({"pid", "fcol_arange"}), cols.bits, 1, 0,
                           cols.hi and 2 * cols.hi)
    pairs = Pairs(pairing == "trailing", cols_extent, full_cols, full_extent)
    points = ([outer + [cols, index.Const(j)] for j in (0, 1)] if pairs.trailing
              else [outer + [index.add(index.mul(cols, 2), j)] for j in (0, 1)])
    return Tile(sizes, rows, cols, rows_extent, cols_extent, in_domain, outer, points, pairs,
                tuple(tiled), loop)




def _loop(group: Group, w: KernelWriter, extent: index.Expr, dim: int) -> Loop:
    """The loop over outer dim `dim` of `extent` (a runtime one guarded below 2**16: the blocks
    go along the grid's second axis), its index named `o<dim>`."""
    if not known(group.domain[dim]):
        w.guards.append(("lt", group.domain[dim], LOOP_MAX_EXTENT + 1))
    name = w.names.take(f"o{dim}")
    leaf = index.Leaf(name, frozenset({"pid", "loop"}), 32 if group.narrow else 64, 1, 0,
                      extent.hi - 1 if extent.hi is not None else None)
    last = (None if isinstance(extent, index.Const)
            else w.render.expr(index.add(extent, -1), top=True))
    return Loop(dim, extent, leaf, w.names.take(f"{name}_start"), last)
