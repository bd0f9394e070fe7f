"""The op families: one module per family holds its prims, its torch mapping (the decompositions
the tracer runs in place of torch calls), its shape rules and its grad rules, registered into the
tables of `ir.ops.registry` when the module is imported (`ir.prims` imports every family).

- `registry`: the `Prim` class and the tables (`PRIMS`, `HANDLERS`, `METHODS`, `PROPERTIES`,
  `FACTORIES`, `SHAPE_RULES`, `TORCH_SOURCE`, `GRAD_RULES`) with their registration functions.
- `host`: shape queries and size arithmetic. `opaque`: torch calls left to torch, and the
  symbolic shapes of their outputs. `elementwise`, `clamp`, `casts`, `movement` (pad, cat, slice,
  reshape, permute, expand, copies), `indexing` (basic indexing, split, chunk, unbind),
  `factories`, `reductions`, `queries` (answered from metadata).
- Shared by the families: `shapes` (broadcasting, dims), `scalars` (dtypes and Python numbers as
  eager uses them), `vjp` (what grad rules are written with).

This package's own module imports nothing, so a family imports any other without a circle.
"""
