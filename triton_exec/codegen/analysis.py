"""Step 1 of lowering a group: the group as plain data (`Group`): its inner dims merged where
contiguous (`triton_exec.merge`), the domain it tiles, the widest vector of its narrowest dtype,
and whether its indices fit int32, with the guards these facts rest on. Imports `kernel_types`
only from this package.
"""
from __future__ import annotations

import dataclasses
import math

from ir import IntProxy, TensorProxy
from triton_exec import vectorize
from triton_exec.codegen import kernel_types
from triton_exec.merge import Merged, merge_inner_dims


def _narrow_indices(eqns, outputs, guards: list) -> bool:
    """Whether int32 logical indices are safe: the flat indices the kernel forms (the output's
    row index, a reshape's flat index) and every index into an input stay below 2**31 when the
    output, the group's inputs and the reshaped tensors have fewer than 2**31 elements (true in
    this call; a guard per shape with runtime sizes keeps it true for the cache entry).
    Indices of pad, cat and slice intermediates are shifts of these."""
    produced = {id(o) for e in eqns for o in e.outs}
    tensors = [outputs[0]] + [t for e in eqns for t in e.input_vars()
                              if isinstance(t, TensorProxy) and id(t) not in produced]
    tensors += [t for e in eqns if e.prim.name == "reshape" for t in (e.args[0], *e.outs)]
    shapes = {}
    for t in tensors:
        shapes[tuple(id(s) if isinstance(s, IntProxy) else s for s in t.shape)] = t.shape
    if any(math.prod(vectorize.hint_of(s) for s in shape) >= kernel_types.INT32_LIMIT
           for shape in shapes.values()):
        return False
    guards += [("numel_lt", tuple(s for s in shape if isinstance(s, IntProxy) or s != 1),
                kernel_types.INT32_LIMIT) for shape in shapes.values()
               if any(isinstance(s, IntProxy) for s in shape)]
    return True


@dataclasses.dataclass
class Group:
    """Step 1's result: a fusion group as plain data, ready to tile."""

    eqns: list                  # after the inner-dim merge
    outputs: list
    values: dict                # id(input Var) -> example value
    allocated: tuple            # the largest output's shape before the merge ((): a 0-d output)
    domain: tuple               # the shape the kernel tiles (after the merge; (1,) for 0-d)
    max_vector: int             # 16 bytes of the group's narrowest dtype, in elements
    merged: Merged | None
    narrow: bool                # int32 logical indices (see _narrow_indices)
    wide_cols: bool             # int64 column indices
    guards: list                # what the facts above rest on
    output_shapes: tuple = ()   # each output's shape before the merge (outputs of a horizontal
                                # fusion nest in the largest: `triton_exec.horizontal`)


def analyze(eqns, outputs, inputs, values) -> Group:
    """Step 1: merge contiguous inner dims, find the domain (the largest output's shape: the
    others nest in it), the index widths and their guards."""
    output_shapes = tuple(tuple(o.shape) for o in outputs)
    largest = max(range(len(outputs)), key=lambda k: math.prod(
        vectorize.hint_of(s) for s in output_shapes[k]))
    allocated = output_shapes[largest]
    guards = []
    merged = merge_inner_dims(eqns, outputs, inputs, values)
    if merged is not None:
        eqns, outputs, values = merged.eqns, merged.outputs, merged.values
        guards += [("strides_compose", t, dims) for t, dims in merged.contiguity]
    domain = tuple(outputs[largest].shape) or (1,)
    itemsizes = [t.dtype.itemsize for e in eqns for t in (*e.input_vars(), *e.outs)
                 if isinstance(t, TensorProxy)]
    # Logical indices (rows, outer indices, reshaped flat indices) are int32 when every tensor
    # of the group has fewer than 2**31 elements (guarded for runtime shapes); offsets into
    # inputs are int64 products either way.
    narrow = _narrow_indices(eqns, [outputs[largest]], guards)
    # Column indices are int32 unless the innermost extent may reach 2**31.
    wide_cols = vectorize.hint_of(domain[-1]) >= kernel_types.INT32_LIMIT // 2
    if isinstance(domain[-1], IntProxy) and not wide_cols:
        guards.append(("lt", domain[-1], kernel_types.INT32_LIMIT // 2))
    return Group(list(eqns), list(outputs), values, allocated, domain,
                 vectorize.ACCESS_BYTES // min(itemsizes), merged, narrow, wide_cols, guards,
                 output_shapes)


