"""The column plan: a group whose reductions are over a run of dims before the innermost
(`lower_reduction.over_columns`: the column sums of a weight's or a broadcast's gradient,
`g.sum((0, 1))` of a [B, T, C] value; a repeat's gradient over a middle dim) is tiled over the
kept columns (the dims after the run, flattened), one program per block of COLS columns and
index of the dims before the run; each reduction loops over the reduced rows in blocks of ROWS
(`lower_reduction.ReductionLoop`), computing its fused producers there, and the ops after the
reductions run on [1, COLS] tiles. The tile's domain is [reduced dims..., kept columns]; every
output has the kept shape (keepdim or not: `triton_exec.row_groups`), or copies a permute of a
value of that shape, stored at its index permuted, or has the reduced input's shape (softmax
over an outer dim), computed and stored by one more loop over the rows (`_store_rows`). One
program reduces every row of its columns, so the result does not depend on the launch
(deterministic, no atomics). Imports `analysis`, `assembly`,
`lowered`, `render`, `tile_plan`, `lower_reduction` and `kernel_types` from this package.
"""
from __future__ import annotations

import dataclasses
import math

from ir import TensorProxy
from ir.proxies import same_shape
from triton_exec import index, vectorize
from triton_exec.codegen import kernel_types
from triton_exec.codegen.analysis import accessed_vector, analyze
from triton_exec.codegen.assembly import kernel_writer, runtime_sizes
from triton_exec.codegen.kernel_types import TL_DTYPE, known
from triton_exec.codegen.lower_reduction import (
    ReductionLoop, columns_of, in_loop, over_columns, permuted_copy, split_columns)
from triton_exec.codegen.lowered import Access, Lowered, differing_shapes
from triton_exec.codegen.render import render_kernel
from triton_exec.codegen.tile_plan import plan_tile
from triton_exec.rules import rule_of
from triton_exec.vectorize import Path


def column_reductions(eqns) -> list:
    return [e for e in eqns if rule_of(e) is not None and rule_of(e).reduces and over_columns(e)]


def lower_columns(name, eqns, outputs, inputs, values, vectorize_enabled: bool) -> Lowered:
    """Lowers a group with reductions over a run of dims before the innermost (see the module)."""
    outer, reduced, kept = columns_of(column_reductions(eqns)[0])
    group = analyze(eqns, outputs, inputs, values)      # the reductions merge no dims
    width = _flat(kept)
    numel = math.prod(vectorize.hint_of(s) for s in outer + reduced) * vectorize.hint_of(width)
    group = dataclasses.replace(group, domain=(*reduced, width), wide_cols=False,
                                narrow=group.narrow and numel < kernel_types.INT32_LIMIT,
                                max_vector=accessed_vector(group, inputs))
    w = kernel_writer(group, vectorize_enabled)
    tile = plan_tile(group, w, pairing_allowed=False)
    w.reduction_loop, w.shape = ReductionLoop(tile, "rows"), "[1, COLS]"
    w.rows, w.cols = tile.rows, tile.cols
    w.column_leaves.append(tile.cols)
    outer_flat, outer_idx, outer_extent = _outer(w, outer, group.narrow)
    w.lines.append(f"# Tile [ROWS, COLS] of the rows and columns "
                   f"[{', '.join(w.describe(s) for s in tile.sizes)}]: each program reduces "
                   f"every row of its COLS columns, ROWS rows at a time"
                   + (f", for one index of the outer dims [{', '.join(map(str, outer))}]"
                      if outer else ""))
    w.lines.append("pid = tl.program_id(0)")
    w.lines.append("# VEC caps the contiguity Triton may assume along COLS, so the access width")
    arange = "tl.max_contiguous(tl.arange(0, COLS), VEC)[None, :]"
    if outer:
        w.lines.append(f"col_blocks = ({w.render.expr(tile.cols_extent, top=True)} + COLS - 1)"
                       f" // COLS")
        w.lines.append(f"{outer_flat.name} = pid // col_blocks"
                       + ("" if group.narrow else ".to(tl.int64)"))
        w.lines.append(f"cols = (pid % col_blocks) * COLS + {arange}")
    else:
        w.lines.append(f"cols = pid * COLS + {arange}")
    w.lines.append("# Values, as functions of the output index")
    in_cols = index.Mask((index.Less(tile.cols, tile.cols_extent),))
    for eqn in column_reductions(group.eqns):   # in trace order: one reads those before it
        w.value(eqn.out, outer_idx + split_columns(tile.cols, columns_of(eqn)[2]), in_cols,
                Path())
    stores = []
    for k, out in enumerate(group.outputs):
        if same_shape(out.shape, outer + reduced + kept):
            in_loop(w, w.reduction_loop, lambda k=k, out=out: w.lines.append(
                _store_rows(w, tile, out, k, (outer_flat, outer_idx), reduced, kept)))
        else:
            stores.append(_store(w, tile, out, k, (outer_flat, outer_idx), reduced, kept,
                                 in_cols))
    source = render_kernel(name, w, stores)
    return Lowered(name, source, w.params, w.accesses, w.guards, outer_extent,
                   tile.cols_extent, group.outputs, w.itemsizes, runtime_sizes(group, w),
                   sorted(set(w.contiguous_inputs)), vectorize_enabled, group.allocated,
                   group.domain, column_rows=tile.rows_extent,
                   output_shapes=differing_shapes(group.output_shapes, group.allocated))


def _outer(w, outer, narrow: bool):
    """(the program's flat outer index leaf, the index of each outer dim, their extent)."""
    sizes = [w.size(s) for s in outer]
    extent = index.Const(1)
    for s in sizes:
        extent = index.mul(extent, s)
    flat = index.Leaf(w.names.take("outer"), frozenset({"pid"}), 32 if narrow else 64, 1, 0,
                      extent.value if isinstance(extent, index.Const) else None)
    found, inner = [], index.Const(1)
    for k in range(len(sizes) - 1, -1, -1):
        q = index.floordiv(flat, inner) if inner != index.Const(1) else flat
        found.insert(0, index.mod(q, sizes[k]) if k else q)
        inner = index.mul(inner, sizes[k])
    return flat, found, extent


def _flat(kept):
    """The kept columns' count: one size (a runtime one too), or a product of constants
    (`lower_reduction` refuses several kept dims of runtime size)."""
    return kept[0] if len(kept) == 1 else math.prod(kept)


def _store(w, tile, out: TensorProxy, k: int, outer, reduced, kept, in_cols) -> str:
    """The store line of output k: the outer dims' index, then the kept columns (with or without
    the reduced dims as 1s between); an output that copies a permute of such a value
    (`lower_reduction.permuted_copy`) is stored at that value's index permuted."""
    flat, outer_idx = outer
    permuted = (permuted_copy(w.producers[id(out)], lambda v: w.producers.get(id(v)))
                if id(out) in w.producers else None)
    kept_value = out if permuted is None else permuted[0]
    ones = len(kept_value.shape) - len(outer_idx) - len(kept)
    assert ones in (0, len(reduced)) and all(
        known(s) and s == 1 for s in kept_value.shape[len(outer_idx):len(outer_idx) + ones]), \
        f"{out.name} is not of the kept shape"
    idx = outer_idx + [index.Const(0)] * ones + split_columns(tile.cols, kept)
    path = Path().through(kept[-1]) if len(kept) == 1 else Path().broken()
    if permuted is None:
        width = vectorize.store_width(out.dtype.itemsize, _flat(kept), w.vectorize)
        offset = tile.cols if not outer_idx else index.add(index.mul(flat, tile.cols_extent),
                                                           tile.cols)
    else:
        idx = [idx[p] for p in permuted[1]]
        offset, stride = index.Const(0), index.Const(1)
        for i, s in zip(reversed(idx), reversed(out.shape)):
            offset, stride = index.add(offset, index.mul(i, stride)), index.mul(stride, w.size(s))
        # wide where the columns walk the output's innermost dim, aligned (a merged kept dim's
        # `cols % n` is not carried by Triton: 1)
        width = 1
        if len(kept) == 1 and index.coefficient(offset, tile.cols) == 1:
            width = math.gcd(vectorize.store_width(out.dtype.itemsize, kept[0], w.vectorize),
                             index.aligned_run(offset, in_cols, tile.cols))
    return _store_line(w, out, k, offset, w.value(out, idx, in_cols, path), in_cols, width)


def _store_rows(w, tile, out: TensorProxy, k: int, outer, reduced, kept) -> str:
    """The store line of output k of the reduced value's shape (softmax over an outer dim), in
    the last loop over the rows: at the outer dims' index, the loop's rows and the columns."""
    flat, outer_idx = outer
    idx = outer_idx + list(tile.outer[:len(reduced)]) + split_columns(tile.cols, kept)
    path = Path().through(kept[-1]) if len(kept) == 1 else Path().broken()
    width = vectorize.store_width(out.dtype.itemsize, _flat(kept), w.vectorize)
    offset = index.add(index.mul(tile.rows, tile.cols_extent), tile.cols)
    if outer_idx:
        offset = index.add(index.mul(flat, index.mul(tile.rows_extent, tile.cols_extent)), offset)
    return _store_line(w, out, k, offset, w.value(out, idx, tile.in_domain, path),
                       tile.in_domain, width)


def _store_line(w, out: TensorProxy, k: int, offset, val: str, mask, width: int) -> str:
    """The line storing `val` as output k at `offset` under `mask`, recorded as an access."""
    access = Access("store", out.name, "output", width, len(w.accesses))
    w.accesses.append(access)
    w.itemsizes.append(out.dtype.itemsize)
    access.line = (f"tl.store({w.output_pointer(k)} + "
                   f"{w.render.expr(w.tile_shaped(offset), top=True)}, "
                   f"{val}.to({TL_DTYPE[out.dtype]}), mask={w.mask_name(mask)})  "
                   f"# {out.name}, {width} per access")
    return access.line
