"""The row plan: a group holding reductions over the innermost dims (`lower_reduction`) is tiled
over the reductions' rows, one program per block of ROWS whole rows, COLS covering the row
(COLS >= the row's length, a constant, rounded up to a power of two by the launcher); a row
longer than `ROW_LIMIT` or of runtime length is walked in blocks of COLS columns, by a loop per
reduction and one for the outputs of the row's shape (`_looped_body`). The domain is [outer dims..., row length]: the values of the row's shape are computed
at every column, a reduction is a [ROWS, 1] tile the row's values broadcast against, and each
output is stored either at the row's columns (an output of the row's shape) or once per row
(an output of the reduced shape, from column 0). Every reduction of the group has the same
outer dims and row length, and the group's root has the row's shape or the reduced one
(`triton_exec.row_groups` keeps partitions so). Imports `analysis`, `assembly`, `lowered`,
`render`, `tile_plan`, `lower_reduction`, `row_loops` and `kernel_types` from this package.
"""
from __future__ import annotations

import dataclasses
import math

from ir import TensorProxy
from ir.proxies import same_shape
from triton_exec import index, vectorize
from triton_exec.codegen import kernel_types
from triton_exec.codegen.analysis import accessed_vector, analyze
from triton_exec.codegen.assembly import _outer_indices, _tile_indices, kernel_writer, runtime_sizes
from triton_exec.codegen.kernel_types import TL_DTYPE, known
from triton_exec.codegen.lower_reduction import (
    ROW_LIMIT, ReductionLoop, in_loop, reduce_in_one_loop, row_of, split_columns)
from triton_exec.codegen.row_loops import plan_loops
from triton_exec.codegen.lowered import Access, Lowered, differing_shapes
from triton_exec.codegen.render import render_kernel
from triton_exec.codegen.tile_plan import plan_tile
from triton_exec.rules import rule_of
from triton_exec.vectorize import Path


def reductions(eqns) -> list:
    return [e for e in eqns if rule_of(e) is not None and rule_of(e).reduces]


def lower_rows(name, eqns, outputs, inputs, values, vectorize_enabled: bool) -> Lowered:
    """Lowers a group with reductions: one program per block of whole rows (see the module)."""
    outer, reduced = row_of(reductions(eqns)[0])
    length = reduced[0] if len(reduced) == 1 else math.prod(reduced)   # several: constants
    group = analyze(eqns, outputs, inputs, values)      # the reductions merge no dims
    numel = math.prod(vectorize.hint_of(s) for s in outer) * vectorize.hint_of(length)
    group = dataclasses.replace(group, domain=(*outer, length), wide_cols=False,
                                narrow=group.narrow and numel < kernel_types.INT32_LIMIT,
                                max_vector=accessed_vector(group, inputs))
    w = kernel_writer(group, vectorize_enabled)
    tile = plan_tile(group, w, pairing_allowed=False)
    w.row = tile
    w.rows, w.cols = tile.rows, tile.cols
    w.column_leaves.append(tile.cols)
    looped = not known(length) or length > ROW_LIMIT
    if looped:
        stores = _looped_body(w, group, tile, reduced, length)
    else:
        w.lines.append(f"# Tile [ROWS, COLS] of the rows [{', '.join(w.describe(s) for s in tile.sizes)}]"
                       f": each program reduces ROWS whole rows, COLS covers the row")
        _tile_indices(group, tile, w, None)
        _outer_indices(tile, w)
        w.lines.append("# Values, as functions of the output index")
        stores = [_store(w, tile, out, k, reduced, length) for k, out in enumerate(group.outputs)]
    source = render_kernel(name, w, stores)
    size_vars = runtime_sizes(group, w)
    return Lowered(name, source, w.params, w.accesses, w.guards, tile.rows_extent,
                   tile.cols_extent, group.outputs, w.itemsizes, size_vars,
                   sorted(set(w.contiguous_inputs)), vectorize_enabled, group.allocated,
                   group.domain, whole_rows=True, row_loop=looped,
                   output_shapes=differing_shapes(group.output_shapes, group.allocated))


def _looped_body(w, group, tile, reduced, length) -> list:
    """A row longer than `ROW_LIMIT` or of runtime length: each reduction is a loop over the
    row's blocks of COLS columns (`lower_reduction.ReductionLoop`), lowered in trace order, and
    the outputs of the row's shape are computed and stored by one more loop; outside the loops
    the kernel holds [ROWS, 1] tiles. Returns the store lines of the reduced outputs."""
    w.reduction_loop, w.shape = ReductionLoop(tile, "cols"), "[ROWS, 1]"
    w.lines.append(f"# Tile [ROWS, COLS] of the rows [{', '.join(w.describe(s) for s in tile.sizes)}]"
                   f": each program reduces ROWS whole rows, in blocks of COLS columns")
    w.lines.append("pid = tl.program_id(0)")
    w.lines.append("rows = pid" + ("" if group.narrow else ".to(tl.int64)")
                   + " * ROWS + tl.arange(0, ROWS)[:, None]")
    _outer_indices(tile, w)
    w.lines.append("# Values, as functions of the output index")
    in_rows = index.Mask((index.Less(tile.rows, tile.rows_extent),))
    outer = tile.outer[:len(tile.sizes) - 1]
    for eqns, online in plan_loops(reductions(group.eqns), w.producers):
        reduce_in_one_loop(w, eqns, online, outer)
    stores = []
    for k, out in enumerate(group.outputs):
        if len(out.shape) == len(outer) + len(reduced) and same_shape(out.shape[len(outer):],
                                                                      reduced):
            in_loop(w, w.reduction_loop,
                    lambda k=k, out=out: w.lines.append(_store(w, tile, out, k, reduced, length)))
        else:
            stores.append(_store(w, tile, out, k, reduced, length, in_rows))
    return stores


def _store(w, tile, out: TensorProxy, k: int, reduced, length, in_rows=None) -> str:
    """The store line of output k: at the row's columns, or once per row (column 0; with
    `in_rows`, the rows' mask, outside a loop over the row's blocks: a [ROWS, 1] tile)."""
    full = len(out.shape) == len(tile.outer) + len(reduced) and same_shape(
        out.shape[len(tile.outer):], reduced)
    if full:
        cols = split_columns(tile.cols, reduced)
        idx, mask, extent = tile.outer + cols, tile.in_domain, tile.cols_extent
        width = vectorize.store_width(out.dtype.itemsize, length, w.vectorize)
        path = Path().through(length) if len(reduced) == 1 else Path().broken()
    else:
        kept = [s for s in out.shape if not (known(s) and s == 1)]
        assert len(kept) <= len(tile.outer), f"{out.name} has neither the row's shape nor the reduced one"
        idx = tile.outer[:len(out.shape)] + [index.Const(0)] * (len(out.shape) - len(tile.outer))
        mask = in_rows or index.Mask((index.Less(tile.rows, tile.rows_extent),
                                      index.Less(tile.cols, index.Const(1))))
        extent, width, path = 1, 1, Path().broken()
    val = w.value(out, idx if out.shape else [], tile.in_domain if full else mask, path)
    access = Access("store", out.name, "output", width, len(w.accesses), along_cols=full)
    w.accesses.append(access)
    w.itemsizes.append(out.dtype.itemsize)
    offset = w.tile_shaped(index.add(index.mul(tile.flat_rows, extent),
                                     tile.cols if full else index.Const(0)))
    access.line = (f"tl.store({w.output_pointer(k)} + {w.render.expr(offset, top=True)}, "
                   f"{val}.to({TL_DTYPE[out.dtype]}), mask={w.mask_name(mask)})  "
                   f"# {out.name}, {width} per access")
    return access.line
