"""Implicit inputs: the tensors a jitted function reads without receiving them (its closure, its
globals, a bound module's parameters and buffers), and how an entry's prologue and computation
read them, with the deep containers among the arguments flattened, at every call.
"""
from __future__ import annotations

import dataclasses

import torch

from ir import containers, modules


def capture_sources(fn) -> dict:
    """name -> (tensor, reader) for the tensors fn reads from its closure and its globals, and
    for a bound method of a module, its module's parameters and buffers (`ir.modules`);
    `reader()` reads the name's current value, as a call of fn would."""
    code, found = getattr(fn, "__code__", None), {}
    owner = modules.owner_module(fn)
    if owner is not None:
        found.update(modules.state_sources(owner))
    if code is None:
        return found
    for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
        try:
            value = cell.cell_contents
        except ValueError:      # a cell not filled yet
            continue
        if isinstance(value, torch.Tensor) and name not in found:
            found[name] = (value, lambda cell=cell: cell.cell_contents)
    for name in code.co_names:
        value = fn.__globals__.get(name)
        if isinstance(value, torch.Tensor) and name not in found:
            found[name] = (value, lambda g=fn.__globals__, name=name: g.get(name))
    return found


def _reader(sources, source, tensor):
    """How a call reads a captured tensor: from its source (closure cell, global, module),
    else the object."""
    if source is not None:
        return sources[source][1]
    return lambda: tensor


def _trace_arguments(deep: list[int], readers):
    """fn's arguments -> the traces' inputs: the deep containers at positions `deep` flat
    (`ir.containers`), then the implicit inputs read from their sources."""
    flat = containers.flat_argument

    def arguments(args):
        if deep:
            args = [flat(a) if i in deep else a for i, a in enumerate(args)]
        return (*args, *[read_one() for read_one in readers])
    return arguments


def _taking_arguments(prologue, computation, arguments):
    """The prologue and computation of an entry whose traces take `arguments(args)`, taking
    fn's arguments."""
    def taking(fn):
        return lambda *args: fn(*arguments(args))
    return (dataclasses.replace(prologue, fn=taking(prologue.fn),
                                after_key=taking(prologue.after_key)),
            taking(computation))
