"""Lowering one fusion group to a kernel, step by step: analyze (`analysis`) -> plan the columns
(`column_plan`), the loop (`loop_plan`), the rows of a transpose (`transpose_plan`) and the
tile (`tile_plan`) -> build the body (`assembly`) -> render (`render`), or by the row plan
(`row_plan`) or the column plan (`column_reduction`), into a `Lowered` (`lowered`), with pair
tiling (`pairs`)
without column chunks. The top of `triton_exec.codegen`: imports the steps, and is imported by
no file of the package but `__init__`.
"""
from __future__ import annotations

from triton_exec import vectorize
from triton_exec.codegen.analysis import analyze
from triton_exec.codegen.assembly import build, kernel_writer, runtime_sizes
from triton_exec.codegen.column_plan import plan_columns
from triton_exec.codegen.column_reduction import column_reductions, lower_columns
from triton_exec.codegen.loop_plan import plan_loop
from triton_exec.codegen.lowered import Lowered, LoopDim, differing_shapes
from triton_exec.codegen.pairs import pair_tiling
from triton_exec.codegen.render import render_kernel
from triton_exec.codegen.row_plan import lower_rows, reductions
from triton_exec.codegen.tile_plan import plan_tile
from triton_exec.codegen.transpose_plan import plan_rows


def lower_group(name, eqns, outputs, inputs, values, vectorize_enabled: bool) -> Lowered:
    """Lowers one fusion group (equations in trace order; `outputs` of one shape) to a kernel:
    analyze -> plan the tile -> build the expressions -> render. A group with reductions is
    lowered by the row plan (`row_plan`), over outer dims by the column plan (`column_reduction`)."""
    if column_reductions(eqns):
        return lower_columns(name, eqns, outputs, inputs, values, vectorize_enabled)
    if reductions(eqns):
        return lower_rows(name, eqns, outputs, inputs, values, vectorize_enabled)
    group = analyze(eqns, outputs, inputs, values)
    # pair tiling computes whole tiles; column chunks are for the other groups
    chunks = (None if pair_tiling(group, vectorize_enabled)
              else plan_columns(group, vectorize_enabled))
    loop_dim = plan_loop(group, vectorize_enabled, chunks)
    row_dim = plan_rows(group, vectorize_enabled, chunks, loop_dim)
    w = kernel_writer(group, vectorize_enabled)
    tile = plan_tile(group, w, loop_dim, row_dim=row_dim)
    stores = build(group, tile, w, chunks)
    source = render_kernel(name, w, stores)
    size_vars = runtime_sizes(group, w)
    return Lowered(name, source, w.params, w.accesses, w.guards, tile.rows_extent,
                   tile.cols_extent, group.outputs, w.itemsizes, size_vars,
                   sorted(set(w.contiguous_inputs)), vectorize_enabled, group.allocated,
                   tile.tiled, tuple(chunks or ()),
                   None if tile.loop is None else LoopDim(
                       tile.loop.dim, vectorize.hint_of(group.domain[tile.loop.dim]),
                       tile.loop.extent),
                   row_axis=None if tile.row_axis is None else tile.row_axis.dim,
                   output_shapes=differing_shapes(group.output_shapes, group.allocated))
