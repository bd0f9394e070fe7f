"""The prims: the small set of operations that traces are made of and executors implement, by
name (`prims.pad`, `prims.PRIMS["add"]`), gathered from the op families that define them.

Each prim is a named object (`ir.ops.registry.Prim`) with a meta rule (output shapes and dtypes
from input metadata) and a default printer, defined in the module of its family together with
its torch mapping, shape rules and grad rules (`ir.ops.host`, `elementwise`, `clamp`, `casts`,
`movement`, `indexing`, `factories`, `reductions`, `opaque`, `queries`). Importing this module
imports every family, which fills the tables of `ir.ops.registry` that the tracer and the passes read.
"""
# torch mappings without prims of their own
from ir.ops import indexing, losses, queries  # noqa: F401
from ir.ops.casts import convert_element_type_p as convert_element_type
from ir.ops.clamp import clamp_p as clamp
from ir.ops.elementwise import (BINARY, COMPARE, UNARY, gelu_p as gelu, relu_p as relu,
                                silu_p as silu, softmax_exp_p as softmax_exp, where_p as where)
from ir.ops.factories import arange_p as arange, full_p as full
from ir.ops.host import SCALAR_OPS, SCALAR_UNARY, shape_p as shape
from ir.ops.movement import (broadcast_in_dim_p as broadcast_in_dim, cat_p as cat,
                             copy_p as copy, pad_p as pad, permute_p as permute,
                             reshape_p as reshape, slice_p as slice_)
from ir.ops.opaque import opaque_p as opaque
from ir.ops.reductions import REDUCTIONS, amax_p as amax, amin_p as amin, sum_p as sum_
from ir.ops.registry import PRIMS, Prim, define

__all__ = ["PRIMS", "Prim", "define", "SCALAR_OPS", "SCALAR_UNARY", "UNARY", "BINARY", "COMPARE",
           "REDUCTIONS", "shape", "convert_element_type", "broadcast_in_dim", "slice_", "pad",
           "cat", "copy", "reshape", "permute", "where", "arange", "full", "sum_", "amax",
           "amin", "silu", "softmax_exp", "gelu", "relu", "clamp", "opaque"]
