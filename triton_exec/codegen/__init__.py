"""Triton code generation for one fusion group, in rooms with one job each.

Every value of the group is an expression of the output index. The domain (the outputs' shape) is
tiled [ROWS, COLS]: COLS walks the innermost dim, ROWS the flattened outer dims. The kernel writer
walks from each output back to the loads, turning each prim into index arithmetic through its
lowering, and collects the kernel's parameters (and how the launcher fills them), one `Access`
per load and store with the vector width the analysis allows, and the guards those widths rest on.

Kernels call Triton builtins only, never `@triton.jit` library functions (`tl.cdiv`, `tl.zeros`):
under the interpreter those leave the language patched, which breaks offline compilation. Index
and mask math is built as `triton_exec.index` nodes, never as strings. Boundaries are literals in
"constant values" mode; in "symbolic values" mode they are runtime integers passed divided by
their guarded power-of-two divisor and multiplied back in the kernel, so Triton can prove what the
analysis proved. Masks use only `idx < c` and `idx >= c`.

The rooms, each importing only those above it:

- `kernel_types`: Triton dtypes, literals, the int32 limit.
- `lowered`: what the launcher reads (`Lowered`, `Param`, `Stride`, `Access`, `Namespace`).
- `narrow_tiles`: fp16/bf16 values held rounded as eager holds them.
- `loads`, `writer`: the kernel writer (`KernelWriter`: names, parameters, runtime integers,
  values) and its loads at a width.
- `lower_elementwise`, `lower_movement`, `lower_reduction`: the lowering of each op family; importing one
  registers its prims' rules (`triton_exec.rules`). A new family is a new `lower_<family>.py`
  and one import below.
- `analysis` (step 1: `Group`), `pairs` and `tile_plan` (step 2: `Tile`, `Loop`), `stores` and
  `assembly` (step 3: `build`), `render` (step 4: the source), the plans that build scratch
  kernels (`column_plan`: piece-wise columns; `loop_plan`: the loop over a broadcast dim), and
  `row_plan` (a group with reductions: one program per block of whole rows), and `pipeline`
  (`lower_group`: the steps in order).
"""
from triton_exec.codegen import lower_elementwise, lower_movement, lower_reduction  # noqa: F401
from triton_exec.codegen.analysis import Group, analyze
from triton_exec.codegen.assembly import build, kernel_writer
from triton_exec.codegen.column_plan import Chunk, plan_chunks, plan_columns
from triton_exec.codegen.kernel_types import TL_DTYPE
from triton_exec.codegen.loop_plan import plan_loop
from triton_exec.codegen.lowered import (
    KERNEL_OPTIONS, Access, Lowered, LoopDim, Namespace, Param, Stride, product)
from triton_exec.codegen.pairs import Pairs
from triton_exec.codegen.pipeline import lower_group
from triton_exec.codegen.render import render_kernel
from triton_exec.codegen.tile_plan import Loop, Tile, plan_tile
from triton_exec.codegen.writer import KernelWriter

__all__ = ["Access", "Chunk", "Group", "KERNEL_OPTIONS", "KernelWriter", "Loop", "LoopDim",
           "Lowered", "Namespace", "Pairs", "Param", "Stride", "TL_DTYPE", "Tile", "analyze",
           "build", "kernel_writer", "lower_group", "plan_chunks", "plan_columns", "plan_loop",
           "plan_tile", "product", "render_kernel"]
