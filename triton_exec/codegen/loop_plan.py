"""The loop over a broadcast dim: which outer dim of the domain a loop inside each program walks
(`plan_loop`), chosen by building the kernel with each candidate in a scratch writer and counting
the loads that run once per program, before the loop. Imports `analysis`, `assembly`,
`column_plan`, `render`, `tile_plan` and `pairs` from this package.
"""
from __future__ import annotations

import math

from ir import prims
from ir.proxies import same_size
from triton_exec import vectorize
from triton_exec.codegen.analysis import Group
from triton_exec.codegen.assembly import build, kernel_writer
from triton_exec.codegen.column_plan import PIECEWISE_MAX_COLS
from triton_exec.codegen.pairs import pair_tiling
from triton_exec.codegen.render import live_lines, loop_body
from triton_exec.codegen.tile_plan import LOOP_MAX_EXTENT, plan_tile


def plan_loop(group: Group, vectorize_enabled: bool, chunks=None) -> int | None:
    """The outer dim of the domain to walk by a loop inside each program (see `Loop`), or None:
    among the outer dims of extent >= 2 (a runtime one guarded below 2**16) along which the
    group broadcasts an input, and whose other outer dims leave rows enough for a tile that
    gives each thread of a warp a full vector (of the narrowest column chunk), the one whose
    loop reads the most inputs once per program, before it (found by building the kernel with
    each in a scratch writer), on a tie the one along which an output of a horizontal fusion is
    smaller (its work then skips the iterations past it: `stores.blocks`); None when no loop
    reads any load once."""
    if not any(e.prim is prims.broadcast_in_dim for e in group.eqns):
        return None
    outer = len(group.domain) - (2 if pair_tiling(group, vectorize_enabled) == "trailing"
                                 else 1)
    hints = [vectorize.hint_of(s) for s in group.domain]
    columns = (min(c.width for c in chunks) if chunks
               else min(hints[outer], PIECEWISE_MAX_COLS))
    rows_needed = -(-32 * group.max_vector // max(columns, 1))
    best, most = None, (0, False)
    for d, s in enumerate(group.domain[:outer]):
        if not 2 <= hints[d] <= LOOP_MAX_EXTENT or (
                math.prod(hints[:outer]) // hints[d] < rows_needed):
            continue
        w = kernel_writer(group, vectorize_enabled)
        tile = plan_tile(group, w, d)
        stores = build(group, tile, w, chunks)
        lines = live_lines(w.lines + stores)
        once = sum("tl.load(" in line for line in loop_body(lines, tile.loop)
                   if not line.startswith("    "))
        nested = any(not same_size(o.shape[d], s) for o in group.outputs)
        if once and (once, nested) > most:
            best, most = d, (once, nested)
    return best

