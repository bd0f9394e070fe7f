"""The outputs' values at a tile's columns and their stores at a vector width (under pair tiling,
each output's two elements per lane interleaved in registers and stored on the full tile).
Imports `kernel_types`, `lowered`, `analysis`, `split_stores`, `tile_plan` and `writer` from this
package.
"""
from __future__ import annotations

import dataclasses
import math

from ir.proxies import same_shape, same_size
from triton_exec import index, vectorize
from triton_exec.codegen.analysis import Group
from triton_exec.codegen.kernel_types import TL_DTYPE, known
from triton_exec.codegen.lowered import Access
from triton_exec.codegen.split_stores import split_store_lines
from triton_exec.codegen.tile_plan import Tile
from triton_exec.codegen.writer import KernelWriter
from triton_exec.vectorize import Path


@dataclasses.dataclass
class Output:
    """One output of the group as its stores see it: its row index, the mask of the lanes inside
    it (an output smaller than the domain: a horizontal fusion) and, where that mask is along the
    loop's dim only, the header of the block that computes it (`if o1 < 2:`)."""

    number: int
    proxy: object
    rows: index.Expr
    inside: index.Mask
    block: str | None


@dataclasses.dataclass(frozen=True)
class Columns:
    """The columns one pass of the values covers: the tile's, or one column chunk's."""

    cols: object                # the column index (a chunk sharing another's: shifted)
    in_domain: index.Mask
    start: Path
    leaf: object = None         # the column leaf the writer reads (`KernelWriter.cols`)
    shape: str = "[ROWS, COLS]"
    comment: str = ""
    width: int | None = None    # an unmasked column chunk's width (`split_stores`)


def outputs_of(group: Group, tile: Tile, w: KernelWriter) -> list[Output]:
    """The group's outputs, those of the domain's shape first: a smaller one computed in a
    block reuses their values (a RoPE's cos and sin), never the other way round."""
    found = []
    for k, out in enumerate(group.outputs):
        rows, inside = _output_rows(group, tile, w, out)
        w.nested_atoms.update(inside.atoms)
        found.append(Output(k, out, rows, inside, _block(w, inside)))
    return sorted(found, key=lambda o: bool(o.inside.atoms))


def values_and_stores(group: Group, tile: Tile, w: KernelWriter, columns: Columns,
                      outputs: list[Output]) -> list:
    """The values of these outputs (none computed in a block) at `columns` and their store
    lines; under pair tiling, each output's two elements per lane interleaved and stored on the
    full tile. An output smaller than the domain is masked to its own lanes."""
    return [line for o in outputs for line in _store(group, tile, w, columns, o, o.inside)]


def blocks(group: Group, tile: Tile, w: KernelWriter, passes: list[Columns],
           outputs: list[Output]) -> None:
    """Each output computed in a block (`Output.block`): its values and stores over every pass of
    columns, run only where the loop's index is inside it (an iteration past GQA's k heads skips
    k's work). Names bound inside a block are not used after it."""
    for o in outputs:
        first, kept = len(w.lines), w.caches()
        for columns in passes:
            if columns.comment:
                w.lines.append(columns.comment)
            w.cols, w.shape = columns.leaf, columns.shape
            w.lines.extend(_store(group, tile, w, columns, o, index.TRUE))
        w.lines[first:] = [o.block] + ["    " + line for line in w.lines[first:]]
        w.restore(kept)


def _store(group: Group, tile: Tile, w: KernelWriter, columns: Columns, o: Output,
           inside: index.Mask) -> list[str]:
    """Output `o`'s values at `columns` (masked to `inside` too) and its store lines: one, or
    in a column chunk whose loads are wider than the store, the pieces of `split_stores`."""
    pairs, store_cols, extent = tile.pairs, columns.cols, tile.cols_extent
    in_domain = columns.in_domain & inside
    points = [tile.outer + [columns.cols]] if pairs is None else tile.points
    mask = w.mask_name(in_domain) if in_domain.atoms else None
    if pairs is not None:
        full_domain = index.Mask((index.Less(tile.rows, tile.rows_extent),
                                  index.Less(pairs.full_cols, pairs.full_extent)))
        mask = w.mask_name(full_domain & inside, "the full tile inside the domain", full=True)
        store_cols, extent = pairs.full_cols, pairs.full_extent
    out = o.proxy
    loads_from = len(w.accesses)
    values = [w.value(out, point if out.shape else [], in_domain, columns.start)
              for point in points]
    load_width = max((a.width for a in w.accesses[loads_from:] if a.kind == "load"), default=1)
    if pairs is None:
        val = values[0]
        held = w.narrow_tiles.get(val)
        # a narrow value stored as the kernel holds it: no fp32 round trip
        val = (held.name if held is not None and held.dtype == out.dtype and not held.negated
               else f"{val}.to({TL_DTYPE[out.dtype]})")
        inner_extent = group.domain[-1]
    else:
        val = w.let("v", f"tl.reshape(tl.join({values[0]}, {values[1]}), [ROWS, 2 * COLS])",
                    "the pairs' elements, interleaved") + f".to({TL_DTYPE[out.dtype]})"
        inner_extent = (group.domain[-1] if not pairs.trailing     # 2n: its divisor
                        else extent.value if isinstance(extent, index.Const)
                        else extent.divisor)
    width = math.gcd(vectorize.store_width(out.dtype.itemsize, inner_extent, w.vectorize),
                     columns.start.gcd)
    ptr = w.output_pointer(o.number)
    comment = f"{out.name}, {width} per access"
    # the chunk's first column: its leaf's first value (`cols_16 = 16 + tl.arange(...)`) plus
    # the shift of a chunk sharing another's leaf, or of one aligned to its loads
    start = index.add(store_cols, index.mul(columns.leaf, -1), columns.leaf.lo or 0) \
        if columns.width else None
    if (isinstance(start, index.Const) and width < load_width <= columns.width
            and all(_row_only(a) for a in in_domain.atoms)):
        rows_offset = w.render.expr(index.mul(o.rows, extent), top=True)
        lines = split_store_lines(w, ptr, rows_offset, start.value, columns.width, load_width,
                                  width, w.let("v", val), mask, comment)
        store = next(line for line in lines if line.endswith(comment))
    else:
        offset = w.tile_shaped(index.add(index.mul(o.rows, extent), store_cols),
                               pairs is not None)
        store = (f"tl.store({ptr} + {w.render.expr(offset, top=True)}, "
                 f"{val}" + (f", mask={mask}" if mask else "") + f")  # {comment}")
        lines = [store]
    w.accesses.append(Access("store", out.name, "output", width, len(w.accesses), line=store))
    w.itemsizes.append(out.dtype.itemsize)
    return lines


def _row_only(atom) -> bool:
    """Whether a mask atom varies along the rows only (it is a [ROWS, 1] tile)."""
    deps = atom.a.deps | atom.b.deps
    return "row_arange" in deps and "col_arange" not in deps


def _block(w: KernelWriter, inside: index.Mask) -> str | None:
    """`if o1 < n:`, the header of a block that computes and stores an output smaller than the
    domain along the loop's dim only (GQA's k along the heads: each iteration of the loop is one
    head), so an iteration past its heads skips its work; None where a mask is needed (it is
    smaller along a dim of the tile's rows)."""
    if not inside.atoms or w.loop is None or any(
            a.a != w.loop.leaf or a.negated or a.b.tiled for a in inside.atoms):
        return None
    return "if " + " & ".join(f"({w.render.atom(a)})" for a in inside.atoms) + ":"


def _output_rows(group: Group, tile: Tile, w: KernelWriter, out) -> tuple:
    """The row index of `out` (the row-major index of its outer indices) and the mask of the
    lanes inside it: the tile's own rows for an output of the domain's shape; for a smaller
    one (it nests in the domain: `triton_exec.horizontal`), its own rows, and `o_d < size`
    along each outer dim where it is smaller, guarded where a size is a runtime one (a value
    that does not depend on that dim, an input broadcast along it, is computed without it:
    `lower_movement`)."""
    outer = len(tile.outer)
    if out.shape and not same_size(out.shape[-1], group.domain[-1]):   # two sizes, one value
        w.guards.append(("eq", out.shape[-1], group.domain[-1]))
    if same_shape(out.shape[:outer], group.domain[:outer]):
        return tile.flat_rows, index.TRUE
    rows, atoms = index.Const(0), []
    for d, o in enumerate(tile.outer):
        size = tile.sizes[d]
        if not same_size(out.shape[d], group.domain[d]):
            size = w.size(out.shape[d])
            atoms.append(index.Less(o, size))
            if not known(out.shape[d]) or not known(group.domain[d]):
                w.guards.append(("le", out.shape[d], group.domain[d]))
        rows = index.add(index.mul(rows, size), o)
    return rows, index.Mask(tuple(atoms))
