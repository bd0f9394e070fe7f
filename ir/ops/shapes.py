"""Shape arithmetic shared by the op families: the metas' "like this tensor" (`_same`),
PyTorch's broadcast of symbolic shapes, dims and element counts, and size arguments given as
varargs or as one sequence. Pure functions of shapes (sizes may be `IntProxy`s, whose
comparisons the tracer guards).
"""
from __future__ import annotations

import operator

import torch

from ir.proxies import IntProxy, TensorProxy, hint


def _same(t, dtype=None, shape=None):
    return [(t.shape if shape is None else tuple(shape), dtype or t.dtype, t.device)]


def _first_tensor(*xs):
    return next((x for x in xs if isinstance(x, TensorProxy)), None)


def _is_one(s) -> bool:
    """A derived size that is 1 in this call (`i0 - 1`) broadcasts as in eager: guarded == 1."""
    if isinstance(s, IntProxy):
        return s.hint == 1 and s == 1
    return s == 1


def broadcast_shape(*shapes):
    """PyTorch's broadcast of symbolic shapes; equal symbolic sizes are guarded equal."""
    ndim = max(len(s) for s in shapes)
    out = []
    for i in range(ndim):
        sizes = [s[i - ndim + len(s)] for s in shapes if i - ndim + len(s) >= 0]
        real = [d for d in sizes if not _is_one(d)]
        if not real:
            out.append(1)
            continue
        chosen = next((d for d in real if not isinstance(d, IntProxy)), real[0])
        for d in real:
            if d is not chosen and d != chosen:
                raise RuntimeError(f"shapes {[tuple(map(hint, s)) for s in shapes]} "
                                   f"cannot be broadcast together (dim {i})")
        out.append(chosen)
    return tuple(out)


def _numel(shape):
    n = 1
    for s in shape:
        n = n * s
    return n


def _dim(d, ndim):
    d = operator.index(d)
    if not -max(ndim, 1) <= d < max(ndim, 1):
        raise IndexError(f"dimension {d} out of range for a tensor of rank {ndim}")
    return d % max(ndim, 1)


def _sizes(args):
    if len(args) == 1 and isinstance(args[0], (tuple, list, torch.Size)):
        return tuple(args[0])
    return tuple(args)
