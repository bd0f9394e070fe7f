"""The lowering of reductions over the innermost dims (`sum`, `amax`, `amin`): in a row plan
(`row_plan`: one program per block of whole rows, COLS covering the row) a reduction is a
reduction (`tl.reduce`) of its input's tile along COLS, a [ROWS, 1] tile that broadcasts
against the row. Accumulation is in fp32 (tiles of fp16/bf16 values are fp32); an fp16/bf16
result is rounded once, as eager rounds it. amax/amin propagate NaN as eager does (Triton's
max/min drop it). Registers the rules on import (`triton_exec.rules`); reductions over outer
dims, empty rows and rows past `ROW_LIMIT` are refused (torch runs them). Imports `kernel_types` and
`narrow_tiles` from this package.
"""
from __future__ import annotations

from ir import IntProxy, prims
from triton_exec import index, vectorize
from triton_exec.codegen.kernel_types import COMPUTE_DTYPE
from triton_exec.codegen.narrow_tiles import rounded_tile
from triton_exec.rules import register
from triton_exec.vectorize import Path

ROW_LIMIT = 16384       # elements of a row that one program reduces at most

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


def _refusal(eqn):
    t, dims = eqn.args[0], eqn.params["dims"]
    if not dims or tuple(dims) != tuple(range(t.ndim - len(dims), t.ndim)):
        return f"{eqn.prim.name} over outer dims {dims} is not fused (torch runs it)"
    reduced = row_of(eqn)[1]
    if any(isinstance(s, IntProxy) for s in reduced):   # COLS would bound the entry's sizes
        return f"{eqn.prim.name} over a row of runtime length is not fused (torch runs it)"
    length = 1
    for s in reduced:
        length *= vectorize.hint_of(s)
    if length == 0:
        return f"{eqn.prim.name} over empty rows is left to torch"
    if length > ROW_LIMIT:
        return f"{eqn.prim.name} over rows of {length} elements (over {ROW_LIMIT}) is not fused"
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
    reduced along COLS into a [ROWS, 1] tile."""
    t, name = eqn.args[0], eqn.prim.name
    outer, reduced = row_of(eqn)
    row_path = Path().through(reduced[-1]) if len(reduced) == 1 else Path().broken()
    x = w.value(t, list(idx[:len(outer)]) + split_columns(w.row.cols, reduced), w.row.in_domain,
                row_path)
    in_row = w.mask_name(w.row.in_domain)
    fn, neutral = REDUCE_SRC[name]
    result = w.let("v", f"tl.reduce(tl.where({in_row}, {x}, {neutral}), 1, {fn}, keep_dims=True)",
                   f"{name} over the row")
    if name != "sum":           # NaN wins, as in eager
        nan = w.let("v", f"tl.reduce(tl.where({in_row} & ({x} != {x}), 1, 0), 1, "
                         f"{REDUCE_SRC['amax'][0]}, keep_dims=True) > 0", "the row holds a NaN")
        result = w.let("v", f"tl.where({nan}, float('nan'), {result})")
    return rounded_tile(w, result, eqn.out.dtype) if eqn.out.dtype in COMPUTE_DTYPE else result


register(prims.sum_, prims.amax, prims.amin, lower=_reduce, float_only=True, refuse=_refusal,
         merges=lambda eqn, k: False, reduces=True)
