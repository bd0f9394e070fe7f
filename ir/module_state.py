"""Module state that a traced forward rebinds: `self.steps = self.steps + 1`, a buffer replaced.

While a module's method is traced, its tree's buffers and tensor attributes are watched: a slot
the forward rebinds to a traced value becomes an output of the computation, rebound after every
call to that output, as eager's forward rebinds it (the module's `steps` is then the new tensor).
Tracing always leaves the module as it found it (on error too): no tracer value stays inside it.
"""
from __future__ import annotations

import contextlib
import dataclasses

import torch

from ir.proxies import TensorProxy


@dataclasses.dataclass
class Rebinding:
    module: torch.nn.Module
    store: str          # "_buffers" or "__dict__"
    name: str


def _slots(module):
    """(module, store name, slot name) -> value of every buffer and plain tensor or traced
    attribute in module's tree."""
    slots = {}
    if module is None:
        return slots
    for mod in module.modules():
        for name, value in mod._buffers.items():
            slots[(mod, "_buffers", name)] = value
        for name, value in mod.__dict__.items():
            if isinstance(value, (torch.Tensor, TensorProxy)):
                slots[(mod, "__dict__", name)] = value
    return slots


def _store(mod, store):
    return mod._buffers if store == "_buffers" else mod.__dict__


@contextlib.contextmanager
def watched(module):
    """Yields `rebound()`: the slots of module's tree that hold another tensor now, as
    (Rebinding, value) pairs; on exit every slot holds what it held before."""
    before = _slots(module)

    def rebound():
        return [(Rebinding(mod, store, name), value)
                for (mod, store, name), value in _slots(module).items()
                if isinstance(value, (torch.Tensor, TensorProxy))
                and before.get((mod, store, name)) is not value]
    try:
        yield rebound
    finally:
        for (mod, store, name), value in _slots(module).items():
            if before.get((mod, store, name), None) is not value:
                if (mod, store, name) in before:
                    _store(mod, store)[name] = before[(mod, store, name)]
                else:
                    del _store(mod, store)[name]


def rebinding(computation, rebindings):
    """The computation, returning (outputs, state) from its trace, as a function that rebinds
    each slot to its state value and returns the outputs."""
    def run(*args):
        outputs, (_, values) = computation(*args)
        for slot, value in zip(rebindings, values):
            _store(slot.module, slot.store)[slot.name] = value
        return outputs
    return run
