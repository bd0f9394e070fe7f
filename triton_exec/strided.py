"""Kernels of a group for the layouts torch brings at run time: a tensor a group reads that torch
made in the computation (an opaque call's result, `scaled_dot_product_attention`'s gradients laid
out [B, T, H, D] under a [B, H, T, D] shape, a view of it) has no layout the prologue can guard.
A group's kernel is built for the contiguous layout (its strides literals); where a call brings
another (or a negative-bit view), the launcher calls the group's `StridedVariants` instead of
copying the tensor: a kernel lowered for that call's layouts, reading every such tensor through
its strides exactly as a kernel reads an argument of `ir.jit` (`triton_exec.codegen.loads`: the
vectorization analysis' width, and the guards it rests on: innermost stride 1, strides divisible
by their power-of-two divisor, aligned base, merged dims that compose). Those guards, which the
prologue checks for an argument, are this variant's key: checked by the launcher on each call that
leaves the contiguous path, the first variant whose guards hold runs, and a call no variant's
guards accept lowers one more (its guards on sizes alone that the contiguous kernel's entry
guards already are left to the prologue). A variant whose guards or runtime sizes the launcher
cannot evaluate is not built: the call copies the tensors (`.contiguous()`) and runs the contiguous
kernel, as every call did before.

Each variant's `KernelRecord` (its widths, its PTX) is in the group's record's `variants`; a
variant replaces the contiguous kernel in a call, so `last_kernels` counts launches as before.
"""
from __future__ import annotations

import dataclasses
import logging

from ir import TensorProxy
from ir.prologue import build_guard_check, render_guard

log = logging.getLogger("triton_exec")


@dataclasses.dataclass
class Variant:
    check: object       # the launcher's arguments -> whether this variant's guards hold
    launcher: object
    positions: list     # the variant launcher's arguments, by position among the base's


class StridedVariants:
    """`STRIDED(*args)` in a group's launcher (its arguments: the group's inputs, then its
    runtime sizes): runs the kernel lowered for these arguments' layouts (see the module)."""

    def __init__(self, build, args: list, made_by_torch: list[str], entry_guards: list,
                 records: list):
        self.build = build          # (name suffix, tensors by id of their Var) -> (Lowered,
                                    # launcher, record, the launcher's arguments)
        self.args = args            # the base launcher's arguments (trace Vars)
        self.made_by_torch = set(made_by_torch)     # names of the inputs torch made
        self.entry_guards = {render_guard(g) for g in entry_guards}
        self.records = records      # the variants' KernelRecords (the group record's `variants`)
        self.variants: list[Variant] = []
        self.base = None            # the contiguous kernel's launcher
        self.refused = False        # a variant could not be keyed: copies, as before

    def __call__(self, *values):
        values = tuple(_resolved(v) for v in values)
        for variant in self.variants:
            if variant.check(*values):
                return variant.launcher(*[values[k] for k in variant.positions])
        if not self.refused:
            variant = self._lower(values)
            if variant is not None:
                self.variants.append(variant)
                return variant.launcher(*[values[k] for k in variant.positions])
            self.refused = True
        return self.base(*[v.contiguous() if a.name in self.made_by_torch else v
                           for a, v in zip(self.args, values)])

    def _lower(self, values) -> Variant | None:
        """The variant for these values' layouts, or None where the launcher cannot key it."""
        tensors = {id(a): v for a, v in zip(self.args, values) if isinstance(a, TensorProxy)}
        name = f"_strided{len(self.records)}"
        lowered, launcher, record, args = self.build(name, tensors)
        position = {id(a): k for k, a in enumerate(self.args)}
        if lowered.contiguous_inputs or any(id(a) not in position for a in args):
            log.info("%s: no strided variant (it reads %s)", record.name,
                     [a.name for a in args if id(a) not in position] or lowered.contiguous_inputs)
            return None
        # the guards of the contiguous kernel are the entry's: its prologue checked them
        guards = [g for g in lowered.guards if render_guard(g) not in self.entry_guards]
        try:
            check = build_guard_check([(a.name, a) for a in self.args], guards, [])
        except AssertionError as why:      # a guard on a size the launcher is not given
            log.info("%s: no strided variant (%s)", record.name, why)
            return None
        if not check(*values):     # the lowering's guards hold on the values it was built for
            raise AssertionError(f"{record.name}: its guards reject its own layout")
        self.records.append(record)
        return Variant(check, launcher, [position[id(a)] for a in args])


def _resolved(value):
    """A tensor with the negative bit resolved (a kernel reads raw storage); others as they are."""
    is_neg = getattr(value, "is_neg", None)
    return value.resolve_neg() if is_neg is not None and is_neg() else value
