"""Fusion partitioning: which equations of a trace run together in one Triton kernel.

Partitioning goes by dataflow from the outputs back: a fusible equation joins the group of its
consumers when every consumer of its output is in that one group (so nothing escapes the group
but its root's output, and no cycle can form). Host equations (shape queries, integer math) never
join a group and never split one. A group made only of views (slices, reshapes, broadcasts,
permutes) is left to torch, where those cost nothing.
"""
from __future__ import annotations

import os

import torch

from ir import TensorProxy
from ir.trace import iter_vars
from triton_exec.codegen import LOWERING, TL_DTYPE

# What the executor accepts, as data.
FUSIBLE_DTYPES = frozenset(TL_DTYPE) - {torch.int64}
ARITHMETIC = frozenset({"add", "sub", "mul", "div", "maximum", "minimum", "neg", "abs", "pow"})
FLOAT_ONLY = frozenset({"exp", "log", "sin", "cos", "sqrt", "rsqrt", "sigmoid", "tanh", "div"})
VIEWS = frozenset({"slice", "reshape", "broadcast_in_dim", "permute"})
POW_EXPONENTS = frozenset({1, 2, 3, 4})


def device_claimable(device: torch.device) -> bool:
    """CUDA tensors always; CPU tensors only under the Triton interpreter."""
    return device.type == "cuda" or (device.type == "cpu"
                                     and os.environ.get("TRITON_INTERPRET") == "1")


def fusible(eqn) -> bool:
    name = eqn.prim.name
    if eqn.executor is not None or name not in LOWERING:
        return False
    tensors = [v for v in iter_vars((eqn.args, eqn.outs)) if isinstance(v, TensorProxy)]
    if not all(t.dtype in FUSIBLE_DTYPES and device_claimable(t.device) and not t.requires_grad
               for t in tensors):
        return False
    if name in FLOAT_ONLY and not all(t.dtype.is_floating_point for t in tensors):
        return False
    if name in ARITHMETIC and any(t.dtype == torch.bool for t in tensors):
        return False
    if name == "pow":
        exponent = eqn.args[1]
        return (isinstance(exponent, (int, float)) and not isinstance(exponent, bool)
                and float(exponent).is_integer() and int(exponent) in POW_EXPONENTS)
    if name == "full":
        return eqn.params["dtype"] in FUSIBLE_DTYPES and device_claimable(eqn.params["device"])
    return True


def partition(trace) -> list[list[int]]:
    """Groups of equation indices (each in trace order); the last index of a group is its root."""
    consumers: dict[int, set] = {}
    for i, eqn in enumerate(trace.eqns):
        for v in eqn.input_vars():
            consumers.setdefault(id(v), set()).add(i)
    escaping = {id(v) for v in iter_vars(trace.outputs)}
    group_of: dict[int, int] = {}
    groups: dict[int, list[int]] = {}
    for i in range(len(trace.eqns) - 1, -1, -1):
        eqn = trace.eqns[i]
        if not fusible(eqn):
            continue
        users = set().union(*(consumers.get(id(o), set()) for o in eqn.outs))
        user_groups = {group_of.get(u) for u in users}
        escapes = any(id(o) in escaping for o in eqn.outs)
        if len(user_groups) == 1 and None not in user_groups and not escapes:
            root = user_groups.pop()
        else:
            root = i
            groups[root] = []
        group_of[i] = root
        groups[root].append(i)
    return [sorted(g) for g in groups.values()
            if not all(trace.eqns[i].prim.name in VIEWS for i in g)]


def group_inputs(trace, group: list[int]) -> list:
    """Tensor values the group reads from outside, in first-use order."""
    inside = {id(o) for i in group for o in trace.eqns[i].outs}
    seen, inputs = set(), []
    for i in group:
        for v in trace.eqns[i].input_vars():
            if isinstance(v, TensorProxy) and id(v) not in inside and id(v) not in seen:
                seen.add(id(v))
                inputs.append(v)
    return inputs


