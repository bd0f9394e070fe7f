"""Fusion partitioning: which equations of a trace run together in one Triton kernel.

Partitioning goes by dataflow from the outputs back: a fusible equation joins the group of its
consumers when every consumer of its output is in that one group (no cycle can form); else, when
its value has the shape of its earliest reader group's root and every other reader comes after
that group's launch, it joins that group, which stores it for the others (`_stored_by`: the
residual sum a norm reads and the next residual add reads again); a view (slice, reshape, permute, broadcast), or a
cheap op (`recomputed`), read by several groups joins each of them, as index arithmetic costs
less than a round trip to memory, and a view of a group's result is left to torch, where it
costs nothing. Independent groups then merge into one kernel where their outputs nest
(`triton_exec.horizontal`). Host equations (shape queries, integer math) never
join a group and never split one. A group made only of views (slices, reshapes, broadcasts,
permutes) is left to torch, where those cost nothing; a copy (clone, `.contiguous()` of a view
that is not contiguous, a reshape that cannot view: the tracer decides) is a kernel, alone or
fused with its producers and consumers.
"""
from __future__ import annotations

import math
import os

import torch

from ir import TensorProxy, prims
from ir.ops.vjp import has_rule
from ir.proxies import same_shape, same_size
from ir.trace import iter_vars
from triton_exec import horizontal, recompute, row_groups, vectorize
from triton_exec.codegen import TL_DTYPE
from triton_exec.rules import rule_of

# What the executor accepts, as data; what each prim allows is its rule's (triton_exec.rules).
FUSIBLE_DTYPES = frozenset(TL_DTYPE) - {torch.int64}


def is_view(eqn) -> bool:
    rule = rule_of(eqn)
    return rule is not None and rule.view


def device_claimable(device: torch.device) -> bool:
    """CUDA tensors always; CPU tensors only under the Triton interpreter."""
    return device.type == "cuda" or (device.type == "cpu"
                                     and os.environ.get("TRITON_INTERPRET") == "1")


def fusible(eqn) -> bool:
    return refusal(eqn) is None


INTERPRETER_HINT = "CPU tensors: set TRITON_INTERPRET=1 before importing triton"


def _device_refusal(device) -> tuple[str, str]:
    if device.type == "cpu":
        return "device not claimed", INTERPRETER_HINT
    return "device not claimed", f"{device.type} tensors are not claimed (CUDA only)"


def refusal(eqn) -> tuple[str, str] | None:
    """Why `eqn` cannot join a fusion group, as (kind, reason); None when it can. Kinds: "not
    fusible", "dtype not fused", "needs grad", "device not claimed"."""
    name = eqn.prim.name
    if eqn.executor is not None:
        return "not fusible", f"already claimed by the {eqn.executor.name} executor"
    rule = rule_of(eqn)
    if rule is None:
        op = eqn.params["fn_name"] if name == "opaque" else name
        return "not fusible", f"{op} is not in the fusible set"
    tensors = [v for v in iter_vars((eqn.args, eqn.outs)) if isinstance(v, TensorProxy)]
    for t in tensors:
        if t.dtype not in FUSIBLE_DTYPES:
            return "dtype not fused", f"{t.name} is {str(t.dtype).removeprefix('torch.')}"
    for t in tensors:
        if not device_claimable(t.device):
            return _device_refusal(t.device)
    if not has_rule(eqn):       # in grad mode a group's backward is built from the grad rules
        return "needs grad", ("its value needs grad and it has no grad rule: PyTorch runs it "
                              "and records the backward")
    if rule.float_only and not all(t.dtype.is_floating_point for t in tensors):
        return "dtype not fused", f"{name} is fused on floating-point tensors only"
    if rule.no_bool and any(t.dtype == torch.bool for t in tensors):
        return "dtype not fused", f"{name} on bool tensors is not fused"
    reason = rule.refuse(eqn) if rule.refuse is not None else None
    if reason is not None:
        return "not fusible", reason
    if "dtype" in eqn.params and eqn.params["dtype"] not in FUSIBLE_DTYPES:
        return "dtype not fused", f"{name} to {eqn.params['dtype']} is not fused"
    if "device" in eqn.params and not device_claimable(eqn.params["device"]):
        return _device_refusal(eqn.params["device"])
    return None


def _bytes(t) -> int:
    return math.prod(vectorize.hint_of(s) for s in t.shape) * t.dtype.itemsize


def recomputed(eqn) -> bool:
    """Whether a value read by several groups is recomputed in each rather than stored by a
    kernel of its own: a view, or an elementwise or data-movement op (no reduction) that reads
    no more bytes than it writes (M-RoPE's `cat` of cos sections read by q's and k's RoPE:
    each reads the sections instead of a stored cat)."""
    if is_view(eqn):
        return True
    if row_groups.reduces(eqn):
        return False
    read = sum(_bytes(v) for v in eqn.input_vars() if isinstance(v, TensorProxy))
    return read <= sum(_bytes(o) for o in eqn.outs if o is not None)


def _stores_reshaped(eqn, producers, consumers, escaping) -> bool:
    """Whether a reshape of outer dims, the only reader of a computed value, is the root of that
    value's group: the kernel stores the reshaped tensor (the same bytes, the strides eager's view
    has), whose shape may nest with a sibling's (GQA's `repeat_kv`, `x[:, :, None].expand(b, h,
    n, t, d).reshape(b, h * n, t, d)`: k's copy stored as [b, h * n, t, d], q's shape)."""
    if eqn.prim is not prims.reshape or not eqn.out.ndim or not eqn.args[0].ndim:
        return False
    source = eqn.args[0]
    producer = producers.get(id(source))
    return (same_size(source.shape[-1], eqn.out.shape[-1]) and producer is not None
            and fusible(producer) and not is_view(producer) and id(source) not in escaping
            and len(consumers.get(id(source), ())) == 1)


def partition(trace) -> list[list[int]]:
    """Groups of equation indices (each in trace order); the last index of a group is its root."""
    consumers: dict[int, set] = {}
    for i, eqn in enumerate(trace.eqns):
        for v in eqn.input_vars():
            consumers.setdefault(id(v), set()).add(i)
    producers = {id(o): e for e in trace.eqns for o in e.outs if o is not None}
    escaping = {id(v) for v in iter_vars(trace.outputs)}
    groups_of: dict[int, set] = {}      # equation -> roots of the groups it belongs to
    groups: dict[int, list[int]] = {}
    for i in range(len(trace.eqns) - 1, -1, -1):
        eqn = trace.eqns[i]
        if not fusible(eqn):
            continue
        users = set().union(*(consumers.get(id(o), set()) for o in eqn.outs))
        escapes = any(id(o) in escaping for o in eqn.outs)
        all_fused = bool(users) and all(u in groups_of for u in users) and not escapes
        user_roots = set().union(*(groups_of[u] for u in users)) if all_fused else set()
        if all_fused and (len(user_roots) == 1 or recomputed(eqn)) and all(
                row_groups.joins(trace, eqn, groups[r]) for r in user_roots):
            roots = user_roots      # a cheap value read by several groups is recomputed in each
        elif not is_view(eqn) and (first := _stored_by(trace, eqn, users, groups_of,
                                                       groups)) is not None:
            roots = {first}         # computed in its first reader's group, stored for the rest
        elif is_view(eqn) and not _stores_reshaped(eqn, producers, consumers, escaping):
            continue                # a view of a result stays a free torch view
        elif all_fused and recompute.pays(eqn, len(user_roots), producers, consumers, escaping,
                                          fusible) and all(
                row_groups.joins(trace, eqn, groups[r]) for r in user_roots):
            roots = user_roots      # cheaper added in each reader than a kernel of its own
        else:
            roots = {i}
            groups[i] = []
        groups_of[i] = roots
        for root in roots:
            groups[root].append(i)
    kept = [sorted(g) for g in groups.values() if not all(is_view(trace.eqns[i]) for i in g)]
    return horizontal.merge_siblings(trace, sorted(kept, key=lambda g: g[-1]))


def _stored_by(trace, eqn, users: set, groups_of: dict, groups: dict):
    """The group that computes `eqn` and stores its value for its other readers (returned, or
    read by later ops or groups: a residual sum that a norm's group reads and the next residual
    add reads again), or None: the earliest group of its fused readers, when every other reader
    comes after that group's launch (its root) and the value has the group's shape."""
    roots = set().union(*(groups_of[u] for u in users if u in groups_of))
    if not roots or len(eqn.outs) != 1:
        return None
    first = min(roots)
    if not all(u in groups[first] or u > first for u in users):
        return None
    if not same_shape(eqn.out.shape, trace.eqns[first].out.shape):
        return None
    return first if row_groups.joins(trace, eqn, groups[first]) else None


def group_outputs(trace, group: list[int], groups: list[list[int]]) -> list:
    """Values the group defines that are returned, or read by an equation outside every group,
    or by one that a group without their producer also computes (a cheap value recomputed in
    each of its readers' groups reads them there), in trace order."""
    inside = set(group)
    members = [set(g) for g in groups]
    producer = {id(o): i for i, e in enumerate(trace.eqns) for o in e.outs if o is not None}
    read_outside = {id(v) for v in iter_vars(trace.outputs)}
    for j, e in enumerate(trace.eqns):
        # the groups that compute j (a cheap value is recomputed in each of its readers'
        # groups), else j runs outside every group
        holders = [m for m in members if j in m]
        for v in e.input_vars():
            p = producer.get(id(v))
            if p in inside and (not holders or any(p not in m for m in holders)):
                read_outside.add(id(v))
    return [o for i in group for o in trace.eqns[i].outs if id(o) in read_outside]


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


