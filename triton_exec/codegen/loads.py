"""Loads of a group's inputs at a vector width: the offset of an index into a tensor (its strides:
literals for a tensor torch makes, runtime strides passed divided by their guarded divisor), int32
or int64 offsets, the width the analysis allows and the guards it rests on (alignment, strides,
the span below 2**31), inner dims read as one (`merged_view`) and, under pair tiling, both
elements of a pair in one contiguous load split in registers, and the value a load gives
outside the tile's domain, where a reduction needs its neutral value there (`filled_outside`).
Functions take the kernel writer
`w` (`triton_exec.codegen.writer`, which calls `load`); imports `kernel_types`, `lowered` and
`narrow_tiles` from this package.
"""
from __future__ import annotations

import math

import torch

from ir import TensorProxy
from triton_exec import index, vectorize
from triton_exec.codegen import kernel_types
from triton_exec.codegen.kernel_types import COMPUTE_DTYPE, is_constant, known
from triton_exec.codegen.lowered import Access, Stride
from triton_exec.codegen.narrow_tiles import held_tile
from triton_exec.vectorize import Path


def load(w, t: TensorProxy, idx, mask, path: Path, what: str) -> str:
    """The kernel name of the tile of input t at index idx (one index node per dim of t) under
    `mask`, loaded at the width `path` and t's layout allow (`what`: which part, for the
    access's label)."""
    example = w.values.get(id(t))
    argument = example is not None       # the prologue can guard its layout
    constant = not argument and all(known(s) for s in t.shape)
    if not argument:    # made by torch in this computation: read as contiguous (the launcher
        w.contiguous_inputs.append(t.name)       # checks; `triton_exec.strided` otherwise)
        example = _contiguous_example(t if constant else w.originals.get(id(t), t))
    inner = t.ndim - 1
    original_dims = w.stride_dims.get(id(t), range(t.ndim))
    if argument:    # the kernel reads raw storage: a view with the negative bit must not come
        w.guards.append(("not_neg", t, None))
    _offsets_fit_int32(w, t, example, argument)
    layout = (example, constant, argument, original_dims)
    halves = _pair_dim_load(w, t, idx, mask, what, layout)
    if halves is not None:
        return halves
    terms, outer_strides, outer_dims = [], [], []
    unit = _unit_dim(w, t, example, argument, original_dims)     # channels_last's channels
    for d, (i, s) in enumerate(zip(idx, t.shape)):
        if known(s) and s == 1:
            continue
        od = d if constant else original_dims[d]
        if (d == inner and example.stride(od) == 1) or d == unit:
            if argument:
                w.guards.append(("stride_eq", t, (od, 1)))
            terms.append(i)
            continue
        if d != inner:
            outer_strides.append(example.stride(od) if argument or constant else 1)
            outer_dims.append(od)
        terms.append(_stride_term(w, t, i, od, layout))
    inner_stride = (example.stride(inner if constant else original_dims[inner])
                    if t.ndim else 0)
    walks = bool(idx) and t.ndim and index.coefficient(idx[-1], w.cols) == 1
    inner_path, axis = path if walks else path.broken(), "cols"
    if walks and w.shifted_cols and path.contiguous:    # a load-aligned column chunk: the
        # width is read from the index (the chunk's start, off the vector's multiples, is in it)
        inner_path = Path(min(index.aligned_run(idx[-1], mask, w.cols), vectorize.DIVISOR_CAP))
    if not walks and inner_stride == 1 and t.ndim and not is_constant(t.shape[-1], 1):
        w.across.append((idx[-1], example.element_size() * example.numel()))
        along_rows = w.row_axis and w.row_axis.gcd(idx[-1], index.add(*terms[:-1]), mask)
        if along_rows:      # contiguous along the rows of a transpose's tile
            inner_path, axis = Path(along_rows), "rows"
    if unit is not None and (loaded := _along_unit_dim(w, t, example, idx, terms, unit, mask,
                                                        original_dims, what)) is not None:
        return loaded
    dims = (original_dims[inner] if t.ndim else 0, outer_dims) if argument else None
    if w.pairs is not None and t.ndim and inner_stride == 1:
        if index.coefficient(idx[-1], w.cols) == 2 and not is_constant(t.shape[-1], 1):
            halves = _pair_load(w, t, example, terms[:-1], idx[-1], t.shape[-1], mask, what,
                                outer_strides, dims)
            if halves is not None:
                return halves
        # pair tiling: the width is what the index and the mask show Triton
        inner_path = Path(w.pairs.gcd(idx[-1], mask, w.cols)) if walks else path.broken()
    return _emit_load(w, t, example, index.add(*terms), mask, inner_path, what, inner_stride,
                      outer_strides, dims, axis=axis)


def _unit_dim(w, t, example, argument: bool, original_dims) -> int | None:
    """The outer dim of argument t whose stride is 1 where its innermost's is not (a
    channels_last NCHW tensor: the channels), read as a bare index (its stride guarded) so that
    a transpose's tile can walk it along the rows; None otherwise."""
    if not (argument and w.vectorize and t.ndim >= 2) or is_constant(t.shape[-1], 1) or (
            example.stride(original_dims[-1]) == 1):
        return None
    return next((d for d in range(t.ndim - 1) if not is_constant(t.shape[d], 1)
                 and example.stride(original_dims[d]) == 1), None)


def _along_unit_dim(w, t, example, idx, terms, unit, mask, original_dims, what):
    """The load of t along its stride-1 outer dim `unit` (`_unit_dim`): where the columns walk
    that dim, as wide as its index and mask show Triton; else a candidate for the rows of a
    transpose's tile (`w.across`), and there, as wide along the rows as that dim's index,
    extent, strides and masks allow (`RowAxis.gcd`); None where it is neither."""
    indexed = [d for d in range(t.ndim) if not is_constant(t.shape[d], 1)]    # one term each
    if index.coefficient(idx[unit], w.cols) == 1:   # the columns walk it (a permuted view that
        # is contiguous: NHWC of channels_last): the width read from the index, as Triton does
        inner_path = Path(min(index.aligned_run(idx[unit], mask, w.cols), vectorize.DIVISOR_CAP))
        axis = "cols"
    else:
        w.across.append((idx[unit], example.element_size() * example.numel()))
        rest = index.add(*(x for d, x in zip(indexed, terms) if d != unit))
        along_rows = w.row_axis and w.row_axis.gcd(idx[unit], rest, mask)
        if not along_rows:
            return None
        inner_path, axis = Path(along_rows), "rows"
    others = [d for d in indexed if d != unit]
    return _emit_load(w, t, example, index.add(*terms), mask, inner_path, what, 1,
                      [example.stride(original_dims[d]) for d in others],
                      (original_dims[unit], [original_dims[d] for d in others]),
                      inner_extent=t.shape[unit], axis=axis)


def _offsets_fit_int32(w, t, example, argument: bool) -> bool:
    """Whether every offset into t fits int32 (its products with runtime strides are then
    int32): with int32 logical indices, a tensor torch makes (fewer than 2**31 elements,
    see `analysis`), or an argument whose span (its farthest element from its first,
    `sum((size - 1) * |stride|)`) is below 2**31, a guard of the entry."""
    key = id(w.originals.get(id(t), t))
    if key not in w.int32_offsets:
        span = sum((n - 1) * abs(st) for n, st in zip(example.shape, example.stride()))
        fits = w.narrow and (not argument or span < kernel_types.INT32_LIMIT)
        if fits and argument:
            w.guards.append(("stride_span_lt", t, kernel_types.INT32_LIMIT))
        w.int32_offsets[key] = fits
    return w.int32_offsets[key]


def _stride_term(w, t, i, od, layout):
    """Index i times the stride of t's (original) dim od: a literal for a tensor torch
    makes with constant sizes, else a runtime stride passed divided by its guarded
    power-of-two divisor (int64 products where an index times a stride can pass 2**31,
    int32 where `_offsets_fit_int32`)."""
    example, constant, argument, _ = layout
    stride = example.stride(od)
    if constant:
        return index.mul(i, stride)
    scale = (vectorize.pow2_divisor(stride, w.max_vector)
             if w.vectorize and argument else 1)
    if scale > 1 and Stride(w.originals.get(id(t), t), od) not in w.leaves:
        w.guards.append(("stride_divisible", t, (od, scale)))
    fits = _offsets_fit_int32(w, t, example, argument)
    leaf = w.runtime_int(Stride(w.originals.get(id(t), t), od), f"{t.name}_stride{od}", scale,
                         bounded=fits)
    return index.mul(i if fits else index.widen(i), leaf)


def _pair_dim_load(w, t, idx, mask, what, layout):
    """Under pair tiling, a tensor whose innermost dim holds the pairs ([..., n, 2], dim -2
    walked by `cols`): its last two dims are one dim of 2n where they compose (strides 2 and
    1; guarded for an argument), read as interleaved pairs (`_pair_load`); None otherwise."""
    example, constant, argument, original_dims = layout
    if (w.pairs is None or t.ndim < 2 or not is_constant(t.shape[-1], 2)
            or not isinstance(idx[-1], index.Const)
            or index.coefficient(idx[-2], w.cols) != 1):
        return None
    d2, d1 = (t.ndim - 2, t.ndim - 1) if constant else tuple(original_dims[-2:])
    if example.stride(d1) != 1 or example.stride(d2) != 2:
        return None
    terms, outer_strides, outer_dims = [], [], []
    for d, (i, s) in enumerate(zip(idx[:-2], t.shape[:-2])):
        if known(s) and s == 1:
            continue
        od = d if constant else original_dims[d]
        outer_strides.append(example.stride(od) if argument or constant else 1)
        outer_dims.append(od)
        terms.append(_stride_term(w, t, i, od, layout))
    inner = index.add(index.mul(idx[-2], 2), idx[-1])
    n = t.shape[-2]     # the extent of the two dims as one: 2n (a runtime n: the mask's)
    extent = 2 * n if known(n) else vectorize.DIVISOR_CAP
    halves = _pair_load(w, t, example, terms, inner, extent, mask, what, outer_strides,
                        (d1, outer_dims) if argument else None)
    if halves is not None and argument:
        w.guards += [("stride_eq", t, (d1, 1)), ("strides_compose", t, (d2, d1, 2))]
    return halves


def _pair_load(w, t, example, outer_terms, inner, extent, mask, what, outer_strides, dims):
    """Under pair tiling, a load at `2 * cols + c` (the pairs' elements, interleaved): one
    contiguous load of both elements of each pair on the full tile, split in registers
    (`tl.split`); the half `c % 2` is the value. None where the mask or the tensor's extent
    cannot be carried to the full tile (the strided load then serves)."""
    if mask.false:
        return None
    rest = index.add(inner, index.mul(w.cols, -2))
    parity = index._terms(rest)[1] % 2
    base = index.add(rest, -parity)
    if base.divisor % 2 or (known(extent) and extent % 2) or (
            not known(extent) and vectorize.hint_of(extent) % 2):
        return None
    full_mask = w.pairs.to_full(mask, w.cols)
    if full_mask is None:
        return None
    if not known(extent):      # both elements of a pair lie inside the tensor
        w.guards.append(("divisible", extent, 2))
    offset = index.add(*outer_terms, w.pairs.full_cols, base)
    key = (id(t), offset, full_mask)
    if key not in w.pair_loads:
        g = w.pairs.gcd(index.add(w.pairs.full_cols, base), full_mask, w.pairs.full_cols)
        value = _emit_load(w, t, example, offset, full_mask, Path(g), f"{what}, pairs", 1,
                           outer_strides, dims, full=True, inner_extent=extent)
        halves = (w.names.fresh("v"), w.names.fresh("v"))
        w.lines.append(f"{halves[0]}, {halves[1]} = "
                       f"tl.split(tl.reshape({value}, [ROWS, COLS, 2]))")
        w.pair_loads[key] = halves
    return w.pair_loads[key][parity]


def merged_view(w, t, i):
    """t, an input of the group, with its dims i.. read as one: where their strides compose
    (guarded for an argument; true of a contiguous tensor torch made) and their sizes are
    constants; None otherwise, and for a value the group computes."""
    if id(t) in w.producers or not all(known(s) for s in t.shape[i:]):
        return None
    key = (id(t), i)
    if key not in w.views:
        example = w.values.get(id(t))
        dims = list(w.stride_dims.get(id(t), range(t.ndim)))
        original = w.originals.get(id(t), t)
        composed = [(dims[d], dims[-1], math.prod(t.shape[d + 1:]))
                    for d in range(i, t.ndim - 1) if t.shape[d] != 1]
        if example is not None and any(example.stride(a) != example.stride(b) * p
                                       for a, b, p in composed):
            return None
        view = TensorProxy(t.name, tuple(t.shape[:i]) + (math.prod(t.shape[i:]),), t.dtype,
                           t.device, t.requires_grad)
        w.stride_dims[id(view)] = dims[:i] + [dims[-1]]
        w.originals[id(view)] = original
        if example is not None:
            w.values[id(view)] = example
            w.guards += [("strides_compose", original, c) for c in composed]
        w.views[key] = view
    return w.views[key]


def _emit_load(w, t, example, offset, mask, path, what, inner_stride, outer_strides,
              dims, full: bool = False, inner_extent=None, axis: str = "cols") -> str:
    """dims: for an argument (whose layout the prologue guards), the original dim of its
    innermost dim and those of `outer_strides`; None for a tensor made by torch. `full`:
    a load of the full tile [ROWS, 2 * COLS] of pair tiling, whose innermost extent is
    `inner_extent` (t's last two dims viewed as one). `axis`: the tile axis `path` is along
    ("rows": a load contiguous along the rows of a transpose's tile, `row_axis`)."""
    if inner_extent is None:
        inner_extent = t.shape[-1] if t.ndim else 1
    if mask.false:      # no lane of the domain reads it: the value is `other`
        return w.constant_tile(0, t.dtype)
    row_mask = None if full else _per_row(w, offset, mask)
    if row_mask is not None:    # one load per row, broadcast along the row by its readers
        outside, w.shape = w.shape, "[ROWS, 1]"
        try:
            return _emit_load(w, t, example, offset, row_mask, path.broken(), what,
                              inner_stride, outer_strides, dims, inner_extent=inner_extent)
        finally:
            w.shape = outside
    ptr = w.pointer(t)
    key = (ptr, offset, mask, "[ROWS, 2 * COLS]" if full else w.shape)
    if key in w.loaded:       # the same load reached on another path (a view of t)
        return w.loaded[key]

    def width_at(data_ptr, inner=inner_stride, outer=tuple(outer_strides)):
        return vectorize.load_width(path, example.element_size(), inner_extent, inner, outer,
                                    data_ptr, w.vectorize)
    width = width_at(_data_ptr(example))
    if dims is not None:
        if width > 1:
            w.guards.append(("aligned", t, vectorize.ACCESS_BYTES))
        _guard_narrowing(w, t, example, width, width_at, dims)
    leaf = w.pairs.full_cols if full else w.cols
    access = Access("load", t.name, what, width, len(w.accesses),
                    index.coefficient(offset, leaf) == 1, axis if width > 1 else "cols")
    w.accesses.append(access)
    w.itemsizes.append(example.element_size())
    offset = w.tile_shaped(offset, full)
    pointers, masks = f"{ptr} + {w.render.expr(offset, top=True)}", w.mask_name(mask, full=full)
    if w.shape == "[ROWS, 1]":      # loaded as [ROWS]: one load per row, not one per lane
        pointers, masks = f"tl.reshape({pointers}, [ROWS])", f"tl.reshape({masks}, [ROWS])"
    value = w.let("v", f"tl.load({pointers}, mask={masks}, other=0)"
                       + ("[:, None]" if w.shape == "[ROWS, 1]" else ""),
                  f"{t.name}: {what}, {width} per access")
    access.line = w.lines[-1]
    if t.dtype in COMPUTE_DTYPE:
        value = held_tile(w, value, t.dtype)
    w.loaded[key] = value
    return value


def _per_row(w, offset, mask):
    """The mask of a load of one value per row of a [ROWS, COLS] tile (a row's max, its
    log-sum-exp, its target: an offset the columns do not reach), loaded as a [ROWS, 1] tile:
    `mask` less its atoms over the columns alone (each holds at some column of every row); None
    where the load is not one per row (another tile shape, or an atom over the columns and
    another index)."""
    if w.shape != "[ROWS, COLS]" or w.pairs is not None or w.row_axis is not None or (
            offset.deps & {"col_arange", "fcol_arange"}):
        return None
    kept = []
    for atom in mask.atoms:
        deps = atom.a.deps | atom.b.deps
        if "col_arange" not in deps:
            kept.append(atom)
        elif deps & (index.TILE - {"pid", "col_arange"}):
            return None
    return index.Mask(tuple(kept))


def _guard_narrowing(w, t, example, width, width_at, dims):
    """Guards the class of each layout fact of argument t that alone narrows this access: a
    misaligned base, an innermost stride other than 1, an outer stride divisible by less
    (`x_strides[0] % 8 != 0` beside `% 4 == 0`). An input without that narrowing then misses
    this entry and compiles its own, wider one instead of reusing it."""
    data_ptr = _data_ptr(example)
    if width_at(0) > width:
        w.guards.append(("misaligned", t, vectorize.ACCESS_BYTES))
    inner_dim, outer_dims = dims
    if t.ndim and example.stride(inner_dim) != 1 and width_at(data_ptr, inner=1) > width:
        w.guards.append(("stride_ne", t, (inner_dim, 1)))
    strides = [example.stride(d) for d in outer_dims]
    for k, (d, s) in enumerate(zip(outer_dims, strides)):
        divisor = vectorize.pow2_divisor(s, w.max_vector)
        wider = width_at(data_ptr, outer=tuple(strides[:k] + [0] + strides[k + 1:]))
        if divisor < w.max_vector and wider > width:
            w.guards.append(("stride_indivisible", t, (d, 2 * divisor)))


def _contiguous_example(t):
    return torch.empty([vectorize.hint_of(s) for s in t.shape], dtype=t.dtype, device="meta")


def _data_ptr(example) -> int:
    """Base address of an example input; 0 (aligned) for a tensor torch allocates at run time."""
    return 0 if example.device.type == "meta" else example.data_ptr()



def filled_outside(w, value: str, mask, fill: str) -> str:
    """`value` with `fill` (a float literal: a reduction's neutral value) in the lanes outside
    `mask`, the tile's domain: where `value` is a load masked by exactly `mask` (or its exact
    fp32 widening), the load itself, its `other` made `fill` unless it is another value already;
    else `tl.where(mask, value, fill)`. Lanes outside the domain are read by nothing but
    reductions, each filling them itself, and masked stores: a load's `other` there is free
    (a pad reads a load's `other=0` only inside the domain, under a narrower mask)."""
    wide = w.narrow_tiles.get(value)     # a load of fp16/bf16 values, widened to fp32
    line = _load_line(w, value, value if wide is None else wide.name, mask) if (
        wide is None or not wide.negated) else None
    if line is not None:
        old = w.lines[line]
        if f", other={fill})" in old or (fill == "0.0" and ", other=0)" in old):
            return value
        if ", other=0)" in old:
            new = old.replace(", other=0)", f", other={fill})", 1)
            w.lines[line] = new
            for access in w.accesses:
                if access.line == old:
                    access.line = new
            return value
    return w.let("v", f"tl.where({w.mask_name(mask)}, {value}, {fill})")


def _load_line(w, value: str, name: str, mask) -> int | None:
    """The index in `w.lines` of the line loading `name` (`value`, or the narrow tile `value`
    widens) as a [ROWS, COLS] tile under exactly `mask`, if `value` is such a load."""
    if not any(v == value and key[2] == mask and key[3] == w.shape == "[ROWS, COLS]"
               for key, v in w.loaded.items()):
        return None
    start = f"{name} = tl.load("
    return next((i for i in range(len(w.lines) - 1, -1, -1) if w.lines[i].startswith(start)),
                None)
