"""The soundness property's parts: input layouts drawn for a program's tensors, tuple packings
of its arguments, and the width check of a cache hit, made by arithmetic on the call's pointers,
strides and sizes against what each kernel assumes (no GPU).

A kernel assumes, per load of width V > 1 from an argument tensor T (see `triton_exec.vectorize`):
T's base 16-byte aligned, its innermost stride 1, the inner dims it merged composing
(`strides_compose` guards), every other stride of a dim of size > 1 and the merged inner extent
divisible by V; and per runtime integer passed divided by s (`n_div8`), that s divides it.
`illegal_widths` checks each of these on the call's actual arguments.
"""
from __future__ import annotations

import math

import torch
from hypothesis import strategies as st

import ir
from ir.trace import render_eqn
from triton_exec import index
from triton_exec.codegen import Stride

LAYOUTS = ("contiguous", "offset", "wider", "step", "permuted", "expand", "size-1 strides")


@st.composite
def laid_out(draw, t: torch.Tensor) -> torch.Tensor:
    """A tensor equal in shape and dtype to t, with t's values (or, for expands, some of them
    repeated), laid out one of LAYOUTS ways, sometimes with the negative bit."""
    layout = draw(st.sampled_from(LAYOUTS))
    shape, values = tuple(t.shape), t.detach().clone()
    if layout == "offset":
        offset = draw(st.integers(0, 9))
        buffer = torch.zeros(offset + values.numel() + 3, dtype=t.dtype)
        out = buffer[offset: offset + values.numel()].view(shape).copy_(values)
    elif layout == "wider" and shape:
        extra = draw(st.integers(1, 5))
        offset = draw(st.integers(0, 3))
        base = torch.zeros(shape[:-1] + (shape[-1] + extra + offset,), dtype=t.dtype)
        out = base[..., offset: offset + shape[-1]].copy_(values)
    elif layout == "step" and shape:
        d = draw(st.integers(0, len(shape) - 1))
        step = draw(st.integers(2, 3))
        wide = list(shape)
        wide[d] = shape[d] * step
        out = torch.zeros(wide, dtype=t.dtype).narrow(d, 0, shape[d] * step)
        out = out[(slice(None),) * d + (slice(None, None, step),)].copy_(values)
    elif layout == "permuted" and len(shape) >= 2:
        perm = draw(st.permutations(range(len(shape))))
        base = torch.zeros([shape[p] for p in perm], dtype=t.dtype)
        out = base.permute([perm.index(i) for i in range(len(shape))]).copy_(values)
    elif layout == "expand" and shape and values.numel():
        dims = [d for d in range(len(shape)) if draw(st.booleans())] or [len(shape) - 1]
        source = values
        for d in dims:
            source = source.narrow(d, 0, 1)
        out = source.clone().expand(shape)
    elif layout == "size-1 strides" and 1 in shape:
        base = values.contiguous()
        strides = [draw(st.sampled_from([1, 3, 5, 7, 9])) if s == 1 else st_
                   for s, st_ in zip(shape, base.stride())]
        out = base.as_strided(shape, strides)
    else:
        out = values.contiguous()
    if t.dtype != torch.bool and draw(st.integers(0, 4)) == 0:
        out = torch._neg_view(-out)       # a view with the negative bit, the same values
    return out


def packed_function(fn, n_args: int, extras: list, order: list):
    """A function of one tuple argument holding fn's arguments and `extras` (numbers fn never
    reads) in `order` (indices: < n_args an argument of fn, else an extra), which unpacks it
    and calls fn: tuple items of every kind, in every position."""
    names = [f"a{i}" if i < n_args else f"_{i}" for i in order]
    source = (f"def packed(t):\n    ({', '.join(names)},) = t\n"
              f"    return fn({', '.join(f'a{i}' for i in range(n_args))})\n")
    ns = {"fn": fn}
    exec(source, ns)
    pack = (lambda args: (tuple(args[i] if i < n_args else extras[i - n_args] for i in order),))
    return ns["packed"], pack


# ---- the width check -------------------------------------------------------------------------

def call_values(entry, args) -> dict:
    """Trace name -> this call's value, for every input and every host-computed size."""
    values = {}

    def pair(proxy, value):
        if isinstance(proxy, tuple):
            for p, v in zip(proxy, value):
                pair(p, v)
        elif isinstance(proxy, ir.TensorProxy) or isinstance(proxy, ir.IntProxy):
            values[proxy.name] = value

    traced = entry.traces[0]
    for (name, proxy), a in zip(traced.inputs, args):
        pair(proxy, a)
    for eqn in traced.eqns:      # sizes derived on the host (`i3 = i1 // 2`), as the call has them
        if eqn.prim.kind == "host":
            exec("\n".join(render_eqn(eqn)), {"torch": torch}, values)
    return values


def illegal_widths(entry, args) -> list[str]:
    """What each kernel of the entry assumes but this call's arguments do not give."""
    values = call_values(entry, args)
    problems = []
    for record in entry.extra.get("triton", ()):
        lowered = record.lowered
        for p in lowered.params:     # a value passed divided: `FloorDiv(value, scale)`
            if p.kind == "int" and isinstance(p.value, index.FloorDiv):
                scale = p.value.b.value
                raw = index.evaluate(p.value.a, lambda leaf: (
                    values[leaf.source.tensor.name].stride(leaf.source.dim)
                    if isinstance(leaf.source, Stride) else values[leaf.source.name]))
                if raw % scale:
                    problems.append(f"{record.name}: {p.name}: {raw} is not a multiple of {scale}")
        merged = {}
        for op, t, b in lowered.guards:
            if op == "strides_compose":
                merged.setdefault(t.name, set()).add(b[0])
        for access in lowered.accesses:
            name = access.tensor
            if (access.kind != "load" or access.width == 1 or name in lowered.contiguous_inputs
                    or not isinstance(values.get(name), torch.Tensor)):
                continue
            problems += [f"{record.name}: {access.label}: {p}" for p in
                         _layout_problems(values[name], access.width, merged.get(name, set()))]
    return problems


def _layout_problems(t: torch.Tensor, width: int, merged: set) -> list[str]:
    """Whether V = width lanes along t's innermost dim (with the dims in `merged` folded into
    it) are contiguous and aligned in memory, from t's pointer, strides and sizes."""
    problems = []
    if t.numel() == 0:      # nothing is read
        return problems
    if t.is_neg():
        problems.append("a negative-bit view read raw")
    if t.data_ptr() % 16 or width * t.element_size() > 16:
        problems.append(f"base {t.data_ptr() % 16} bytes past 16-byte alignment")
    inner = t.ndim - 1
    if t.shape[inner] != 1 and t.stride(inner) != 1:
        problems.append(f"innermost stride {t.stride(inner)}")
    extent = t.shape[inner]
    for d in range(t.ndim - 1):
        if t.shape[d] == 1:
            continue
        if d in merged:
            if t.stride(d) != t.stride(inner) * math.prod(t.shape[d + 1:]):
                problems.append(f"merged dim {d} does not compose (strides {t.stride()})")
            extent *= t.shape[d]
        elif t.stride(d) % width:
            problems.append(f"stride {t.stride(d)} of dim {d} not a multiple of {width}")
    if extent % width:
        problems.append(f"inner extent {extent} not a multiple of {width}")
    return problems


def widths(entry) -> dict:
    """Access width by (kernel position, access position, kind, part): not by names, which
    differ between the hit's entry and a fresh one (kernels are named after their jitted
    function, traced values numbered per trace)."""
    return {(i, a.number, a.kind, a.what): a.width
            for i, k in enumerate(entry.extra.get("triton", ())) for a in k.lowered.accesses}


def narrower_than_fresh(entry, fresh) -> str | None:
    """Why some access of the hit entry is narrower than the same access of an entry compiled
    fresh on the same arguments: "" where none is, "not comparable" where the two have
    different accesses, else the guards of the fresh entry that the hit entry lacks (by kind:
    "stride_divisible", "divisible", ...), which is what the guard design explains."""
    hit, new = widths(entry), widths(fresh)
    if hit.keys() != new.keys():
        return "not comparable"
    if all(hit[k] >= new[k] for k in hit):
        return ""
    if any(getattr(v, "neg", False) for v in ir.trace.iter_vars(fresh.traces[0].inputs)):
        return "negative-bit input (the fresh entry copies it resolved first)"
    have = {_guard_text(g) for k in entry.extra.get("triton", ()) for g in k.lowered.guards}
    missing = sorted({g[0] for k in fresh.extra.get("triton", ()) for g in k.lowered.guards
                      if _guard_text(g) not in have})
    return ", ".join(missing) or "unexplained"


def _guard_text(guard) -> str:
    from ir.prologue import render_guard
    return render_guard(guard)
