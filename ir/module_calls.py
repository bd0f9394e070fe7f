"""Submodule calls while `ir.jit` traces: most are traced through (their ops join the trace);
three kinds become one opaque call that runs the submodule in eager, hooks and all, at every
call of the computation:

- a submodule whose call runs hooks (forward, pre-forward, backward; or global module hooks
  exist; or a forward replaced on the instance, as accelerate's hooks do): traced, the hooks
  would run once, at tracing;
- a wrapper whose forward does per-call work (DDP, DataParallel, FSDP; `modules.wrapper_name`);
- in a jitted module or method, a submodule whose forward cannot be traced (ir.jit raises
  NotImplementedError in it: data-dependent control flow, an op it refuses): the trace is rolled
  back to before the call, and the reason is logged on `ir.fallbacks`.

The submodule's parameters are not inputs of the trace: the submodule reads them itself. The
outputs' metadata come from tracing the submodule's forward apart, on stand-ins of its arguments,
else from running a copy of it on zeros; at run time, outputs that differ from it raise. In
symbolic mode the sizes of its arguments are specialized. `ir.explain` lists these calls.

`intercepting()` (around each trace, under the compile lock) replaces `nn.Module.__call__`
(and `__getattribute__`, for `ir.module_attributes`) while tracing is under way; calls from
other threads, and calls made while the tracer's own code runs, go to the original.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import threading
from contextvars import ContextVar

import torch
from torch.utils import _pytree as pytree

from ir import containers, module_attributes, modules, prims
from ir.proxies import ACTIVE_TRACE, ScalarProxy, TensorProxy, hint
from ir.inputs import input_proxy
from ir.recording import new_tensor, record, specialize
from ir.tracing import TraceContext, tracing

log = logging.getLogger("ir.fallbacks")

_ORIGINAL_CALL = torch.nn.Module.__call__
_PATCH_LOCK = threading.Lock()
_patched = 0        # traces under way that intercept module calls
_CALLS: ContextVar = ContextVar("ir_module_calls", default=None)
# TraceContext fields that a rollback keeps: generated names are never reused
_NOT_ROLLED_BACK = ("counters",)


@dataclasses.dataclass
class _Calls:
    """The module calls of one trace: `root` is the jitted module (None for a function), whose
    submodules fall back to opaque calls when their forward cannot be traced; `reads` the
    module attributes it read (`ir.module_attributes`)."""
    root: object
    count: int = 0
    reads: dict = dataclasses.field(default_factory=dict)


@contextlib.contextmanager
def intercepting(root):
    """Module calls (and module attribute reads) in the trace run within are intercepted (see
    the module docstring); yields the `_Calls` of the trace."""
    global _patched
    calls = _Calls(root)
    token, reads_token = _CALLS.set(calls), module_attributes.READS.set(calls.reads)
    with _PATCH_LOCK:
        if _patched == 0:
            torch.nn.Module.__call__ = _traced_call
            torch.nn.Module.__getattribute__ = module_attributes.tracked_getattribute
        _patched += 1
    try:
        yield calls
    finally:
        with _PATCH_LOCK:
            _patched -= 1
            if _patched == 0:
                torch.nn.Module.__call__ = _ORIGINAL_CALL
                del torch.nn.Module.__getattribute__
        module_attributes.READS.reset(reads_token)
        _CALLS.reset(token)


def _opaque_reason(module) -> str | None:
    wrapper = modules.wrapper_name(module)
    if wrapper is not None:
        return f"a {wrapper} wrapper: its forward does per-call work"
    if modules.has_hooks(module):
        return "its call runs hooks"
    return None


def _traced_call(module, *args, **kwargs):
    ctx, calls = ACTIVE_TRACE.get(), _CALLS.get()
    if ctx is None or calls is None or ctx.depth:
        return _ORIGINAL_CALL(module, *args, **kwargs)
    reason = _opaque_reason(module)
    if reason is not None:
        return record_call(ctx, calls, module, args, kwargs, reason)
    if isinstance(module, modules.JitModule):     # traced through: its original's forward
        module = module._orig_mod
    if calls.root is None:
        return _ORIGINAL_CALL(module, *args, **kwargs)
    saved = {f.name: copy.copy(getattr(ctx, f.name)) for f in dataclasses.fields(ctx)
             if f.name not in _NOT_ROLLED_BACK}
    try:
        return _ORIGINAL_CALL(module, *args, **kwargs)
    except NotImplementedError as error:
        for name, value in saved.items():
            setattr(ctx, name, value)
        return record_call(ctx, calls, module, args, kwargs,
                           f"its forward cannot be traced ({error})", traceable=False)


class ModuleCall:
    """The callable of an opaque module call: rebuilds the arguments from the trace's tensors
    and the constants, calls the module (its hooks run), checks the outputs against the traced
    metadata and returns their tensors as a tuple."""

    def __init__(self, module, arg_leaves, arg_spec, expected, out_spec, path, reason):
        self.module, self.path, self.reason = module, path, reason
        self.arg_leaves, self.arg_spec = arg_leaves, arg_spec
        self.tensor_at = [i for i, leaf in enumerate(arg_leaves) if leaf is _TENSOR]
        self.expected, self.out_spec = expected, out_spec

    def __call__(self, *tensors):
        leaves = list(self.arg_leaves)
        for i, tensor in zip(self.tensor_at, tensors):
            leaves[i] = tensor
        args, kwargs = containers.unflatten(leaves, self.arg_spec)
        flat, spec = pytree.tree_flatten(self.module(*args, **kwargs))
        if spec != self.out_spec or any(not _matches(x, e) for x, e in zip(flat, self.expected)):
            raise RuntimeError(
                f"ir.jit: the opaque call of module {self.path!r} returned "
                f"{_described(flat, spec)} where tracing found "
                f"{_described(self.expected, self.out_spec)} (its hooks or its data changed its "
                "outputs' structure, shapes or dtypes); the jitted function cannot use it")
        return tuple(x for x in flat if isinstance(x, torch.Tensor))


_TENSOR = object()      # where an argument leaf is a tensor of the trace


def _matches(value, expected) -> bool:
    if isinstance(expected, _Meta):
        return (isinstance(value, torch.Tensor) and value.dtype == expected.dtype
                and tuple(value.shape) == expected.shape)
    return value is expected or (type(value) is type(expected) and value == expected)


def _described(flat, spec) -> str:
    shown = [f"{str(x.dtype).removeprefix('torch.')}{list(x.shape)}"
             if isinstance(x, (torch.Tensor, _Meta)) else repr(x) for x in flat]
    return f"[{', '.join(shown)}] in {pytree.tree_unflatten(list(range(len(flat))), spec)!r}"


@dataclasses.dataclass(frozen=True)
class _Meta:
    """A tensor output's metadata."""
    shape: tuple
    dtype: torch.dtype
    device: torch.device
    requires_grad: bool


def record_call(ctx: TraceContext, calls: _Calls, module, args, kwargs, reason: str,
                traceable: bool = True):
    """Records an opaque call of `module` on these (traced) arguments; returns its outputs."""
    path = modules.module_path(calls.root, module)
    with ctx.op(f"module {path!r} (an opaque call: {reason})"):
        args, kwargs = ctx.run(ctx.captured, (args, kwargs))
        flat, arg_spec = pytree.tree_flatten((args, kwargs))
        for x in flat:      # the call's outputs have the sizes of this call
            if isinstance(x, TensorProxy):
                for s in x.shape:
                    specialize(s)
        flat = [specialize(x) if isinstance(x, ScalarProxy) else x for x in flat]
        args, kwargs = containers.unflatten(flat, arg_spec)
        outputs = ctx.run(_output_metadata, module, args, kwargs, traceable)
    out_flat, out_spec = pytree.tree_flatten(outputs)
    outs = [new_tensor(m.shape, m.dtype, m.device, m.requires_grad)
            for m in out_flat if isinstance(m, _Meta)]
    calls.count += 1
    name = f"opaque_{type(module).__name__}_call_{calls.count}"
    fn = ModuleCall(module, [_TENSOR if isinstance(x, TensorProxy) else x for x in flat],
                    arg_spec, out_flat, out_spec, path, reason)
    record(prims.opaque, [x for x in flat if isinstance(x, TensorProxy)],
           {"fn": fn, "fn_name": name, "kwargs": {}, "sequence": True, "effects": True,
            "module_call": {"module": path, "class": type(module).__name__,
                            "reason": reason}}, outs)
    log.info("%s: module %r (%s) runs as an opaque call in eager: %s", name, path,
             type(module).__name__, reason)
    tensors = iter(outs)
    return containers.unflatten([next(tensors) if isinstance(m, _Meta) else m
                                for m in out_flat], out_spec)


def _output_metadata(module, args, kwargs, traceable: bool):
    """The outputs of `module(*args, **kwargs)` with each tensor as its `_Meta`: from tracing
    its forward apart (no hooks run), else from running a copy of it on zeros."""
    traced = "its forward cannot be traced"
    if traceable:
        try:
            return _traced_apart(module, args, kwargs)
        except Exception as error:   # noqa: BLE001  (the copy's eager run raises eager's error)
            traced = f"tracing its forward failed ({type(error).__name__}: {error})"
    try:
        clone = copy.deepcopy(_inner(module))
    except Exception as error:  # noqa: BLE001
        raise NotImplementedError(
            f"ir.jit: module {type(module).__name__} runs as an opaque call, but its outputs "
            f"could not be found: {traced}, and copying it failed ({error})") from error

    def zeros(x):
        if not isinstance(x, TensorProxy):
            return x
        z = torch.zeros([hint(s) for s in x.shape], dtype=x.dtype, device=x.device)
        return z.requires_grad_() if x.requires_grad else z
    args, kwargs = containers.tree_map(zeros, (args, kwargs))
    token = module_attributes.READS.set(None)    # the copy's attributes guard nothing
    try:
        return containers.tree_map(_meta, type(clone).forward(clone, *args, **kwargs))
    finally:
        module_attributes.READS.reset(token)


def _inner(module):
    """The module whose forward computes what calling `module` does, less its per-call work:
    the original of a JitModule, the module a wrapper (DDP) wraps."""
    while True:
        if isinstance(module, modules.JitModule):
            module = module._orig_mod
        elif modules.wrapper_name(module) is not None:
            module = module.module
        else:
            return module


def _traced_apart(module, args, kwargs):
    """The outputs' metadata from tracing the forward of `module`'s class (without its hooks, or
    a forward replaced on the instance) in a trace of its own, on stand-ins of the arguments; the module's tensors become its inputs (a
    DTensor of a sharded module by its global shape)."""
    sub = TraceContext(symbolic=False)
    sub.make_input = lambda name, tensor: input_proxy(name, tensor, sub)
    sub.captured = lambda x: containers.tree_map(
        lambda v: sub.capture(v) if isinstance(v, torch.Tensor)
        and not isinstance(v, TensorProxy) else v, x)

    def stand_in(x):
        if isinstance(x, TensorProxy):
            return TensorProxy(sub.new_name("t"), [hint(s) for s in x.shape], x.dtype,
                               x.device, x.requires_grad)
        return x
    args, kwargs = containers.tree_map(stand_in, (args, kwargs))
    target = _inner(module)
    with tracing(sub):
        out = type(target).forward(target, *args, **kwargs)
        out = sub.run(sub.captured, out)
    return containers.tree_map(_meta, out)


def _meta(x):
    if isinstance(x, (torch.Tensor, TensorProxy)):
        return _Meta(tuple(hint(s) for s in x.shape), x.dtype, x.device,
                     bool(x.requires_grad and torch.is_grad_enabled()))
    if isinstance(x, ScalarProxy):     # a number of the trace apart: checked at run time
        return x.hint
    return x
