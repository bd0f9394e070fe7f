"""What each prim means to the Triton executor, in one table keyed by the `Prim` object (as JAX
keeps its rules beside its primitives, and `ir.ops` keeps the grad rules beside each prim).

A `Rule` says how the prim lowers to kernel code, whether it is a view (it moves or drops
indices only: a group of views alone stays a free PyTorch view), on which dtypes it is fused, and
how the inner-dim merge (`triton_exec.merge`) sees it. Fusion, merge and code generation read
this table only, never a prim's name: a new fusible op is one `register` call, beside its
lowering in its family's module (`triton_exec.codegen.lower_elementwise`, `lower_movement`).
"""
from __future__ import annotations

import dataclasses
from typing import Callable


@dataclasses.dataclass(frozen=True)
class Rule:
    lower: Callable                     # (writer, eqn, idx, mask, path) -> the value's name
    view: bool = False                  # moves or drops indices only
    float_only: bool = False            # fused on floating-point tensors only
    no_bool: bool = False               # arithmetic: not fused on bool tensors
    refuse: Callable | None = None      # eqn -> why this equation is not fused, or None
    # inner-dim merge: whether dims k.. merge through the equation ((eqn, k) -> bool; None:
    # always, as for elementwise ops), and its arguments on the merged dims
    # ((eqn, args, params, k, inner) -> (args, params); None: unchanged)
    merges: Callable | None = None
    merged: Callable | None = None
    # a reduction over the innermost dims: its group is lowered one row per program
    # (`triton_exec.codegen.row_plan`)
    reduces: bool = False


RULES: dict = {}        # Prim -> Rule


def register(*prims, **fields) -> Rule:
    """Registers one rule for these prims."""
    rule = Rule(**fields)
    for prim in prims:
        RULES[prim] = rule
    return rule


def rule_of(eqn) -> Rule | None:
    """The rule of an equation's prim; None for a prim the executor does not fuse."""
    return RULES.get(eqn.prim)
