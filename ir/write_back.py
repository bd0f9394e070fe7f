"""The end of a functionalized computation: the inputs the traced code wrote in place.

Each written input (argument, captured tensor, parameter, buffer) gets its final value copied into
its storage by `copy_into`, an op of the computation trace run last, so the input ends as eager
leaves it: its values, its version counter bumped, its views seeing them; an output that is the
input is the input itself. Where autograd may save such an input for backward, the computation
reads a copy of it instead, which the final write leaves intact.
"""
from __future__ import annotations

import dataclasses

import torch

from ir import prims, recording
from ir.functionalize import current, record_helper
from ir.proxies import TensorProxy
from ir.trace import Eqn, map_vars


def copy_into(destination, value):
    """Writes a written input's final value into its storage, as eager's in-place ops left it;
    returns the input itself. A leaf that requires grad (written where autograd did not see it,
    as eager allows) stays a leaf."""
    if destination.requires_grad and destination.is_leaf:
        with torch.no_grad():
            return destination.copy_(value)
    return destination.copy_(value)


def write_backs(ctx, inputs) -> dict:
    """Records `copy_into` for each input whose value the traced code changed (at the end of the
    computation); id(input) -> the copy's output, which is the input itself at run time."""
    changed = [proxy for proxy in inputs if ctx.mutations.versions.get(id(proxy))]
    ctx.mutations.written_inputs = changed
    _read_copies(ctx, [proxy for proxy in changed if _saved_for_backward(ctx, proxy)])
    return {id(proxy): record_helper(copy_into, (proxy, current(ctx, proxy)),
                               [(proxy.shape, proxy.dtype)])[0] for proxy in changed}


def _saved_for_backward(ctx, proxy) -> bool:
    """Whether autograd may save the input for backward: an op that reads it computes a value
    that requires grad."""
    return any(any(isinstance(o, TensorProxy) and o.requires_grad for o in eqn.outs)
               and any(v is proxy for v in eqn.input_vars()) for eqn in ctx.eqns)


def _read_copies(ctx, inputs) -> None:
    """Makes the computation read a copy of each of these inputs, taken first: autograd (and a
    differentiable fusion group) then saves the copy for backward, not the input that
    `copy_into` overwrites at the end."""
    for proxy in inputs:
        read = recording.new_tensor(proxy.shape, proxy.dtype, proxy.device, True)
        copy = Eqn(prims.opaque, (proxy,), {"fn": torch.clone, "fn_name": "torch.clone",
                                            "kwargs": {}, "sequence": False}, (read,))
        eqns = [e if e.prim.kind == "host" else e.replace(
            args=map_vars(lambda v: read if v is proxy else v, e.args)) for e in ctx.eqns]
        shape_query = [i for i, e in enumerate(eqns) if e.prim is prims.shape
                       and e.args[0] is proxy]
        at = shape_query[0] + 1 if shape_query else 0
        ctx.eqns[:] = eqns[:at] + [copy] + eqns[at:]
        for key, (holder, value) in list(ctx.mutations.values.items()):
            if value is proxy:
                ctx.mutations.values[key] = (holder, read)


def shared_written_input(values: dict, written) -> TensorProxy | None:
    """The first written input (of `written`) whose tensor in `values` (id(proxy) -> the call's
    value) shares memory with another input's, else None."""
    tensors = {key: value for key, value in values.items() if isinstance(value, torch.Tensor)}
    for proxy in written:
        storage = tensors[id(proxy)].untyped_storage().data_ptr()
        if storage == 0:        # no memory (an empty tensor): nothing to share
            continue
        if any(key != id(proxy) and other.untyped_storage().data_ptr() == storage
               for key, other in tensors.items()):
            return proxy
    return None


def refuse_shared_written_inputs(ctx, values: dict) -> None:
    """Refuses a call where a written input shares memory with another input (`f(x, x)`, two
    views of one tensor): the trace treats them as separate values, so the other would not see
    the write."""
    proxy = shared_written_input(values, ctx.mutations.written_inputs)
    if proxy is not None:
        raise NotImplementedError(
            f"ir.jit: {proxy.name} is written in place and shares memory with another "
            "input of the call; ir.jit traces them as separate tensors: pass one of them")


def guarded_apart(prologue, written, pair_values):
    """The prologue, also rejecting a call where a written input shares memory with another
    input (the entry traced them apart; the miss then refuses the call, as the first did).
    pair_values(args) -> id(proxy) -> value, for the traces' arguments."""
    if not written:
        return prologue

    def apart(args) -> bool:
        return shared_written_input(pair_values(args), written) is None
    return dataclasses.replace(
        prologue, source=f"{prologue.source}\n# and, checked first, that no input written in "
                         "place shares memory with another (ir.write_back)",
        fn=lambda *args: apart(args) and prologue.fn(*args),
        after_key=lambda *args: apart(args) and prologue.after_key(*args))


def final_outputs(ctx, outputs, written: dict):
    """The traced outputs, each the current value of what the code returned: a written input
    itself (as eager returns the same tensor) where the code returns it."""
    def final(v):
        if not isinstance(v, TensorProxy):
            return v
        return written[id(v)] if id(v) in written else current(ctx, v)
    return map_vars(final, outputs)
