"""The lowering of data movement: slice, pad, cat, broadcast, permute, reshape and copy move or
mask the output index on its way to the loads (slice: add the start; pad: subtract the low width
and mask; cat: select a piece by comparing the index with the piece offsets; broadcast: drop the
index; permute: reorder it; reshape: through the linear index, or dim by dim where the inner
dims pair up), narrowing the vectorization `Path` where a boundary breaks it. Also each prim's
part in the inner-dim merge (`triton_exec.merge`). Registers each prim's rule on import;
imports `kernel_types` and `loads` from this package.
"""
from __future__ import annotations

import math

from ir import prims
from ir.proxies import same_shape, same_size
from triton_exec import index, vectorize
from triton_exec.codegen import loads
from triton_exec.codegen.kernel_types import is_constant, known
from triton_exec.rules import register


def _slice(w, eqn, idx, mask, path):
    t, starts, stops, steps = eqn.args
    new, inner = [], len(idx) - 1
    for d, (i, start, step) in enumerate(zip(idx, starts, steps)):
        new.append(index.add(index.mul(i, step), w.size(start, inner=d == inner)))
        if d == inner:
            path = path.through(start, t.shape[d]) if step == 1 else path.broken()
    return w.value(t, new, mask, path, "slice")


def _pad(w, eqn, idx, mask, path):
    t, config = eqn.args
    new, valid, inner = [], index.TRUE, len(idx) - 1
    for d, (i, (lo, hi)) in enumerate(zip(idx, config)):
        if known(lo) and known(hi) and lo == hi == 0:
            new.append(i)
            continue
        lo_i, size_i = w.size(lo, inner=d == inner), w.size(t.shape[d], inner=d == inner)
        upper = index.less(i, index.add(lo_i, size_i))
        valid = valid & index.at_least(i, lo_i) & upper
        new.append(index.add(i, index.mul(lo_i, -1)))
        if d == inner:      # the shift by lo; the end of the input where its mask is not
            # decided by the columns' bounds (a column chunk inside the input: wide loads)
            path = path.through(lo, hi, t.shape[d]) if upper.atoms else path.through(lo)
    pad_value = eqn.params["value"]
    if valid.false:
        return w.constant_tile(pad_value, eqn.out.dtype)
    cond = w.mask_name(valid, "inside the unpadded input") if valid.atoms else None
    inner_value = w.value(t, new, mask & valid, path, "pad")
    if cond is None or (inner_value in w.loaded.values() and _plus_zero(pad_value)):
        return inner_value      # a load masked by `cond` too: its `other=0` is the pad value
    return w.let("v", f"tl.where({cond}, {inner_value}, "
                      f"{w.value(pad_value, [], index.TRUE, path)})")


def _plus_zero(x) -> bool:
    """Whether a pad value is the `other=0` of a masked load, bit for bit (not -0.0; a runtime
    number is not known to be)."""
    return isinstance(x, (int, float)) and x == 0 and math.copysign(1.0, x) > 0


def _cat(w, eqn, idx, mask, path):
    pieces, d = eqn.args[0], eqn.params["dim"]
    i, inner = idx[d], d == len(idx) - 1
    offsets = [index.Const(0)]
    for p in pieces:
        offsets.append(index.add(offsets[-1], w.size(p.shape[d], inner)))
    values, live = [], []
    for k, p in enumerate(pieces):
        # lanes the mask keeps have 0 <= i < the cat's extent: the outer bounds go unsaid
        piece = (index.at_least(i, offsets[k]) if k else index.TRUE) & (
            index.less(i, offsets[k + 1]) if k < len(pieces) - 1 else index.TRUE)
        if piece.false:
            continue
        what = f"cat piece {k} of {len(pieces)}"
        piece_mask = mask & piece
        if piece.atoms:
            w.mask_name(piece_mask, what)
        piece_idx = list(idx)
        piece_idx[d] = index.add(i, index.mul(offsets[k], -1))
        piece_path = path.through(*_boundaries(pieces, d, k)) if inner else path
        values.append(w.value(p, piece_idx, piece_mask, piece_path, what))
        live.append(k)
    result = values[-1]
    for value, k in zip(reversed(values[:-1]), reversed(live[:-1])):
        cond = index.less(i, offsets[k + 1])
        if cond.false:
            continue
        if not cond.atoms:
            result = value
            continue
        cond = w.render.atom(w.tiled_atom(cond.atoms[0]))
        result = w.let("v", f"tl.where({cond}, {value}, {result})")
    return result


def _boundaries(pieces, d, k):
    """Values whose gcd divides piece k's start and end offsets: the offsets themselves where
    the sizes are known, else their known parts summed and each runtime size."""
    start, runtime = 0, []
    for p in pieces[:k]:
        if known(p.shape[d]):
            start += p.shape[d]
        else:
            runtime.append(p.shape[d])
    size = pieces[k].shape[d]
    end = start + size if known(size) else start
    return [start, end] + runtime + ([] if known(size) else [size])


def _broadcast(w, eqn, idx, mask, path):
    t, shape = eqn.args
    dims = eqn.params["dims"]
    new = []
    for j, d in enumerate(dims):
        s = t.shape[j]
        broadcast = known(s) and s == 1 and not (known(shape[d]) and shape[d] == 1)
        new.append(index.Const(0) if broadcast else idx[d])
    if t.ndim and (len(idx) - 1 not in dims or new[-1] == index.Const(0)):
        path = path.broken()
    # the bound of a smaller output of a horizontal fusion on a dim this input does not read
    dropped = [idx[d] for d in range(len(idx)) if d not in dims
               or new[dims.index(d)] == index.Const(0)]
    mask = index.Mask(tuple(a for a in mask.atoms
                            if a not in w.nested_atoms or a.a not in dropped))
    return w.value(t, new, mask, path)


def _permute(w, eqn, idx, mask, path):
    t = eqn.args[0]
    perm = eqn.params["perm"]
    new = [None] * len(perm)
    for i, p in enumerate(perm):
        new[p] = idx[i]
    if perm and perm[-1] != len(perm) - 1:
        path = path.broken()
    return w.value(t, new, mask, path)


def _linear(w, idx, shape):
    """Row-major linear index of idx in shape."""
    linear, stride = index.Const(0), index.Const(1)
    for i, s in zip(reversed(idx), reversed(shape)):
        linear = index.add(linear, index.mul(i, stride))
        stride = index.mul(stride, w.size(s))
    return linear


def _delinear(w, flat, shape, comment: str = "") -> list:
    """Index in shape of the row-major linear index `flat`; `flat` is bound to a name (with
    `comment`) when its divisions do not all fold away (`(cols + rows * 32) // 32` is `rows`)."""
    new, inner = [], index.Const(1)
    for k, s in enumerate(reversed(shape)):   # flat >= 0 wherever the mask keeps a lane
        size = w.size(s)
        quotient = index.floordiv(flat, inner, live_nonneg=True)
        # the outermost index needs no remainder: flat < the product of the sizes
        new.append(quotient if k == len(shape) - 1 else index.mod(quotient, size,
                                                                   live_nonneg=True))
        inner = index.mul(inner, size)
    if comment and any(_divides(e, flat) for e in new):
        w.bound(flat, comment)
    return list(reversed(new))


def _divides(e, flat) -> bool:
    """Whether e divides or takes the remainder of `flat` itself (an unfolded division)."""
    if isinstance(e, (index.FloorDiv, index.Mod)):
        return e.a == flat or _divides(e.a, flat)
    if isinstance(e, index.Sum):
        return any(_divides(t, flat) for t, _ in e.terms)
    return False


def _suffixes(shape, in_shape):
    """(j, i): the shortest suffixes shape[j:] and in_shape[i:] (a dim at least each) whose
    products are equal, by the sizes in this call (a guard keeps runtime ones equal); None
    when there are none."""
    if not shape or not in_shape:
        return None
    if same_size(shape[-1], in_shape[-1]):
        return len(shape) - 1, len(in_shape) - 1
    j, i = len(shape) - 1, len(in_shape) - 1
    p, q = vectorize.hint_of(shape[j]), vectorize.hint_of(in_shape[i])
    while p != q:
        if p < q:
            j -= 1
            if j < 0:
                return None
            p *= vectorize.hint_of(shape[j])
        else:
            i -= 1
            if i < 0:
                return None
            q *= vectorize.hint_of(in_shape[i])
    return j, i


def _reshape(w, eqn, idx, mask, path):
    """A reshape moves indices only. Where the output's and the input's innermost dims pair up
    (suffixes with one product: the output splits the input's innermost dim, or merges inner
    dims of an input of the group whose strides compose), the input's innermost index is the
    output's inner index, linear: contiguous along the columns, with the gcd rule's width over
    both innermost extents. Otherwise the index goes through the flat index (V = 1)."""
    t, shape = eqn.args
    kept_out = [i for i, s in zip(idx, shape) if not known(s) or s != 1]
    kept_in = [s for s in t.shape if not known(s) or s != 1]
    pairs = list(zip(kept_in, [s for s in shape if not known(s) or s != 1]))
    # a size and one a guard made it (the target shape keeps the traced size: (i0, n, 1) of a
    # tensor of shape (2, n) once i0 is 2), equal in this call: guarded equal
    if len(kept_out) == len(kept_in) and all(
            same_size(a, b) or vectorize.hint_of(a) == vectorize.hint_of(b) for a, b in pairs):
        w.guards += [("eq", a, b) for a, b in pairs if not same_size(a, b)]
        it = iter(kept_out)
        new = [next(it) if not known(s) or s != 1 else index.Const(0) for s in t.shape]
        return w.value(t, new, mask, path)
    found = _suffixes(shape, t.shape)
    if found is not None:
        j, i = found
        if not all(known(s) for s in (*shape[j:], *t.shape[i:])) and not (
                i == t.ndim - 1 and j == len(shape) - 1):
            w.guards.append(("numel_eq", tuple(shape[j:]), tuple(t.shape[i:])))
        for extent in (shape[-1], t.shape[-1]):     # runtime extents the width rests on
            w.size(extent, inner=True)
        inner = _linear(w, idx[j:], shape[j:])
        outer = _delinear(w, _linear(w, idx[:j], shape[:j]), t.shape[:i],
                          "outer index through a reshape")
        view = t if i == t.ndim - 1 else loads.merged_view(w, t, i)
        if view is not None:
            new = outer + [inner]
        else:   # inner dims of a value the group computes: the inner index taken apart
            view, new = t, outer + _delinear(w, inner, t.shape[i:], "inner index through a reshape")
        walks = index.coefficient(new[-1], w.cols) == 1
        return w.value(view, new, mask,
                       path.through(shape[-1], t.shape[-1]) if walks else path.broken())
    flat = _linear(w, idx, shape)
    new = _delinear(w, flat, t.shape, "linear index through a reshape")
    # contiguous where the innermost index still walks the columns one by one (the divisions
    # fold over a column chunk that no multiple of the inner sizes crosses); the rest of it
    # (a multiple of its divisor) shifts the vectors' alignment
    if t.ndim and index.coefficient(new[-1], w.cols) == 1:
        shift = index.add(new[-1], index.mul(w.cols, -1))
        return w.value(t, new, mask, path.through(shift.divisor))
    return w.value(t, new, mask, path.broken())


def _copy(w, eqn, idx, mask, path):
    """A copy is the value itself: the kernel's store is the new memory."""
    return w.value(eqn.args[0], idx, mask, path)


# ---- each prim's part in the inner-dim merge (`triton_exec.merge`) ---------------------------

def _squeezed(eqn, k) -> bool:
    """Whether the merge at dim k only drops trailing dims of size 1 (`triton_exec.merge`):
    dim k's bounds need not be constants then (nothing scales them)."""
    return all(is_constant(s, 1) for s in eqn.out.shape[k + 1:])


def _scaled(x, inner):
    return x if inner == 1 else x * inner


def _slice_merges(eqn, k) -> bool:
    t, starts, stops, steps = eqn.args
    r = t.ndim
    return (steps[k] == 1 and (_squeezed(eqn, k) or known(starts[k]) and known(stops[k]))
            and all(is_constant(starts[d], 0) and same_size(stops[d], t.shape[d])
                    and steps[d] == 1 for d in range(k + 1, r)))


def _slice_merged(eqn, args, params, k, inner):
    t, starts, stops, _ = args
    return (t, starts[:k] + (_scaled(starts[k], inner),), stops[:k] + (_scaled(stops[k], inner),),
            eqn.args[3][:k + 1]), params


def _pad_merges(eqn, k) -> bool:
    config = eqn.args[1]
    return (_squeezed(eqn, k) or known(config[k][0]) and known(config[k][1])) and all(
        is_constant(lo, 0) and is_constant(hi, 0) for lo, hi in config[k + 1:])


def _pad_merged(eqn, args, params, k, inner):
    config = args[1]
    return (args[0], config[:k] + ((_scaled(config[k][0], inner), _scaled(config[k][1], inner)),)), params


def _broadcast_merges(eqn, k) -> bool:
    t, shape = eqn.args
    dims, r = eqn.params["dims"], len(shape)
    return (len(dims) == t.ndim and dims[-(r - k):] == tuple(range(k, r))
            and same_shape(t.shape[-(r - k):], shape[k:]))


def _broadcast_merged(eqn, args, params, k, inner):
    t, shape = args
    return (t, tuple(shape[:k]) + (shape[k] * inner,)), dict(params, dims=params["dims"][:t.ndim])


def _never(eqn, k) -> bool:
    return False


register(prims.copy, lower=_copy)
register(prims.slice_, lower=_slice, view=True, merges=_slice_merges, merged=_slice_merged)
register(prims.pad, lower=_pad, merges=_pad_merges, merged=_pad_merged)
register(prims.cat, lower=_cat, merges=lambda eqn, k: eqn.params["dim"] <= k)
register(prims.broadcast_in_dim, lower=_broadcast, view=True, merges=_broadcast_merges,
         merged=_broadcast_merged)
register(prims.permute, lower=_permute, view=True, merges=_never)
register(prims.reshape, lower=_reshape, view=True, merges=_never)
