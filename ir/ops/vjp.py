"""The vocabulary grad rules are written in: `emit` records a prim into the active trace (the
backward is itself a trace of prims that the executors run and fuse), `needs_grad` says which
inputs get a cotangent, and `add`, `mul`, `where`, ... record the elementwise prims by name
(`PRIMS`), so a family's rules may use another family's prims without importing it.

Rules follow eager PyTorch's formulas (derivatives.yaml), ties included. Comparisons and integer
outputs are not differentiable: they have no rule and never get a cotangent (`has_rule`).
"""
from __future__ import annotations

from ir.ops.registry import GRAD_RULES, PRIMS
from ir.proxies import IntProxy, TensorProxy
from ir.recording import bind, new_tensor, record


def needs_grad(x) -> bool:
    return isinstance(x, TensorProxy) and x.requires_grad


def emit(prim, *args, like=None, **params):
    """Records prim(*args, **params); its output has `like`'s shape and dtype when given (a
    gradient always has its input's shape: with runtime sizes the meta rule would spell it as
    another, equal, expression)."""
    if like is None:
        return bind(prim, *args, **params)
    out = new_tensor(like.shape, like.dtype, like.device)
    record(prim, args, params, (out,))
    return out


def op(name):
    return lambda *args: emit(PRIMS[name], *args)


add, sub, mul, div, neg = (op(n) for n in ("add", "sub", "mul", "div", "neg"))
gt, lt, ge, le, eq = (op(n) for n in ("gt", "lt", "ge", "le", "eq"))


def where(c, a, b):
    return emit(PRIMS["where"], c, a, b)


def _const(x) -> bool:
    return not isinstance(x, IntProxy)


def has_rule(eqn) -> bool:
    """Whether the gradient of eqn can be written from the rules (a comparison needs none)."""
    if not any(o is not None and o.requires_grad for o in eqn.outs):
        return True
    if eqn.prim is PRIMS["pow"]:
        return not isinstance(eqn.args[1], TensorProxy)
    return eqn.prim in GRAD_RULES
