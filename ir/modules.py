"""Jitting `nn.Module`s: `ir.jit(module)` returns a `JitModule`, and `ir.jit(module.forward)`
(any bound method of a module) traces the module's state as inputs.

The parameters and buffers a traced method reads are inputs of its traces, named after them
(`blocks_0_attn_qkv_weight`) and read from their module at every call, so an optimizer step,
`load_state_dict` or a parameter replaced by another of the same kind is seen by the next call.
The module tree is part of the cache key, as the grad mode is: each module's identity and class,
its training flag and the names of its parameters and buffers. A change there (`eval()`, a
submodule replaced, a parameter set to None) misses the cache and compiles a new entry. Forward
and backward hooks on the modules a call runs are refused: the traced forward would run them
once, at tracing, instead of at every call.
"""
from __future__ import annotations

import inspect
import re

import torch
from torch.nn.modules import module as _torch_module

_HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
_GLOBAL_HOOKS = ("_global_forward_hooks", "_global_forward_pre_hooks",
                 "_global_backward_hooks", "_global_backward_pre_hooks")


class HookError(NotImplementedError):
    """A module the jitted call would run has forward or backward hooks."""


def owner_module(fn):
    """The module `fn` is a bound method of, else None."""
    owner = getattr(fn, "__self__", None)
    return owner if inspect.ismethod(fn) and isinstance(owner, torch.nn.Module) else None


def state_sources(module) -> dict:
    """identifier -> (tensor, reader) for every parameter and buffer of `module`'s tree, named
    by its path with `_` for `.` (`blocks_0_attn_qkv_weight`); `reader()` reads the tensor from
    its module at the time of the call. A tensor held twice (tied weights) is named once."""
    found, seen = {}, set()
    for path, mod in module.named_modules():
        for store in (mod._parameters, mod._buffers):
            for name, tensor in store.items():
                if tensor is None or id(tensor) in seen:
                    continue
                seen.add(id(tensor))
                ident = re.sub(r"\W", "_", f"{path}.{name}" if path else name)
                if ident[0].isdigit():
                    ident = "p_" + ident
                while ident in found:
                    ident += "_"
                found[ident] = (tensor, lambda store=store, name=name: store[name])
    return found


def structure_key(module, own_hooks: bool) -> tuple:
    """What the traces of `module`'s methods take as constant about its tree, one record per
    module (depth first): identity, class, training flag, the names of its parameters and
    buffers, and which of them are None. Raises HookError where a module that a call runs has
    hooks (the top module's own hooks only with `own_hooks`: calling a bound method skips them).
    Run at every call: kept to plain dict and tuple work."""
    if any(getattr(_torch_module, name) for name in _GLOBAL_HOOKS):
        raise HookError("ir.jit: global module hooks are registered (torch.nn.modules.module."
                        "register_module_forward_hook and the like); a jitted module's forward "
                        "is traced once, so they would not run at every call: remove them")
    if own_hooks:
        _check_hooks(module)
    records, stack = [], [module]
    while stack:
        mod = stack.pop()
        d = mod.__dict__
        params, buffers = d["_parameters"], d["_buffers"]
        unset = (tuple(k for k, v in params.items() if v is None)
                 + tuple(k for k, v in buffers.items() if v is None)
                 if params or buffers else ())
        records.append((id(mod), mod.__class__, mod.training, tuple(params), tuple(buffers),
                        unset))
        children = d["_modules"]
        if children:
            for child in reversed(children.values()):
                if child is not None:
                    _check_hooks(child)
                    stack.append(child)
    return tuple(records)


def _check_hooks(mod):
    d = mod.__dict__
    if not (d["_forward_hooks"] or d["_forward_pre_hooks"] or d["_backward_hooks"]
            or d["_backward_pre_hooks"]):
        return
    kinds = [name.strip("_").replace("_", " ") for name in _HOOK_DICTS if getattr(mod, name)]
    raise HookError(f"ir.jit: a {type(mod).__name__} module of the jitted module has "
                    f"{' and '.join(kinds)}; its forward is traced once, so they would not "
                    "run at every call: remove them (or jit the modules they wrap)")


def distance(old: tuple, new: tuple) -> int:
    """How many module records of two structure keys differ."""
    return sum(a != b for a, b in zip(old, new)) + abs(len(old) - len(new))


def _set_names(record, field) -> list:
    """The names of a module record's parameters (field 3) or buffers (4) that are not None."""
    return [name for name in record[field] if name not in record[5]]


def describe_change(module, old: tuple, new: tuple) -> str | None:
    """Why `new` (the structure key of `module` now) differs from `old`, in words, or None."""
    if old == new:
        return None
    paths = [path for path, _ in module.named_modules(remove_duplicate=False)]
    for i, (was, now) in enumerate(zip(old, new)):
        if was == now:
            continue
        where = f"module {paths[i] or '(top)'!r}" if i < len(paths) else f"module #{i}"
        if was[:2] != now[:2]:
            return f"{where}: replaced by another module (the module tree changed)"
        if was[2] != now[2]:
            return f"{where}: training changed {was[2]} -> {now[2]}"
        for kind, field in (("parameters", 3), ("buffers", 4)):
            before, after = _set_names(was, field), _set_names(now, field)
            if before != after:
                return f"{where}: its {kind} changed {before} -> {after}"
        return f"{where}: its parameters or buffers changed"
    return f"the module tree changed: {len(old)} -> {len(new)} modules"


class JitModule(torch.nn.Module):
    """What `ir.jit(module)` returns: the module, with its forward jitted.

    It shares the original's parameters, buffers and submodules (its `named_parameters()`,
    `state_dict()` and `named_modules()` names are the original's), and `train()`/`eval()`,
    `.to()`/`.cuda()`/`.float()`, `state_dict()`/`load_state_dict()` act on the original; other
    attributes are the original's. Hooks registered on the JitModule itself run as on any
    module; hooks on the original or its submodules are refused at the call (see `HookError`).
    """

    def __init__(self, module: torch.nn.Module, jitted):
        super().__init__()
        # Not registered as a submodule: the tree below is the original's own.
        self.__dict__.update(_orig_mod=module, _jitted=jitted, _parameters=module._parameters,
                             _buffers=module._buffers, _modules=module._modules,
                             _non_persistent_buffers_set=module._non_persistent_buffers_set)

    @property
    def training(self) -> bool:
        return self.__dict__["_orig_mod"].training

    @training.setter
    def training(self, mode: bool) -> None:
        module = self.__dict__.get("_orig_mod")     # absent while nn.Module.__init__ runs
        if module is not None:
            module.training = mode

    def forward(self, *args, **kwargs):
        return self._jitted(*args, **kwargs)

    def train(self, mode: bool = True):
        self._orig_mod.train(mode)
        return self

    def _apply(self, fn, recurse=True):
        self._orig_mod._apply(fn, recurse)
        return self

    def state_dict(self, *args, **kwargs):
        return self._orig_mod.state_dict(*args, **kwargs)

    def load_state_dict(self, *args, **kwargs):
        return self._orig_mod.load_state_dict(*args, **kwargs)

    def _load_from_state_dict(self, *args, **kwargs):   # when a parent module loads its own
        return self._orig_mod._load_from_state_dict(*args, **kwargs)

    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.__dict__["_orig_mod"], name)

    def __repr__(self) -> str:
        return f"ir.jit({self._orig_mod!r})"
