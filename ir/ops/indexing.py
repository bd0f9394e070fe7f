"""Indexing and splitting: basic indexing (`x[1:, None, ..., 0]`: one `slice` prim, then a
reshape for the dims dropped or added), `narrow`, `split`, `split_with_sizes`, `chunk` and
`unbind`, as eager's views of the input. Indexing with tensors stays an opaque torch call (its
shape rule is `advanced_index` in `ir.ops.opaque`). The prims and their grad rules are
`ir.ops.movement`'s.
"""
from __future__ import annotations

import torch

from ir.ops.movement import reshape, slice_p
from ir.ops.registry import register
from ir.ops.shapes import _dim
from ir.proxies import TensorProxy, hint, same_size
from ir.recording import bind, opaque, specialize


def _clamp_index(i, size):
    if i < 0:
        i = i + size
        if i < 0:
            i = 0
    elif i > size:
        i = size
    return i


def _slice_bounds(s: slice, size):
    step = 1 if s.step is None else specialize(s.step)
    if step <= 0:
        raise ValueError("slice step must be positive")
    start = 0 if s.start is None else _clamp_index(s.start, size)
    stop = size if s.stop is None else _clamp_index(s.stop, size)
    if stop < start:
        stop = start
    return start, stop, step


def slice_dims(x, bounds):
    """One slice prim over all dims; bounds is a list of (start, stop, step); skips identities."""
    if all(same_size(start, 0) and same_size(stop, size) and step == 1
           for (start, stop, step), size in zip(bounds, x.shape)):
        return x
    starts, stops, steps = zip(*bounds) if bounds else ((), (), ())
    return bind(slice_p, x, tuple(starts), tuple(stops), tuple(steps))


@register(torch.Tensor.__getitem__, methods=("__getitem__",))
def getitem(x, index):
    index = index if isinstance(index, tuple) else (index,)
    if any(isinstance(i, (TensorProxy, torch.Tensor, list)) for i in index):
        return opaque(torch.Tensor.__getitem__, (x, index), {})
    consumed = sum(1 for i in index if i is not None and i is not Ellipsis)
    if consumed > x.ndim:
        raise IndexError(f"too many indices for a tensor of rank {x.ndim}")
    if Ellipsis in index:
        at = index.index(Ellipsis)
        index = index[:at] + (slice(None),) * (x.ndim - consumed) + index[at + 1:]
    else:
        index = index + (slice(None),) * (x.ndim - consumed)
    bounds, dim = [], 0
    for i in index:
        if i is None:
            continue
        size = x.shape[dim]
        if isinstance(i, slice):
            start, stop, step = _slice_bounds(i, size)
            bounds.append((start, stop, step))
        else:
            if not -size <= i < size:
                raise IndexError(f"index {hint(i)} is out of bounds for dim {dim} of size "
                                 f"{hint(size)}")
            start = i + size if i < 0 else i
            bounds.append((start, start + 1, 1))
        dim += 1
    sliced = slice_dims(x, bounds)
    shape = []
    for i, size in zip((i for i in index if i is not None), sliced.shape):
        if isinstance(i, slice):
            shape.append(size)
    shape = iter(shape)
    return reshape(sliced, tuple(1 if i is None else next(shape)
                                 for i in index if i is None or isinstance(i, slice)))


@register(torch.narrow, torch.Tensor.narrow, methods=("narrow",))
def narrow(input, dim, start, length):
    d = _dim(dim, input.ndim)
    if start < 0:       # eager wraps a negative start once (its range was checked)
        start = start + input.shape[d]
    return getitem(input, (slice(None),) * d + (slice(start, start + length),))


def _pieces(input, d, lengths):
    """Slices of input along dim d of these lengths, in order (eager's split views); the last
    ends at the dim's size."""
    bounds = [(0, s, 1) for s in input.shape]
    pieces, start = [], 0
    for k, length in enumerate(lengths):
        stop = input.shape[d] if k == len(lengths) - 1 else start + length
        pieces.append(slice_dims(input, bounds[:d] + [(start, stop, 1)] + bounds[d + 1:]))
        start = stop
    return tuple(pieces)


def _split(input, split_size, dim):
    """Eager's split: pieces of split_size, the last one shorter, at least one piece. With
    runtime sizes each comparison is a guard of the entry, so one entry serves every size that
    gives the same number of pieces."""
    d = _dim(dim, input.ndim)
    size, lengths, start = input.shape[d], [], 0
    while start + split_size < size:
        lengths.append(split_size)
        start = start + split_size
    return _pieces(input, d, lengths + [size - start])


@register(torch.split)
def split(tensor, split_size_or_sections, dim=0):
    if isinstance(split_size_or_sections, (tuple, list)):
        return split_with_sizes(tensor, split_size_or_sections, dim)
    return _split(tensor, split_size_or_sections, dim)


@register(torch.Tensor.split, methods=("split",))
def split_method(self, split_size, dim=0):
    return split(self, split_size, dim)


@register(torch.split_with_sizes, torch.Tensor.split_with_sizes, methods=("split_with_sizes",))
def split_with_sizes(input, split_sizes, dim=0):
    d = _dim(dim, input.ndim)
    total = 0
    for s in split_sizes:
        total = total + s
    if total != input.shape[d]:     # a guard where the dim's size is a runtime one
        raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to "
                           f"{hint(input.shape[d])}, but got split_sizes={list(split_sizes)}")
    return _pieces(input, d, list(split_sizes))


@register(torch.chunk, torch.Tensor.chunk, methods=("chunk",))
def chunk(input, chunks, dim=0):
    """Eager's chunk: split by ceil(size / chunks), so fewer than `chunks` pieces may come
    back; a dim of size 0 gives `chunks` empty pieces."""
    d = _dim(dim, input.ndim)
    size = input.shape[d]
    if size == 0:
        return _pieces(input, d, [0] * chunks)
    return _split(input, (size + chunks - 1) // chunks, d)


@register(torch.unbind, torch.Tensor.unbind, methods=("unbind",))
def unbind(input, dim=0):
    """One slice per index of the dim, each without the dim (its count is a constant: the
    dim's size is specialized)."""
    d = _dim(dim, input.ndim)
    return tuple(getitem(input, (slice(None),) * d + (i,))
                 for i in range(specialize(input.shape[d])))
