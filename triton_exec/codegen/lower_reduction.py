"""The lowering of reductions (`sum`, `amax`, `amin`). Over the innermost dims, in a row plan
(`row_plan`: one program per block of whole rows, COLS covering the row) a reduction is a
reduction (`tl.reduce`) of its input's tile along COLS, a [ROWS, 1] tile that broadcasts
against the row. Over a run of dims before the innermost (the column sums of a weight's or a
broadcast's gradient over the leading dims, a repeat's over a middle one), in a column plan (`column_reduction`) it is a loop over blocks of rows
accumulating a [ROWS, COLS] tile, reduced along ROWS into a [1, COLS] tile. Accumulation is in
fp32 (tiles of fp16/bf16 values are fp32); an fp16/bf16 result is rounded once, as eager rounds
it. amax/amin propagate NaN as eager does (Triton's max/min drop it). Registers the rules on
import (`triton_exec.rules`); reductions over dims apart and empty rows are refused (torch runs
them); a row past `ROW_LIMIT` or of runtime length is walked by loops (`ReductionLoop`; which
reductions share one, and the online log-sum-exp: `row_loops`); a sum of where(arange == i, v,
0) over a row is v at column i, one load per row (`_picked`); lanes outside the row hold the
reduction's neutral value (`loads.filled_outside`: a load's own `other` where it can). Imports
`kernel_types`, `loads`, `lower_elementwise` (the exp an online sum rescales with),
`narrow_tiles`, `render` and `row_loops` from this package.
"""
from __future__ import annotations

import dataclasses

from ir import IntProxy, prims
from triton_exec import index, vectorize
from triton_exec.codegen.kernel_types import COMPUTE_DTYPE
from triton_exec.codegen.loads import filled_outside
from triton_exec.codegen.lower_elementwise import UNARY_SRC
from triton_exec.codegen.render import split_dependent
from triton_exec.codegen.row_loops import one_hot_pick
from triton_exec.codegen.narrow_tiles import rounded_tile
from triton_exec.rules import register
from triton_exec.vectorize import Path

ROW_LIMIT = 16384       # elements of a row one program holds at most: a longer row is looped

# prim -> (the combine function of `tl.reduce`, the value masked-off lanes hold). The builtin
# `tl.reduce` with Triton's own combine functions, not `tl.sum`/`tl.max` (@triton.jit library
# functions: see `triton_exec.codegen`); the interpreter runs these as numpy reductions. They are
# globals of the kernel file (`launch.KERNEL_HEADER` imports them), where the offline compile
# finds them under the interpreter too (`offline._with_compilable_helpers`).
REDUCE_SRC = {"sum": ("_sum_combine", "0.0"),
              "amax": ("_elementwise_max", "float('-inf')"),
              "amin": ("_elementwise_min", "float('inf')")}


def row_of(eqn):
    """(outer sizes, reduced sizes) of a reduction's input: the dims it keeps, those it sums."""
    t, dims = eqn.args[0], eqn.params["dims"]
    return tuple(t.shape[:t.ndim - len(dims)]), tuple(t.shape[t.ndim - len(dims):])


def over_columns(eqn) -> bool:
    """Whether the reduction is over a run of dims that ends before the innermost (the column
    sums of a weight's or broadcast's gradient over the leading dims, a repeat's gradient over
    a middle dim): a column plan's (`column_reduction`); else over the innermost dims, a row
    plan's (other dims are refused)."""
    return _before_innermost(eqn.args[0].ndim, tuple(eqn.params["dims"]))


def _before_innermost(ndim: int, dims: tuple) -> bool:
    return 0 < len(dims) and dims[-1] < ndim - 1 and dims == tuple(range(dims[0], dims[-1] + 1))


def columns_of(eqn):
    """(outer sizes, reduced sizes, inner sizes) of a reduction over a run of dims before the
    innermost: the dims kept before the run (one program each), the rows it sums, the columns
    it keeps."""
    return _column_split(tuple(eqn.args[0].shape), tuple(eqn.params["dims"]))


def _column_split(shape: tuple, dims: tuple) -> tuple:
    return shape[:dims[0]], shape[dims[0]:dims[-1] + 1], shape[dims[-1] + 1:]


def permuted_copy(eqn, producer):
    """(v, perm) where `eqn` copies a permute of v into contiguous memory (the copy before a
    reshape that cannot view: a gradient permuted back to [B, T, H, D] and merged into a
    linear's): a column plan computes v's index and stores it permuted; None otherwise.
    producer: id of a value -> the equation of the group defining it."""
    if eqn.prim.name != "copy" or eqn.params["memory_format"] != "contiguous":
        return None
    permute = producer(eqn.args[0])
    if permute is None or permute.prim.name != "permute":
        return None
    return permute.args[0], tuple(permute.params["perm"])


def refusal(name: str, shape: tuple, dims: tuple) -> str | None:
    """Why the reduction `name` over `dims` (sorted) of a tensor of `shape` is left to torch;
    None where a row or column plan fuses it (`triton_exec.executor` asks too, before a
    composite op is decomposed)."""
    if _before_innermost(len(shape), dims):
        outer, reduced, kept = _column_split(shape, dims)
        if any(vectorize.hint_of(s) == 0 for s in outer + kept):
            return f"{name} into an empty result is left to torch"
        if len(kept) > 1 and any(isinstance(s, IntProxy) for s in kept):  # COLS walks them flat
            return f"{name} keeping several dims of runtime size is not fused"
        if name != "sum" and any(vectorize.hint_of(s) == 0 for s in reduced):
            return f"{name} over no rows is eager's error: left to torch"
        return None
    if not dims or dims != tuple(range(len(shape) - len(dims), len(shape))):
        return f"{name} over dims {dims} is not fused (torch runs it)"
    reduced = shape[len(shape) - len(dims):]
    if len(reduced) > 1 and any(isinstance(s, IntProxy) for s in reduced):  # COLS walks them flat
        return f"{name} over several dims of runtime size is not fused (torch runs it)"
    if any(vectorize.hint_of(s) == 0 for s in reduced):
        return f"{name} over empty rows is left to torch"
    return None


def split_columns(cols, reduced) -> list:
    """The indices along the reduced dims (sizes `reduced`) of the row's column index."""
    if len(reduced) == 1:
        return [cols]
    found, inner = [], 1
    for k in range(len(reduced) - 1, -1, -1):
        q = index.floordiv(cols, inner) if inner != 1 else cols
        found.insert(0, index.mod(q, reduced[k]) if k else q)
        inner *= reduced[k]
    return found


def _reduce(w, eqn, idx, mask, path):
    """The reduction of the row: its input at every column of the row (under the row's mask),
    reduced along COLS into a [ROWS, 1] tile; with a loop over the row or over the rows, see
    `_reduce_looped`."""
    pick = one_hot_pick(eqn, w.producers) if w.row is not None else None
    if pick is not None:
        return _picked(w, eqn, pick, idx)
    if w.reduction_loop is not None:
        return _reduce_looped(w, eqn, idx)
    t, name = eqn.args[0], eqn.prim.name
    outer, reduced = row_of(eqn)
    row_path = Path().through(reduced[-1]) if len(reduced) == 1 else Path().broken()
    x = w.value(t, list(idx[:len(outer)]) + split_columns(w.row.cols, reduced), w.row.in_domain,
                row_path)
    in_row = w.mask_name(w.row.in_domain)
    fn, neutral = REDUCE_SRC[name]
    result = w.let("v", f"tl.reduce({filled_outside(w, x, w.row.in_domain, neutral)}, 1, {fn}, "
                        f"keep_dims=True)", f"{name} over the row")
    if name != "sum":           # NaN wins, as in eager
        nan = w.let("v", f"tl.reduce(tl.where({in_row} & ({x} != {x}), 1, 0), 1, "
                         f"{REDUCE_SRC['amax'][0]}, keep_dims=True) > 0", "the row holds a NaN")
        result = w.let("v", f"tl.where({nan}, float('nan'), {result})")
    return rounded_tile(w, result, eqn.out.dtype) if eqn.out.dtype in COMPUTE_DTYPE else result


def _picked(w, eqn, pick, idx):
    """The sum of where(arange == i, v, 0) over the row (`row_loops.Pick`): v at column i, where
    0 <= i < the row's length (else 0), plus 0.0 (a sum of -0.0 and zeros is 0.0); a [ROWS, 1]
    tile, one load per row."""
    outer = list(idx[:eqn.args[0].ndim - 1])
    rows = index.Mask(tuple(a for a in w.row.in_domain.atoms
                            if "col_arange" not in a.a.deps | a.b.deps))
    outside, w.shape = w.shape, "[ROWS, 1]"
    column = w.value(pick.column, outer + [index.Const(0)], rows, Path().broken())
    bits = 64 if pick.column.dtype.itemsize == 8 else 32
    at = index.Leaf(column, frozenset({"row_arange"}), bits, 1, None, None)
    length = w.size(eqn.args[0].shape[-1])
    inside = index.Mask(rows.atoms + (index.Less(at, length), index.Less(at, index.Const(0), True)))
    value = w.value(pick.value, outer + [at], inside, Path().broken())
    result = w.let("v", f"tl.where({w.mask_name(inside)}, {value}, 0.0) + 0.0",
                   "the row's value at its index")
    w.shape = outside
    return rounded_tile(w, result, eqn.out.dtype) if eqn.out.dtype in COMPUTE_DTYPE else result


@dataclasses.dataclass
class ReductionLoop:
    """A plan whose reductions loop over blocks of the tile (`w.reduction_loop`): over the rows
    (`over="rows"`: the column plan, `column_reduction`, whose reductions run along ROWS into a
    [1, COLS] tile) or over the row's columns (`over="cols"`: the row plan of a long or runtime
    row, `row_plan`, whose reductions run along COLS into a [ROWS, 1] tile). Outside the loops
    the kernel holds the reduced tiles; the plan lowers its reductions in trace order first, so
    one that reads another finds it computed (`results`)."""

    tile: object                # the plan's `tile_plan.Tile`
    over: str                   # "rows" or "cols": the index the loops walk
    results: dict = dataclasses.field(default_factory=dict)  # `key` -> reduced tile
    capturing: bool = False     # inside a loop

    @staticmethod
    def key(eqn, idx) -> tuple:
        """The key of the reduction's result at output index idx in `results`: index 0 along a
        dim of size 1 (read through a broadcast as 0, computed at the tile's index: the same
        value wherever the stores' masks let it through)."""
        return id(eqn.out), tuple(index.Const(0) if isinstance(s, int) and s == 1 else i
                                  for i, s in zip(idx, eqn.out.shape))

    @property
    def axis(self) -> int:
        return 0 if self.over == "rows" else 1

    def index_line(self, start: str, narrow: bool) -> str:
        """The line that sets the loop's index from the block's first index `start`."""
        if self.over == "rows":
            return (f"rows = {start} + tl.arange(0, ROWS)[:, None]"
                    + ("" if narrow else ".to(tl.int64)"))
        return f"cols = {start} + tl.max_contiguous(tl.arange(0, COLS), VEC)[None, :]"

    def input_index(self, eqn, idx) -> list:
        """The index of the reduction's input at output index idx and the loop's index."""
        idx = list(idx)
        if self.over == "rows":
            outer, reduced, _ = columns_of(eqn)
            return idx[:len(outer)] + list(self.tile.outer[:len(reduced)]) + idx[len(outer):]
        outer, reduced = row_of(eqn)
        return idx[:len(outer)] + split_columns(self.tile.cols, reduced)


def in_loop(w, plan: ReductionLoop, emit, first=()) -> None:
    """Appends a loop over the plan's blocks (ROWS rows, or COLS columns, at a time) whose body
    is what `emit()` appends: its lines that do not read the loop's index run once, before the
    loop (then the lines `first`); names bound inside the loop are forgotten after it."""
    start, outside_shape = len(w.lines), w.shape
    w.shape, plan.capturing = "[ROWS, COLS]", True
    var = w.names.fresh("row_start" if plan.over == "rows" else "col_start")
    w.lines.append(plan.index_line(var, w.narrow))
    emit()
    body = w.lines[start:]
    del w.lines[start:]
    before, inside, defined = split_dependent(body, {var})
    w.lines.extend(before + list(first))
    extent = plan.tile.rows_extent if plan.over == "rows" else plan.tile.cols_extent
    count = w.render.expr(extent, top=True)
    if not isinstance(extent, index.Const):
        count = f"loops.bound({count})"        # see `triton_exec.kernel_loops`
    w.lines.append(f"for {var} in range(0, {count}, {'ROWS' if plan.over == 'rows' else 'COLS'}):")
    w.lines.extend("    " + line for line in inside)
    w.forget(defined)
    w.shape, plan.capturing = outside_shape, False


def _reduce_looped(w, eqn, idx):
    """The reduction at output index `idx` in a plan with loops (`ReductionLoop`): computed by
    the loop that `reduce_in_one_loop` makes for it alone, unless a loop computed it before."""
    plan, key = w.reduction_loop, ReductionLoop.key(eqn, idx)
    if key not in plan.results:
        assert not plan.capturing, f"{eqn.out.name} is read at another index inside another loop"
        reduce_in_one_loop(w, [eqn], [], idx)
    return plan.results[key]


def reduce_in_one_loop(w, eqns, online: list, idx) -> None:
    """One loop over the plan's blocks computing the reductions `eqns` (none reads another)
    and the sums of `online` ((sum, its `row_loops.OnlineSum`) pairs: a sum of exp(a - shift(max))
    whose max is among `eqns`), their results recorded in the plan (`results`). A reduction
    accumulates its input's [ROWS, COLS] tile in fp32 (reduced along the loop's axis after the
    loop). A max read by an online sum is the running max of the blocks' maxima ([ROWS, 1],
    NaN tracked per lane, or read from the sum where it sums exp(max's input - shift): see
    `row_loops.OnlineSum`); the sum is a running [ROWS, 1] sum, rescaled by
    exp(shift(old max) - shift(new max)) where the max grows: one pass over the row."""
    loop = _Loop(w, w.reduction_loop, idx, online, [w.names.fresh("total") for _ in online])
    peaks = {id(found.peak.out) for _, found in online}
    parts = [_running_max(loop, e) if id(e.out) in peaks else _accumulated(loop, e)
             for e in eqns]
    parts += [_online_sum(loop, e, found, total)
              for (e, found), total in zip(online, loop.totals)]

    def body():
        for accumulate, _ in parts:
            accumulate()
        w.lines.extend(loop.updates)

    in_loop(w, loop.plan, body, loop.first)
    for _, finish in parts:
        finish()


@dataclasses.dataclass
class _Loop:
    """What the parts of one loop (`reduce_in_one_loop`) share."""

    w: object
    plan: ReductionLoop
    idx: object                 # the output index of the reductions
    online: list                # (sum, OnlineSum) pairs
    totals: list                # the running sums' names, one per online sum
    first: list = dataclasses.field(default_factory=list)      # lines before the loop
    updates: list = dataclasses.field(default_factory=list)    # the running values' last lines
    masked: dict = dataclasses.field(default_factory=dict)     # id(max) -> input, -inf off row


def _accumulated(loop, eqn):
    """(accumulate, finish) of a reduction accumulated per lane."""
    w, plan, idx = loop.w, loop.plan, loop.idx
    t, name = eqn.args[0], eqn.prim.name
    reduced = columns_of(eqn)[1] if plan.over == "rows" else row_of(eqn)[1]
    kept = columns_of(eqn)[2] if plan.over == "rows" else reduced
    if name != "sum":   # over nothing, eager's error (refused): a runtime count is guarded
        w.guards += [("gt", s, 0) for s in reduced if isinstance(s, IntProxy)]
    fn, neutral = REDUCE_SRC[name]
    acc = w.names.fresh("acc")
    loop.first.append(f"{acc} = tl.full([ROWS, COLS], {neutral}, tl.float32)  "
                      f"# {name} of each lane's {plan.over}, accumulated in fp32")

    def accumulate():
        path = Path().through(kept[-1]) if len(kept) == 1 else Path().broken()
        x = w.value(t, plan.input_index(eqn, idx), plan.tile.in_domain, path)
        masked = filled_outside(w, x, plan.tile.in_domain, neutral)
        if name == "sum":
            update = f"{acc} + {masked}"
        else:       # NaN wins, as in eager (Triton's maximum/minimum may drop it)
            pick = "maximum" if name == "amax" else "minimum"
            update = (f"tl.where(({acc} != {acc}) | ({masked} != {masked}), "
                      f"{acc} + {masked}, tl.{pick}({acc}, {masked}))")
        w.lines.append(f"{acc} = {update}")

    def finish():
        result = w.let("v", f"tl.reduce({acc}, {plan.axis}, {fn}, keep_dims=True)",
                       f"{name} over the {plan.over}")
        if name != "sum":
            nan = w.let("v", f"tl.reduce(tl.where({acc} != {acc}, 1, 0), {plan.axis}, "
                             f"{REDUCE_SRC['amax'][0]}, keep_dims=True) > 0", "NaN among them")
            result = w.let("v", f"tl.where({nan}, float('nan'), {result})")
        _record(w, eqn, idx, result)
    return accumulate, finish


def _running_max(loop, eqn):
    """(accumulate, finish) of a max read by online sums: the running max of the blocks'."""
    w, plan, idx = loop.w, loop.plan, loop.idx
    peak, nan = w.names.fresh("peak"), w.names.fresh("nan")
    loop.first.append(f"{peak} = tl.full([ROWS, 1], float('-inf'), tl.float32)  "
                      f"# the running max of the blocks")
    summed = [total for total, (_, found) in zip(loop.totals, loop.online)
              if found.peak is eqn and found.same_values]
    if not summed:
        loop.first.append(f"{nan} = tl.full([ROWS, COLS], 0, tl.int1)  "
                          f"# a NaN in each lane's columns")

    def accumulate():
        x = w.value(eqn.args[0], plan.input_index(eqn, idx), plan.tile.in_domain,
                    Path().through(row_of(eqn)[1][-1]))
        masked = filled_outside(w, x, plan.tile.in_domain, "float('-inf')")
        loop.masked[id(eqn.out)] = masked
        if not summed:
            w.lines.append(f"{nan} = {nan} | ({masked} != {masked})")
        block = w.let("v", f"tl.reduce({masked}, 1, {REDUCE_SRC['amax'][0]}, keep_dims=True)",
                      "the block's max")
        grown = w.let("v", f"tl.maximum({peak}, {block})")
        plan.results[plan.key(eqn, idx)] = grown      # read by the sums' shifts
        loop.updates.append(f"{peak} = {grown}")

    def finish():
        any_nan = (f"{summed[0]} != {summed[0]}" if summed else
                   w.let("v", f"tl.reduce({nan}.to(tl.int32), 1, {REDUCE_SRC['amax'][0]}, "
                              f"keep_dims=True) > 0", "NaN in the row"))
        _record(w, eqn, idx, w.let("v", f"tl.where({any_nan}, float('nan'), {peak})"))
    return accumulate, finish


def _online_sum(loop, eqn, found, total):
    """(accumulate, finish) of an online sum: exp(a - the shift at the running max), the
    running sum rescaled to each block's shift."""
    w, plan, idx = loop.w, loop.plan, loop.idx
    shift = w.names.fresh("shift")
    loop.first.append(f"{total} = tl.full([ROWS, 1], 0.0, tl.float32)  # the running sum")
    loop.first.append(f"{shift} = tl.full([ROWS, 1], 0.0, tl.float32)  "
                      f"# the shift at the running max (-inf: 0)")

    def accumulate():
        at, mask = plan.input_index(eqn, idx), plan.tile.in_domain
        row_at = list(at[:len(idx)]) + [index.Const(0)] * (found.shift.ndim - len(idx))
        outside, w.shape = w.shape, "[ROWS, 1]"
        grown = w.value(found.shift, row_at, mask, Path().broken())
        if found.raw:       # summed at the finite shift; `finish` makes it NaN off the finite
            grown = w.let("v", f"tl.where(tl.abs({grown}) == float('inf'), 0.0, {grown})")
        w.shape = outside
        w.memo[(id(found.broadcast), tuple(at), mask, w.shape)] = grown
        if found.same_values:   # the max's masked input: exp(-inf - finite shift) = 0 off the row
            w.memo[(id(found.a), tuple(at), mask, w.shape)] = loop.masked[id(found.peak.out)]
        e = w.value(eqn.args[0], at, mask, Path().through(row_of(eqn)[1][-1]))
        if not found.same_values:
            e = f"tl.where({w.mask_name(mask)}, {e}, 0.0)"
        # a sum still 0 (the max -inf so far, its shift 0) stays 0 whatever the rescale: from
        # shift 0 to a max below -88, exp overflows (0 * inf would be NaN)
        rescale = UNARY_SRC[found.exp.prim.name].format(f"({shift} - {grown})")
        w.lines.append(f"{total} = tl.where({total} == 0.0, 0.0, {total} * {rescale}) + "
                       f"tl.reduce({e}, 1, {REDUCE_SRC['sum'][0]}, keep_dims=True)  "
                       f"# rescaled to the grown max's shift")
        loop.updates.append(f"{shift} = {grown}")

    def finish():
        result = total
        if found.raw:       # eager's sum of exp(a - max): inf - inf where the max is infinite
            peak = plan.results[plan.key(found.peak, idx)]
            result = w.let("v", f"tl.where(tl.abs({peak}) == float('inf'), float('nan'), "
                                f"{total})", "NaN where the max is infinite, as eager's")
        _record(w, eqn, idx, result)
    return accumulate, finish


def _record(w, eqn, idx, result) -> None:
    """Records the loop's result of a reduction, rounded once where its dtype is fp16/bf16."""
    if eqn.out.dtype in COMPUTE_DTYPE:
        result = rounded_tile(w, result, eqn.out.dtype)
    w.reduction_loop.results[ReductionLoop.key(eqn, idx)] = result


register(prims.sum_, prims.amax, prims.amin, lower=_reduce, float_only=True,
         refuse=lambda eqn: refusal(eqn.prim.name, tuple(eqn.args[0].shape),
                                    tuple(eqn.params["dims"])),
         merges=lambda eqn, k: False, reduces=True)
