"""Merging contiguous inner dims of a fusion group into one, so COLS spans them.

Each prim's part (whether dims merge through it, its arguments on merged dims) is its rule's
(`triton_exec.rules`). A resize on a middle dim of `[1024, 1024, 2]` leaves the innermost extent at 2, which caps the
vector width at 2. When every tensor of the group is contiguous across dims k..r-1 and nothing but
dim k is resized, the group computes the same values on tensors viewed as `[..., s_k * P]` with
P = the product of the inner extents, and every resize boundary on dim k scaled by P; the
analysis then sees the merged ("projected") extent, as the reference implementation does.

Example: `F.pad(x, (0, 0, 4, 4))` of x [1024, 1024, 2] becomes a pad (8, 8) of x viewed as
[1024, 2048], whose fp32 loads can be 16-byte. Trailing dims of size 1 merge into the dim before
them whatever its size (a runtime one too) and the strides: a group whose output ends in 1 tiles
the dim before as its columns (it tiled the 1, and Triton vectorized the stores along the rows,
which the analysis did not state).
"""
from __future__ import annotations

import dataclasses
import math

from ir import IntProxy, TensorProxy
from ir.proxies import same_shape
from ir.trace import Eqn
from triton_exec.rules import rule_of


@dataclasses.dataclass
class Merged:
    eqns: list
    outputs: list
    values: dict         # id(merged input proxy) -> the original example tensor
    stride_dims: dict    # id(merged input proxy) -> original dim of each merged dim
    originals: dict      # id(merged input proxy) -> the original proxy
    contiguity: list     # (tensor, (dim, innermost dim, P)): stride[dim] == stride[innermost] * P
    first: int           # k: the first merged dim


def _constant(shape, dims) -> bool:
    return all(not isinstance(shape[d], IntProxy) for d in dims)


def _squeezes(shape, k) -> bool:
    """Whether the dims after k are all 1: merging them into dim k drops them, whatever dim k's
    size (a runtime one too) and the strides (a dim of size 1 is never indexed)."""
    return all(not isinstance(s, IntProxy) and s == 1 for s in shape[k + 1:])


def _eqn_allows(eqn, k) -> bool:
    tensors = [v for v in (*eqn.input_vars(), *eqn.outs) if isinstance(v, TensorProxy)]
    r = len(eqn.outs[0].shape)
    if not all(_constant(t.shape, range(k, r)) or _squeezes(t.shape, k) for t in tensors):
        return False
    merges = rule_of(eqn).merges
    return merges is None or merges(eqn, k)


def _composed_dims(shape, k):
    """(d, P) for each merged dim d of an input but the innermost, P the product of the sizes
    inside it: the merged view is the tensor exactly when stride[d] == stride[-1] * P for each
    (a dim of size 1 is never indexed, so its stride is free)."""
    r = len(shape)
    return [(d, math.prod(shape[d + 1:])) for d in range(k, r - 1) if shape[d] != 1]


def _input_allows(example, k) -> bool:
    return _squeezes(example.shape, k) or all(example.stride(d) == example.stride(-1) * inner
               for d, inner in _composed_dims(example.shape, k))


def merge_inner_dims(eqns, outputs, inputs, values) -> Merged | None:
    """The group rewritten on merged inner dims, or None when no merge applies. Outputs of
    several shapes (a horizontal fusion) merge the dims they share."""
    r = len(outputs[0].shape)
    tensors = [v for e in eqns for v in (*e.input_vars(), *e.outs) if isinstance(v, TensorProxy)]
    if any(len(t.shape) != r for t in tensors):
        return None
    for k in range(0, r - 1):
        if (all(same_shape(o.shape[k:], outputs[0].shape[k:]) for o in outputs)
                and all(_eqn_allows(e, k) for e in eqns)
                and all(id(t) not in values or _input_allows(values[id(t)], k) for t in inputs)):
            return _rewrite(eqns, outputs, inputs, values, k)
    return None


def _rewrite(eqns, outputs, inputs, values, k) -> Merged:
    r = len(outputs[0].shape)
    squeeze = _squeezes(outputs[0].shape, k)    # dim k keeps its size and its strides
    inner = math.prod(outputs[0].shape[k + 1:])
    proxies: dict[int, TensorProxy] = {}

    def merged(t):
        if not isinstance(t, TensorProxy):
            return t
        if id(t) not in proxies:
            shape = tuple(t.shape[:k]) + (t.shape[k] if squeeze else t.shape[k] * inner,)
            proxies[id(t)] = TensorProxy(t.name, shape, t.dtype, t.device, t.requires_grad)
        return proxies[id(t)]

    new_eqns = []
    for e in eqns:
        args, params = tuple(_map(merged, e.args)), dict(e.params)
        rewrite = rule_of(e).merged
        if rewrite is not None:
            args, params = rewrite(e, args, params, k, inner)
        new_eqns.append(Eqn(e.prim, args, params, tuple(merged(o) for o in e.outs)))
    merged_values, stride_dims, originals, contiguity = {}, {}, {}, []
    for t in inputs:
        m = merged(t)
        stride_dims[id(m)] = list(range(k)) + [k if squeeze else r - 1]
        originals[id(m)] = t
        if id(t) in values:     # an argument; torch-made inputs arrive contiguous
            merged_values[id(m)] = values[id(t)]
            if not squeeze:
                contiguity += [(t, (d, r - 1, p)) for d, p in _composed_dims(t.shape, k)]
    return Merged(new_eqns, [merged(o) for o in outputs], merged_values, stride_dims, originals,
                  contiguity, k)


def _map(fn, x):
    if isinstance(x, tuple):
        return tuple(_map(fn, i) for i in x)
    return fn(x)
