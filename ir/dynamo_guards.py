"""Guards once (`ir.dynamo`): which guards of a compiled graph's entry Dynamo's own guards imply.

Before it calls a graph, Dynamo checks each input's type, dtype, device, rank, requires_grad
and dispatch keys (the negative bit), and its shape environment's guards: static sizes and
strides equal, and on the symbols of a dynamic graph the facts it relied on while capturing
(each size symbol >= 2, the relations it guarded, a stride's expression in the sizes). A guard
of ours stated on Dynamo's own sizes and strides (its SymInts, or ints where the graph holds
them static) that is statically true in that environment is implied, and left out of the
per-call check (`thin_guards`); what stays is what Dynamo does not know: pointer alignment,
divisibility and the spans the vector widths and int32 offsets rest on (the span of an input
that Dynamo guards contiguous is checked as its element count, a product for a sum).

Layout guards are stated on the strides of Dynamo's graph inputs only: a piece of a split graph
also takes tensors another piece computed, whose strides are ours, not Dynamo's.
"""
from __future__ import annotations

import math
import operator

import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true

from ir import prims
from ir.prologue import render_guard
from ir.proxies import IntProxy, TensorProxy

_RELATIONS = {"eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le,
              "gt": operator.gt, "ge": operator.ge, "divisible": lambda a, b: a % b == 0}


def dynamo_sizes(entry, values: dict) -> dict[int, object]:
    """id of each size proxy of the entry that stands for an input's size or an int input ->
    what it is in Dynamo's graph: an int (a static size) or a SymInt."""
    found = {}
    for name, value in entry.traces[0].inputs:
        if isinstance(value, IntProxy) and isinstance(values.get(name), (int, torch.SymInt)):
            found[id(value)] = values[name]
    for eqn in entry.host:
        fake = values.get(eqn.args[0].name) if eqn.prim is prims.shape else None
        if isinstance(fake, torch.Tensor):
            found.update((id(size), s) for size, s in zip(eqn.outs, fake.shape))
    return found


def _size(x, sizes: dict):
    """A guard's size operand as Dynamo has it (an int or a SymInt), or None where unknown."""
    if type(x) is int:
        return x
    return sizes.get(id(x)) if isinstance(x, IntProxy) else None


def _size_claim(op, a, b, sizes: dict):
    """The guard on sizes stated on Dynamo's sizes (a bool or SymBool), or None."""
    if op in ("numel_lt", "numel_eq"):
        a = [_size(x, sizes) for x in a]
        b = [_size(x, sizes) for x in b] if op == "numel_eq" else [b]
        if None in a or None in b:
            return None
        return (math.prod(a) < b[0]) if op == "numel_lt" else (math.prod(a) == math.prod(b))
    a, b = _size(a, sizes), _size(b, sizes)
    if op not in _RELATIONS or a is None or b is None:
        return None
    return _RELATIONS[op](a, b)


def _layout_claim(op, fake: torch.Tensor, b):
    """The layout guard stated on Dynamo's example value of the input, or None."""
    strides = fake.stride()
    if op == "not_neg":     # Dynamo guards the dispatch keys, the negative bit's among them
        return not fake.is_neg()
    if op == "stride_eq":
        return strides[b[0]] == b[1]
    if op == "stride_ne":
        return strides[b[0]] != b[1]
    if op == "stride_divisible":
        return strides[b[0]] % b[1] == 0
    if op == "stride_indivisible":
        return strides[b[0]] % b[1] != 0
    if op == "strides_compose":
        return strides[b[0]] == strides[b[1]] * b[2]
    if all(type(s) is int for s in (*fake.shape, *strides)):    # static: evaluated here
        if op == "stride_span_lt":
            return sum((n - 1) * abs(s) for n, s in zip(fake.shape, strides)) < b
        if op == "contiguous":
            return fake.is_contiguous() == b
    return None


def dynamo_checks(guard, graph, sizes: dict) -> bool:
    """Whether Dynamo's guards imply this guard of an entry of `graph` (a `CompiledGraph`)."""
    op, a, b = guard
    if isinstance(a, TensorProxy):
        fake = graph.example_values.get(a.name)
        if a.name not in graph.graph_inputs or not isinstance(fake, torch.Tensor):
            return False
        claim = _layout_claim(op, fake, b)
    else:
        claim = _size_claim(op, a, b, sizes)
    return claim is not None and statically_known_true(claim)


def _span_as_numel(guard, graph):
    """A span guard on a Dynamo input whose strides Dynamo guards as contiguous ones: the same
    bound on its element count (a contiguous tensor's span is numel - 1), a product of sizes
    where the span is a sum over sizes and strides; any other guard as it is."""
    op, a, b = guard
    fake = graph.example_values.get(a.name) if isinstance(a, TensorProxy) else None
    if op != "stride_span_lt" or a.name not in graph.graph_inputs or fake is None:
        return guard
    shape, strides = fake.shape, fake.stride()
    if all(statically_known_true(shape[d] == 1)
           or statically_known_true(strides[d] == math.prod(shape[d + 1:]))
           for d in range(fake.ndim)):
        return ("numel_lt", tuple(a.shape), b + 1)
    return guard


def thin_guards(entry, graph) -> list:
    """The guards of an entry of a compiled graph that Dynamo does not check, each in its
    cheapest form."""
    sizes = dynamo_sizes(entry, graph.example_values)
    kept = [_span_as_numel(g, graph) for g in entry.guards if not dynamo_checks(g, graph, sizes)]
    return list({render_guard(g): g for g in kept}.values())    # each check once
