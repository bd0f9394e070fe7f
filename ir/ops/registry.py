"""The registry every op family fills: the `Prim` class, and the tables that give an op its
meaning to each pass, keyed by the `Prim` object (by the torch callable for the torch mapping),
as JAX keeps a primitive's rules in tables filled beside the primitive.

The tables are empty here. Each module of `ir.ops` fills them for one op family when imported
(`ir.prims` imports them all); the tracer, the passes and the jit read only the tables:

- `PRIMS`: name -> `Prim` (`define`: the prim and its meta, i.e. its shape and dtype rule).
- `HANDLERS`, `METHODS`, `PROPERTIES`: torch callables, tensor method names and tensor attributes
  -> the decomposition into prims the tracer runs in their place (`register`: the torch
  mapping); `FACTORIES`: the torch functions without a tensor argument the tracer intercepts.
- `SHAPE_RULES`: torch callables left to torch (opaque calls) -> their symbolic output shapes
  (`shape_rule`; `output_shapes` reads it).
- `TORCH_SOURCE`: `Prim` -> `(eqn) -> str`, the Python source of the right-hand side with which
  the torch executor runs the equation (`torch_source`; a prim without one runs as the torch
  function of its name, `torch.exp(t0)`, binary operators infix).
- `GRAD_RULES`: `Prim` -> `rule(eqn, cts) -> [(input, cotangent), ...]`, its vector-Jacobian
  product written as prims (`grad_rule`; `ir.autodiff` reads it): `cts` holds one cotangent per
  output of `eqn` (None where no gradient reaches it), and the rule returns a cotangent for each
  input that needs grad, of that input's shape and dtype.

It imports only the IR (`ir.trace`).
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
from typing import Callable

import torch
import torch.nn.functional as F

from ir.trace import render

PRIMS: dict[str, "Prim"] = {}
HANDLERS: dict = {}
METHODS: dict = {}
PROPERTIES: dict = {}
FACTORIES: set = set()
SHAPE_RULES: dict = {}
TORCH_SOURCE: dict = {}
GRAD_RULES: dict = {}


@dataclasses.dataclass(frozen=True, eq=False)
class Prim:
    name: str
    kind: str                     # "host", "elementwise", "tensor" or "opaque"
    meta: Callable                # (*args, **params) -> list of (shape, dtype, device) or int hints
    render_rhs: Callable = None   # (eqn) -> source of the right-hand side

    def render(self, eqn):
        if self.render_rhs is not None:
            return self.render_rhs(eqn), []
        args = [render(a) for a in eqn.args]
        args += [f"{k}={render(v)}" for k, v in eqn.params.items()]
        return f"prims.{self.name}({', '.join(args)})", []

    def __repr__(self):
        return self.name


def define(name, kind, meta, render_rhs=None) -> Prim:
    prim = Prim(name, kind, meta, render_rhs)
    PRIMS[name] = prim
    return prim


def register(*targets, methods=()):
    """Registers the decorated function as the decomposition of these torch callables
    and tensor method names (the torch mapping of an op)."""
    def wrap(fn):
        for t in targets:
            HANDLERS[t] = fn
        for m in methods:
            METHODS[m] = fn
        return fn
    return wrap


def shape_rule(*targets):
    """Registers a shape rule for torch callables given as objects or as names, a name standing for
    each of `torch.<name>`, `torch.Tensor.<name>` and `F.<name>` that exists."""
    def wrap(fn):
        for target in targets:
            if isinstance(target, str):
                for space in (torch, torch.Tensor, F):
                    if hasattr(space, target):
                        SHAPE_RULES[getattr(space, target)] = fn
            else:
                SHAPE_RULES[target] = fn
        return fn
    return wrap


def output_shapes(fn, args, kwargs):
    """The symbolic shapes of fn(*args, **kwargs)'s outputs by its rule, or None (no rule, or a
    signature the rule does not take)."""
    found = SHAPE_RULES.get(fn)
    if found is None:
        return None
    try:
        _signature(found).bind(*args, **kwargs)
    except TypeError:
        return None
    return found(*args, **kwargs)


@functools.cache
def _signature(fn) -> inspect.Signature:
    return inspect.signature(fn)


def torch_source(*prims):
    """Registers the decorated `(eqn) -> str` as the torch executor's source of these prims."""
    def wrap(fn):
        for prim in prims:
            TORCH_SOURCE[prim] = fn
        return fn
    return wrap


def grad_rule(*prim_objects):
    """Registers the decorated function as the grad rule of these prims."""
    def register(rule):
        for p in prim_objects:
            GRAD_RULES[p] = rule
        return rule
    return register
