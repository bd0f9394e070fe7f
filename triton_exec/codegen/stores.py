"""The outputs' values at a tile's columns and their stores at a vector width (under pair tiling,
each output's two elements per lane interleaved in registers and stored on the full tile).
Imports `kernel_types`, `lowered`, `analysis`, `tile_plan` and `writer` from this package.
"""
from __future__ import annotations

import math

from ir.proxies import same_shape, same_size
from triton_exec import index, vectorize
from triton_exec.codegen.analysis import Group
from triton_exec.codegen.kernel_types import TL_DTYPE, known
from triton_exec.codegen.lowered import Access
from triton_exec.codegen.tile_plan import Tile
from triton_exec.codegen.writer import KernelWriter
from triton_exec.vectorize import Path


def values_and_stores(group: Group, tile: Tile, w: KernelWriter, cols, in_domain,
                      start: Path) -> list:
    """The outputs' values at columns `cols` (under `in_domain`) and their store lines; under
    pair tiling, each output's two elements per lane interleaved and stored on the full tile."""
    points = [tile.outer + [cols]] if tile.pairs is None else tile.points
    mask = w.mask_name(in_domain) if in_domain.atoms else None
    pairs, store_cols, extent = tile.pairs, cols, tile.cols_extent
    if pairs is not None:
        full_domain = index.Mask((index.Less(tile.rows, tile.rows_extent),
                                  index.Less(pairs.full_cols, pairs.full_extent)))
        mask = w.mask_name(full_domain, "the full tile inside the domain", full=True)
        store_cols, extent = pairs.full_cols, pairs.full_extent
    stores = []
    for k, out in enumerate(group.outputs):
        rows, inside = _output_rows(group, tile, w, out)
        w.nested_atoms.update(inside.atoms)
        in_output, out_mask = in_domain, mask
        if inside.atoms:     # an output smaller than the domain (a horizontal fusion)
            in_output = in_domain & inside
            out_mask = (w.mask_name(in_output) if pairs is None
                        else w.mask_name(full_domain & inside, full=True))
        values = [w.value(out, point if out.shape else [], in_output, start) for point in points]
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
                         start.gcd)
        ptr = w.output_pointer(k)
        offset = w.tile_shaped(index.add(index.mul(rows, extent), store_cols),
                               pairs is not None)
        stores.append(f"tl.store({ptr} + {w.render.expr(offset, top=True)}, "
                      f"{val}" + (f", mask={out_mask}" if out_mask else "")
                      + f")  # {out.name}, {width} per access")
        w.accesses.append(Access("store", out.name, "output", width, len(w.accesses),
                                 line=stores[-1]))
        w.itemsizes.append(out.dtype.itemsize)
    return stores


def _output_rows(group: Group, tile: Tile, w: KernelWriter, out) -> tuple:
    """The row index of `out` (the row-major index of its outer indices) and the mask of the
    lanes inside it: the tile's own rows for an output of the domain's shape; for a smaller
    one (it nests in the domain: `triton_exec.horizontal`), its own rows, and `o_d < size`
    along each outer dim where it is smaller, guarded where a size is a runtime one (a value
    that does not depend on that dim, an input broadcast along it, is computed without it:
    `lower_movement`)."""
    outer = len(tile.outer)
    if not same_size(out.shape[-1], group.domain[-1]):     # two runtime sizes of one value
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
