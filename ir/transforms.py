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
type test (`cache_keys.arg_key`), which plain tensors pass on their fast path.
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



def per_sample(fn, *args):
    """fn(*args) where some arguments may be vmap's batched tensors (a backward that
    `autograd.grad(..., is_grads_batched=True)` runs, as `jacobian(vectorize=True)` does) and fn
    reads their storage (a fused kernel): the outermost batch level is unwrapped and fn runs once
    per sample, its results stacked and wrapped again. Without batched arguments, fn(*args)."""
    batching = _batching(args)
    if batching is None:
        return fn(*args)
    unwrap, wrap = batching
    unwrapped = [unwrap(a) for a in args]
    count = next(u for u in unwrapped if u is not None).shape[0]
    samples = [per_sample(fn, *[a if u is None else u[i] for a, u in zip(args, unwrapped)])
               for i in range(count)]
    single = not isinstance(samples[0], (tuple, list))
    columns = zip(*([s] if single else s for s in samples))
    results = [None if c[0] is None else wrap(torch.stack(c)) for c in columns]
    return results[0] if single else tuple(results)


_functorch = torch._C._functorch


def _batching(args):
    """(unwrap, wrap) of the outermost batch level among args, or None: unwrap gives a batched
    argument's tensor with the batch dim first (None for another argument), wrap batches a
    tensor along its first dim again. `torch.func.vmap` and the legacy vmap of
    `is_grads_batched` have one each."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    levels = [_functorch.maybe_get_level(a) for a in tensors if _functorch.is_batchedtensor(a)]
    if levels:
        level = max(levels)
        return (lambda a: _functorch.get_unwrapped(a).movedim(_functorch.maybe_get_bdim(a), 0)
                if isinstance(a, torch.Tensor) and _functorch.is_batchedtensor(a)
                and _functorch.maybe_get_level(a) == level else None,
                lambda t: _functorch._add_batch_dim(t, 0, level))
    if any(_functorch.is_legacy_batchedtensor(a) for a in tensors):
        level = torch._C._vmapmode_increment_nesting() - 1     # the current level
        torch._C._vmapmode_decrement_nesting()
        return (lambda a: torch._remove_batch_dim(a, level, 1, 0) if isinstance(a, torch.Tensor)
                and _functorch.is_legacy_batchedtensor(a) else None,
                lambda t: torch._add_batch_dim(t, 0, level))
    return None
