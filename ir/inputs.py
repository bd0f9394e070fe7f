"""The proxies that stand for a jitted function's arguments in its traces: a tensor's proxy
(sizes symbolic in "symbolic values" mode, 0 and 1 specialized, its layout noted for the views
the tracer models), a container's items one by one, an int or float a runtime value in symbolic
mode. Used by the jit and by the trace apart of a module call (`ir.module_calls`).
"""
from __future__ import annotations

import torch

from ir import containers
from ir.ops.host import shape_p
from ir.proxies import FloatProxy, IntProxy, TensorProxy
from ir.recording import record


def input_proxy(name: str, value, ctx):
    """The proxy (or literal) standing for one argument in the traces."""
    if isinstance(value, torch.Tensor):
        if value.is_complex():   # the key's fast path lets it through; refused on the miss
            raise TypeError(f"ir.jit: argument {name!r}: a {value.dtype} tensor is not supported")
        proxy = TensorProxy(name, (), value.dtype, value.device,
                            value.requires_grad, value.is_neg())
        ctx.input_layouts[id(proxy)] = (tuple(value.stride()), value.is_contiguous())
        if isinstance(value, torch.nn.Parameter):   # nn.Parameter's isinstance reads the flag
            proxy._is_param = True
        if value.requires_grad and value.is_leaf:   # eager refuses to write into it in grad mode
            ctx.mutations.leaves.add(id(proxy))
        if not ctx.symbolic:
            proxy.shape = tuple(value.shape)
            return proxy
        sizes = tuple(IntProxy(ctx.new_name("i"), s) for s in value.shape)
        record(shape_p, (proxy,), {}, sizes)
        static = ctx.static_dims.get(name, ())
        for dim, size in enumerate(sizes):   # 0 and 1 are specialized: broadcasting depends on them
            if size.hint < 2 or dim in static:
                ctx.add_guard(("eq", size, size.hint))
                ctx.specialized(size, size.hint, "a size of 0 or 1 (broadcasting depends on it)"
                                if size.hint < 2 else "a static size of the caller's graph")
            else:
                ctx.add_guard(("ge", size, 2))
                ctx.lower_bounds[id(size)] = 2
        proxy.shape = tuple(s.hint if s.hint < 2 or d in static else s
                            for d, s in enumerate(sizes))
        return proxy
    if containers.is_deep(value):
        return tuple(input_proxy(ctx.fresh_name(n), v, ctx) for n, v in
                     zip(containers.leaf_names(name, value), containers.flat_argument(value)))
    if isinstance(value, (tuple, list)):
        return tuple(input_proxy(ctx.fresh_name(f"{name}_{i}"), v, ctx)
                     for i, v in enumerate(value))
    if isinstance(value, dict):
        return {k: input_proxy(ctx.fresh_name(f"{name}_{k}" if k.isidentifier() else
                                               f"{name}_{i}"), v, ctx)
                for i, (k, v) in enumerate(value.items())}
    if type(value) is int and ctx.symbolic:
        return IntProxy(name, value)
    if type(value) is float and ctx.symbolic:
        return FloatProxy(name, value)
    return value
