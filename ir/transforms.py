"""Calls that `ir.jit` runs eagerly: under a function transform, or with a tensor subclass.

A traced tensor carries shape, dtype and device only: a dual tensor's tangent
(`torch.autograd.forward_ad`), the batch dims of `torch.func.vmap`'s tensors and the levels of
`grad`/`jvp`/`jacrev`/`jacfwd` (and of `torch.autograd.functional.jacobian(vectorize=True)`,
which is vmap), or a subclass's own `__torch_dispatch__`, would be lost in the trace. So such a
call runs `fn` itself on PyTorch, which gives eager's results (tangents, batched values,
gradients), with a warning once per reason.

The check on every call reads two pieces of global state (about 70 ns): functorch's interpreter
stack, not empty inside any `torch.func` transform, and forward AD's current level, not -1 inside
`fwAD.dual_level()` (dual tensors exist only there). A tensor subclass is found by the cache key's
type test (`jit.arg_key`), which plain tensors pass on their fast path.
"""
from __future__ import annotations

import torch
import torch.autograd.forward_ad as forward_ad

_interpreter_stack = torch._C._functorch.peek_interpreter_stack


class RunsEagerly(Exception):
    """Raised by the cache key for an argument that the traces cannot represent (a tensor
    subclass); the call runs `fn` eagerly. Its message is the reason."""


def active_transform() -> str | None:
    """The reason this call must run eagerly because of a transform around it, or None."""
    interpreter = _interpreter_stack()
    if interpreter is not None:
        kind = str(interpreter.key()).rsplit(".", 1)[-1]     # TransformType.Vmap -> Vmap
        return f"called under the function transform torch.func {kind.lower()}"
    if forward_ad._current_level >= 0:
        return "called inside forward-mode AD (torch.autograd.forward_ad.dual_level)"
    return None


def subclass_reason(tensor) -> RunsEagerly:
    return RunsEagerly(f"called with a tensor subclass ({type(tensor).__name__})")
