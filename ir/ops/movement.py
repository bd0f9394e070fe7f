"""Data movement: the prims that move, drop or copy elements without computing on them
(`broadcast_in_dim`, `slice`, `pad`, `cat`, `reshape`, `permute`, `copy`), their torch mapping
(views and resizes: `view`, `reshape`, `flatten`, `squeeze`, `permute`, `transpose`, `expand`,
`cat`, `stack`, `F.pad`; indexing and splitting are `ir.ops.indexing`; copies: `clone`,
`contiguous`, `.to`), what eager's layout of a view is (`layout_meta`, which decides where a
reshape copies), and their grad rules: the gradient of a pad is a slice of the gradient, of a
slice a zero pad, of a cat one slice per piece, of a broadcast a sum over the broadcast dims.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ir.ops.casts import convert
from ir.ops.registry import (PRIMS, PROPERTIES, TORCH_SOURCE, define, grad_rule, register,
                             shape_rule)
from ir.ops.scalars import meta_dtype, stored_scalar
from ir.ops.shapes import _dim, _is_one, _numel, _same, _sizes
from ir.ops.vjp import _const, emit, needs_grad
from ir.proxies import IntProxy, TensorProxy, hint, same_size
from ir.recording import bind, current, opaque
from ir.trace import render


broadcast_in_dim_p = define("broadcast_in_dim", "tensor",
                            lambda t, shape, *, dims: _same(t, shape=shape))


def _slice_meta(t, starts, stops, steps):
    shape = [stop - start if step == 1 else (stop - start + step - 1) // step
             for start, stop, step in zip(starts, stops, steps)]
    return _same(t, shape=shape)


slice_p = define("slice", "tensor", _slice_meta)
pad_p = define("pad", "tensor", lambda t, config, *, value: _same(
    t, shape=[lo + s + hi for s, (lo, hi) in zip(t.shape, config)]))


def _cat_meta(tensors, *, dim):
    shape = list(tensors[0].shape)
    total = 0
    for t in tensors:
        total = total + t.shape[dim]
    shape[dim] = total
    return _same(tensors[0], shape=shape)


cat_p = define("cat", "tensor", _cat_meta)
# A copy into new memory (clone, cat of one tensor, zero pad, `.contiguous()` or a reshape of a
# view whose layout is not contiguous / cannot view: decided and guarded while tracing).
copy_p = define("copy", "elementwise", lambda t, *, memory_format: _same(t))
reshape_p = define("reshape", "tensor", lambda t, shape: _same(t, shape=shape))
permute_p = define("permute", "tensor",
                   lambda t, *, perm: _same(t, shape=[t.shape[p] for p in perm]))


def expand_to(t, shape):
    """broadcast_in_dim of t to `shape` (right-aligned, as PyTorch broadcasts)."""
    shape = tuple(shape)
    if len(t.shape) == len(shape) and all(same_size(a, b) for a, b in zip(t.shape, shape)):
        return t
    offset = len(shape) - len(t.shape)
    return bind(broadcast_in_dim_p, t, shape, dims=tuple(range(offset, len(shape))))


# ---- as torch runs them (`ir.executors.TorchExecutor`) --------------------------------------

def _is_zero(x) -> bool:
    return isinstance(x, int) and x == 0


def _slice_src(eqn):
    t, starts, stops, steps = eqn.args
    parts = [":" if _is_zero(a) and same_size(b, s) and c == 1 else
             f"{render(a)}:{render(b)}" + (f":{c}" if c != 1 else "")
             for a, b, c, s in zip(starts, stops, steps, t.shape)]
    full = next((i for i, p in enumerate(parts) if p != ":"), 0)
    if full:    # x[..., 0:8] indexes faster than x[:, :, :, 0:8]
        parts = ["..."] + parts[full:]
    return f"{t.name}[{', '.join(parts)}]"


def _pad_src(eqn):
    t, config = eqn.args
    first = min(i for i, (lo, hi) in enumerate(config) if not (_is_zero(lo) and _is_zero(hi)))
    widths = [w for lo_hi in reversed(config[first:]) for w in lo_hi]
    return f"F.pad({t.name}, {render(tuple(widths))}, value={render(eqn.params['value'])})"


def _broadcast_src(eqn):
    t, shape = eqn.args
    dims = eqn.params["dims"]
    src = t.name
    if len(dims) != len(shape):
        src += "[" + ", ".join(":" if d in dims else "None" for d in range(len(shape))) + "]"
    keep = {d: s for d, s in zip(dims, t.shape)}
    sizes = [-1 if d in keep and keep[d] is s else s for d, s in enumerate(shape)]
    return f"{src}.expand({render(tuple(sizes))})"


def _copy_src(eqn):
    x = eqn.args[0].name
    if eqn.params["memory_format"] == "contiguous":
        return f"{x}.clone(memory_format=torch.contiguous_format)"
    return f"{x}.clone()"


TORCH_SOURCE.update({
    copy_p: _copy_src,
    broadcast_in_dim_p: _broadcast_src,
    slice_p: _slice_src,
    pad_p: _pad_src,
    cat_p: lambda e: f"torch.cat({render(e.args[0])}, {e.params['dim']})",
    reshape_p: lambda e: f"{e.args[0].name}.reshape({render(tuple(e.args[1]))})",
    permute_p: lambda e: f"{e.args[0].name}.permute({render(e.params['perm'])})",
})


# ---- copies ---------------------------------------------------------------------------------

_FORMATS = (None, torch.preserve_format, torch.contiguous_format)


def copy(x, memory_format=torch.preserve_format):
    """New memory holding x (eager's clone, cat of one tensor, zero pad, ...)."""
    fmt = "contiguous" if memory_format is torch.contiguous_format else "preserve"
    return bind(copy_p, x, memory_format=fmt)


def contiguous_copy(x):
    """Eager's `.contiguous()`: x itself where its layout is contiguous already (an input's,
    guarded, or the one the views that made x give it: `layout_meta`; a computed value is
    contiguous), else a copy into new memory."""
    if layout_meta(x).is_contiguous():
        return x
    return copy(x, torch.contiguous_format)


@register(torch.Tensor.to, methods=("to",))
def to(x, *args, **kwargs):
    dtype, device = kwargs.get("dtype"), kwargs.get("device")
    flags = [a for a in args if isinstance(a, bool)]       # non_blocking, copy
    copy_ = kwargs.get("copy", flags[1] if len(flags) > 1 else False)
    memory_format = kwargs.get("memory_format")
    for a in args:
        if isinstance(a, torch.dtype):
            dtype = a
        elif isinstance(a, TensorProxy):
            dtype, device = a.dtype, a.device
        elif isinstance(a, (str, torch.device)):
            device = a
    if (device is not None and torch.device(device) != x.device) or memory_format not in _FORMATS:
        return opaque(torch.Tensor.to, (x, *args), kwargs)
    if dtype is not None and dtype != x.dtype:
        result = convert(x, dtype)
    elif copy_:
        return copy(x, memory_format or torch.preserve_format)
    else:
        result = x
    if memory_format is torch.contiguous_format:
        return contiguous_copy(result)
    return result


@register(torch.Tensor.contiguous, methods=("contiguous",))
def contiguous(x, memory_format=torch.contiguous_format):
    if memory_format not in _FORMATS[1:]:
        return opaque(torch.Tensor.contiguous, (x,), {"memory_format": memory_format})
    return contiguous_copy(x)


@register(torch.clone, torch.Tensor.clone, methods=("clone",))
def clone(input, *, memory_format=torch.preserve_format):
    if memory_format not in _FORMATS:
        return opaque(torch.clone, (input,), {"memory_format": memory_format})
    return copy(input, memory_format or torch.preserve_format)


@register(torch.Tensor.cpu, methods=("cpu",))
def cpu(input, memory_format=torch.preserve_format):
    return to(input, "cpu", memory_format=memory_format)


# ---- views and resizes ----------------------------------------------------------------------

def _matrix_transpose(input):
    if input.ndim < 2:
        raise RuntimeError(f"tensor.mT is only supported on matrices or batches of matrices. Got "
                           f"{input.ndim}-D tensor.")
    return transpose(input, -2, -1)


# Attributes that compute a tensor (`x.T`); real dtypes only, so H and mH are T and mT.
PROPERTIES.update({"T": lambda input: permute(input, tuple(reversed(range(input.ndim)))),
                   "mT": _matrix_transpose})
PROPERTIES["H"], PROPERTIES["mH"] = PROPERTIES["T"], PROPERTIES["mT"]


@register(torch.Tensor.view, methods=("view",))
def view(x, *shape, size=None):
    """reshape, where eager's view of x's layout exists: its error (a view across non-mergeable
    strides) otherwise, checked on a meta tensor laid out as x is (`layout_meta`)."""
    shape = _sizes(shape) if size is None else tuple(size)
    if len(shape) == 1 and isinstance(shape[0], torch.dtype):
        return opaque(torch.Tensor.view, (x, shape[0]), {})
    layout_meta(x).view([hint(s) for s in shape])
    return reshape(x, *shape)


def layout_meta(x, guard: bool = True) -> torch.Tensor:
    """A meta tensor with the strides eager gives x: an input's own (guarded unless not `guard`:
    contiguity, and the strides of a non-contiguous input), views of it derived through the view
    prims that made x, contiguous for anything computed."""
    ctx = current()
    sizes = [hint(s) for s in x.shape]
    if id(x) in ctx.input_layouts:
        strides, is_contiguous = ctx.input_layouts[id(x)]
        if not guard:
            return torch.empty_strided(sizes, strides, dtype=x.dtype, device="meta")
        ctx.add_guard(("contiguous", x, is_contiguous))
        if not is_contiguous:
            for d, stride in enumerate(strides):
                ctx.add_guard(("stride_eq", x, (d, stride)))
        return torch.empty_strided(sizes, strides, dtype=x.dtype, device="meta")
    eqn = next((e for e in reversed(ctx.eqns) if any(o is x for o in e.outs)), None)
    if eqn is None or eqn.prim.name not in ("slice", "reshape", "permute", "broadcast_in_dim"):
        return torch.empty(sizes, dtype=x.dtype, device="meta")
    base = layout_meta(eqn.args[0], guard)
    if eqn.prim is slice_p:
        _, starts, stops, steps = eqn.args
        return base[tuple(slice(hint(a), hint(b), c) for a, b, c in zip(starts, stops, steps))]
    if eqn.prim is permute_p:
        return base.permute(eqn.params["perm"])
    if eqn.prim is reshape_p:
        try:
            return base.view(sizes)
        except RuntimeError:        # eager's reshape copies: contiguous
            return torch.empty(sizes, dtype=x.dtype, device="meta")
    dims, strides = eqn.params["dims"], [0] * len(sizes)
    for j, d in enumerate(dims):
        if base.shape[j] == sizes[d]:
            strides[d] = base.stride(j)
    return base.as_strided(sizes, strides, base.storage_offset())


@register(torch.reshape, torch.Tensor.reshape, methods=("reshape",))
def reshape(input, *sizes, shape=None):
    shape = _sizes(sizes) if shape is None else tuple(shape)
    if len(shape) == 1 and isinstance(shape[0], torch.dtype):
        return opaque(torch.Tensor.view, (input, shape[0]), {})
    if len(shape) == input.ndim and all(same_size(a, b) for a, b in zip(shape, input.shape)):
        return input
    numel = _numel(input.shape)
    if sum(1 for s in shape if not isinstance(s, IntProxy) and s == -1) > 1:
        raise RuntimeError("only one dimension can be inferred")
    if any(not isinstance(s, IntProxy) and s == -1 for s in shape):
        known = _numel([s for s in shape if isinstance(s, IntProxy) or s != -1])
        if known == 0:
            raise RuntimeError(f"cannot reshape tensor of {hint(numel)} elements into {shape}")
        shape = tuple(numel // known if not isinstance(s, IntProxy) and s == -1 else s
                      for s in shape)
    if _numel(shape) != numel:
        raise RuntimeError(f"shape {tuple(map(hint, shape))} is invalid for input of size "
                           f"{hint(numel)}")
    if _reshape_copies(input, shape):     # eager's reshape: a contiguous copy, viewed
        input = copy(input, torch.contiguous_format)
    return bind(reshape_p, input, shape)


def _reshape_copies(x, shape) -> bool:
    """Whether eager's reshape of x to `shape` copies: x's layout (an input's, or a view's of
    it: `layout_meta`) cannot view as `shape`; the layout is then guarded. Where it can, the
    reshape prim serves every layout unguarded (torch's reshape where it runs alone, index
    math in a kernel)."""
    sizes = [hint(s) for s in shape]
    try:
        layout_meta(x, guard=False).view(sizes)
    except RuntimeError:
        layout_meta(x)
        return True
    return False


@register(torch.Tensor.reshape_as, methods=("reshape_as",))
def reshape_as(x, other):
    return reshape(x, other.shape)


@register(torch.Tensor.view_as, methods=("view_as",))
def view_as(x, other):
    return view(x, other.shape)


@register(torch.flatten, torch.Tensor.flatten, methods=("flatten",))
def flatten(input, start_dim=0, end_dim=-1):
    if input.ndim == 0:
        return reshape(input, (1,))
    start, end = _dim(start_dim, input.ndim), _dim(end_dim, input.ndim)
    merged = _numel(input.shape[start:end + 1])
    return reshape(input, input.shape[:start] + (merged,) + input.shape[end + 1:])


@register(torch.unflatten, torch.Tensor.unflatten, methods=("unflatten",))
def unflatten(input, dim, sizes):
    """reshape splitting dim `dim` into `sizes` (one of them may be -1), checked as eager does."""
    d = _dim(dim, input.ndim)
    sizes = tuple(sizes)
    inferred = [k for k, s in enumerate(sizes) if not isinstance(s, IntProxy) and s == -1]
    if not sizes or len(inferred) > 1:
        raise RuntimeError("unflatten: provide non-empty sizes with at most one -1")
    size = input.shape[d]
    if inferred:
        known = _numel([s for k, s in enumerate(sizes) if k != inferred[0]])
        if known == 0 or size % known != 0:
            raise RuntimeError(f"unflatten: Provided sizes {list(map(hint, sizes))} don't "
                               f"multiply up to the size of dim {d} ({hint(size)}) in the input "
                               f"tensor")
        sizes = tuple(size // known if k == inferred[0] else s for k, s in enumerate(sizes))
    elif _numel(sizes) != size:
        raise RuntimeError(f"unflatten: Provided sizes {list(map(hint, sizes))} don't multiply "
                           f"up to the size of dim {d} ({hint(size)}) in the input tensor")
    return reshape(input, tuple(input.shape[:d]) + sizes + tuple(input.shape[d + 1:]))


@register(torch.unsqueeze, torch.Tensor.unsqueeze, methods=("unsqueeze",))
def unsqueeze(input, dim):
    d = _dim(dim, input.ndim + 1)
    return reshape(input, input.shape[:d] + (1,) + input.shape[d:])


@register(torch.squeeze, torch.Tensor.squeeze, methods=("squeeze",))
def squeeze(input, dim=None):
    if dim is None:
        dims = range(input.ndim)
    else:
        dims = [_dim(d, input.ndim) for d in (dim if isinstance(dim, (tuple, list)) else (dim,))]
    drop = {d for d in dims if input.shape[d] == 1}
    return reshape(input, tuple(s for d, s in enumerate(input.shape) if d not in drop))


@register(torch.permute, torch.Tensor.permute, methods=("permute",))
def permute(input, *perm, dims=None):
    perm = tuple(_dim(d, input.ndim) for d in (_sizes(perm) if dims is None else dims))
    if sorted(perm) != list(range(input.ndim)):
        raise RuntimeError(f"permute: {perm} is not a permutation of the dims of a rank-{input.ndim} "
                           "tensor")
    if perm == tuple(range(input.ndim)):
        return input
    return bind(permute_p, input, perm=perm)


@register(torch.transpose, torch.Tensor.transpose, torch.swapaxes, torch.Tensor.swapaxes,
          methods=("transpose", "swapaxes"))
def transpose(input, dim0, dim1):
    perm = list(range(input.ndim))
    a, b = _dim(dim0, input.ndim), _dim(dim1, input.ndim)
    perm[a], perm[b] = perm[b], perm[a]
    return permute(input, perm)


@register(torch.Tensor.t, torch.t, methods=("t",))
def t(x):      # x.ndim <= 2: eager's check ran first (`dispatch.eager_checks`)
    return transpose(x, 0, 1) if x.ndim == 2 else x


@register(torch.Tensor.expand, methods=("expand",))
def expand(input, *sizes, size=None):
    sizes = _sizes(sizes) if size is None else tuple(size)
    if len(sizes) < input.ndim:
        raise RuntimeError(f"expand: {len(sizes)} sizes given for a rank-{input.ndim} tensor")
    offset = len(sizes) - input.ndim
    shape = []
    for i, s in enumerate(sizes):
        own = input.shape[i - offset] if i >= offset else 1
        if not isinstance(s, IntProxy) and s == -1:
            shape.append(own)
        elif _is_one(own) or own is s or own == s:
            shape.append(s)
        else:
            raise RuntimeError(f"expand: size {hint(own)} of dim {i - offset} cannot become "
                               f"{hint(s)}")
    return expand_to(input, shape)


@register(torch.Tensor.expand_as, methods=("expand_as",))
def expand_as(x, other):
    return expand(x, other.shape)


@register(torch.broadcast_to)
def broadcast_to(input, size):
    return expand(input, size)


def _legacy_empty(t) -> bool:
    """A 1-d tensor of size 0 (`torch.tensor([])`), which eager's cat skips (a KV cache starts as
    one) but for the dtype of the result."""
    return t.ndim == 1 and type(t.shape[0]) is int and t.shape[0] == 0


@register(torch.cat, torch.concat, torch.concatenate)
def cat(tensors, dim=0):
    tensors = list(tensors)
    if not tensors:
        raise RuntimeError("torch.cat(): expected a non-empty list of tensors")
    kept = [t for t in tensors if not _legacy_empty(t)] or tensors
    ndim = kept[0].ndim
    d = _dim(dim, ndim)
    dtype = meta_dtype(lambda *ts: torch.cat(ts, d), *tensors)
    tensors = kept
    for t in tensors[1:]:
        if t.ndim != ndim:
            raise RuntimeError(f"torch.cat(): tensors must have the same rank, got {ndim} and "
                               f"{t.ndim}")
        for i in range(ndim):
            if i != d and t.shape[i] is not tensors[0].shape[i] and t.shape[i] != tensors[0].shape[i]:
                raise RuntimeError(f"torch.cat(): sizes of dim {i} differ")
    pieces = [convert(t, dtype) for t in tensors]
    if len(pieces) == 1:        # new memory, as eager's cat returns, even of one tensor
        return pieces[0] if pieces[0] is not tensors[0] else copy(pieces[0], torch.contiguous_format)
    return bind(cat_p, tuple(pieces), dim=d)


@register(torch.stack)
def stack(tensors, dim=0):
    tensors = list(tensors)
    d = _dim(dim, tensors[0].ndim + 1)
    return cat([unsqueeze(t, d) for t in tensors], d)


@register(F.pad)
def pad(input, pad, mode="constant", value=None):
    if mode != "constant":
        return opaque(F.pad, (input, pad), {"mode": mode, "value": value})
    return constant_pad(input, pad, value, F.pad)


@register(torch.constant_pad_nd)
def constant_pad_nd(input, pad, value=0):
    return constant_pad(input, pad, value, torch.constant_pad_nd)


def constant_pad(input, pad, value, eager):
    """A constant pad; `eager` (F.pad or torch.constant_pad_nd, which check the value
    differently) checks the value on a small tensor of the same rank and widths."""
    if len(pad) % 2 or len(pad) // 2 > input.ndim:
        raise ValueError(f"pad: {len(pad)} widths given for a rank-{input.ndim} tensor")
    config = [(0, 0)] * input.ndim
    for i in range(len(pad) // 2):
        config[input.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    for (lo, hi), s in zip(config, input.shape):
        if lo + s + hi < 0:
            raise RuntimeError(f"pad: resulting size {hint(lo + s + hi)} is negative")
    # eager's check of the value depends on the pad's rank and widths: run it on a small tensor
    small = [1 + max(0, -hint(lo)) + max(0, -hint(hi)) for lo, hi in config]
    value = stored_scalar(0 if value is None else value, input.dtype, lambda v: eager(
        torch.zeros(small, dtype=input.dtype), [hint(w) for w in pad], value=v))
    if all(not isinstance(v, IntProxy) and v == 0 for lh in config for v in lh):
        return copy(input)      # eager's zero pad is a clone
    return bind(pad_p, input, tuple(config), value=value)



# ---- shape rule of the calls left to torch (`ir.ops.opaque`) --------------------------------

@shape_rule(F.pad)
def _pad_shape(input, pad, mode="constant", value=None):
    """The shape of an `F.pad` left to torch (a mode other than "constant"): pads of (before,
    after) widths from the last dim backwards."""
    shape = list(input.shape)
    for i in range(len(pad) // 2):
        d = input.ndim - 1 - i
        shape[d] = shape[d] + pad[2 * i] + pad[2 * i + 1]
    return [tuple(shape)]


# ---- grad rules -----------------------------------------------------------------------------

@grad_rule(copy_p)
def _copy(eqn, cts):
    return [(eqn.args[0], cts[0])]


def _negated(x):
    return -x if _const(x) else 0 - x


@grad_rule(pad_p)
def _pad(eqn, cts):
    """The gradient of a pad is the gradient cropped back: a slice where no width is negative,
    else a pad by the negated widths (a negative width crops, a positive one zero-fills what
    the pad had cropped)."""
    t, config = eqn.args
    ct = cts[0]
    if all(_const(w) and w >= 0 for lo_hi in config for w in lo_hi):
        return [(t, emit(slice_p, ct, tuple(lo for lo, _ in config),
                         tuple(lo + s for (lo, _), s in zip(config, t.shape)),
                         (1,) * t.ndim, like=t))]
    negated = tuple((_negated(lo), _negated(hi)) for lo, hi in config)
    return [(t, emit(pad_p, ct, negated, value=0, like=t))]


@grad_rule(slice_p)
def _slice(eqn, cts):
    """The gradient of a slice: the gradient zero-padded back to the input's shape. A dim with a
    step k interleaves k - 1 zeros first (reshape to [m, 1], pad to [m, k], reshape to [m * k])."""
    t, starts, stops, steps = eqn.args
    ct = cts[0]
    config = []
    for d, (start, stop, step, size) in enumerate(zip(starts, stops, steps, t.shape)):
        if step != 1:
            m = ct.shape[d]
            split = tuple(ct.shape[:d]) + (m, 1) + tuple(ct.shape[d + 1:])
            spread = emit(pad_p, emit(reshape_p, ct, split),
                          tuple((0, step - 1) if j == d + 1 else (0, 0)
                                for j in range(len(split))), value=0)
            ct = emit(reshape_p, spread, tuple(ct.shape[:d]) + (m * step,)
                      + tuple(ct.shape[d + 1:]))
            stop = start + m * step
        config.append((start, size - stop))
    if all(_const(w) and w == 0 for lo_hi in config for w in lo_hi):
        return [(t, ct)]
    return [(t, emit(pad_p, ct, tuple(config), value=0, like=t))]


@grad_rule(cat_p)
def _cat(eqn, cts):
    pieces, d = eqn.args[0], eqn.params["dim"]
    ct = cts[0]
    result, offset = [], 0
    for p in pieces:
        end = offset + p.shape[d]
        if needs_grad(p):
            starts = tuple(offset if j == d else 0 for j in range(p.ndim))
            stops = tuple(end if j == d else s for j, s in enumerate(ct.shape))
            result.append((p, emit(slice_p, ct, starts, stops, (1,) * p.ndim, like=p)))
        offset = end
    return result


@grad_rule(broadcast_in_dim_p)
def _broadcast(eqn, cts):
    """Summed over the dims the broadcast added or stretched from 1 (torch runs the sum)."""
    t, shape = eqn.args
    dims = eqn.params["dims"]
    stretched = {d for j, d in enumerate(dims)
                 if _const(t.shape[j]) and t.shape[j] == 1 and not (
                     _const(shape[d]) and shape[d] == 1)}
    summed = tuple(d for d in range(len(shape)) if d not in dims or d in stretched)
    ct = cts[0]
    if summed:
        ct = emit(PRIMS["sum"], ct, dims=summed)
    return [(t, ct if not summed and ct.ndim == t.ndim else _reshaped(ct, t))]


def _reshaped(ct, like):
    """Cotangent ct reshaped to `like`'s shape as eager's reshape does it: copied first (a
    fusible copy) where its layout (a permute's of a computed value) cannot view, so no torch
    `reshape` copies it on its own. A view of a torch call's result (laid out as the call
    decides at run time) is left to torch's reshape, which views it where it can."""
    if not _of_torch_call(ct) and current().run(_reshape_copies, ct, like.shape):
        ct = copy(ct, torch.contiguous_format)
    return emit(reshape_p, ct, tuple(like.shape), like=like)


def _of_torch_call(x) -> bool:
    """Whether x is a torch call's result or a view of one (through the view prims)."""
    eqns = current().eqns
    while True:
        eqn = next((e for e in reversed(eqns) if any(o is x for o in e.outs)), None)
        if eqn is None or eqn.prim.name not in ("slice", "reshape", "permute",
                                                 "broadcast_in_dim"):
            return eqn is not None and eqn.prim.name == "opaque"
        x = eqn.args[0]


@grad_rule(reshape_p)
def _reshape(eqn, cts):
    t = eqn.args[0]
    return [(t, _reshaped(cts[0], t))]


@grad_rule(permute_p)
def _permute(eqn, cts):
    perm = eqn.params["perm"]
    inverse = tuple(sorted(range(len(perm)), key=perm.__getitem__))
    return [(eqn.args[0], emit(permute_p, cts[0], perm=inverse, like=eqn.args[0]))]
