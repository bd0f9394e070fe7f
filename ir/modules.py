"""Jitting `nn.Module`s: `ir.jit(module)` returns a `JitModule`, and `ir.jit(module.forward)`
(any bound method of a module) traces the module's state as inputs.

The parameters and buffers a traced method reads are inputs of its traces, named after them
(`blocks_0_attn_qkv_weight`) and read from their module at every call, so an optimizer step,
`load_state_dict` or a parameter replaced by another of the same kind is seen by the next call.
The module tree is part of the cache key, as the grad mode is (`structure_key`). A change
there (`eval()`, a submodule replaced, a parameter set to None, weights tied or untied, hooks
added) misses the cache and compiles a new entry; the number attributes a trace read are
guarded by its entry (`ir.module_attributes`). A submodule whose call runs hooks is called as
an opaque call, in eager, at every call (`ir.module_calls`).
"""
from __future__ import annotations

import inspect
import re

import torch
from torch.nn.modules import module as _torch_module

_GLOBAL_HOOKS = ("_global_forward_hooks", "_global_forward_pre_hooks",
                 "_global_backward_hooks", "_global_backward_pre_hooks")
# Wrappers whose forward does per-call work (DDP's reducer, DataParallel's scatter, FSDP's
# unshard): never traced; a submodule of these classes runs as an opaque call.
_WRAPPERS = {("torch.nn.parallel.distributed", "DistributedDataParallel"),
             ("torch.nn.parallel.data_parallel", "DataParallel"),
             ("torch.distributed.fsdp.fully_sharded_data_parallel", "FullyShardedDataParallel")}


def owner_module(fn):
    """The module `fn` is a bound method of, else None."""
    owner = getattr(fn, "__self__", None)
    return owner if inspect.ismethod(fn) and isinstance(owner, torch.nn.Module) else None


def wrapper_name(module) -> str | None:
    """The class name of a wrapper with per-call work in its forward (DDP, DataParallel, FSDP)
    that `module` is, else None."""
    for cls in type(module).__mro__:
        if (cls.__module__, cls.__name__) in _WRAPPERS:
            return cls.__name__
    return None


def module_path(root, module) -> str:
    """`module`'s path in the tree of `root` (`blocks.0.attn`, `(top)`), else its class name."""
    if isinstance(root, torch.nn.Module):
        for path, mod in root.named_modules():
            if mod is module:
                return path or "(top)"
    return type(module).__name__


def has_hooks(module) -> bool:
    """Whether calling `module` runs hooks: its own, global module hooks, or a forward replaced
    on the instance (as accelerate's hooks do)."""
    d = module.__dict__
    return bool(d["_forward_hooks"] or d["_forward_pre_hooks"] or d["_backward_hooks"]
                or d["_backward_pre_hooks"] or "forward" in d or _global_hooks())


def _global_hooks() -> bool:
    return any(getattr(_torch_module, name) for name in _GLOBAL_HOOKS)


def _identifier(path: str, name: str, taken) -> str:
    ident = re.sub(r"\W", "_", f"{path}.{name}" if path else name)
    if ident[0].isdigit():
        ident = "p_" + ident
    while ident in taken:
        ident += "_"
    return ident


def state_sources(module) -> dict:
    """identifier -> (tensor, reader) for every parameter and buffer of `module`'s tree, and
    every tensor attribute of its modules that is neither (`self.mask = torch.ones(...)`), named
    by its path with `_` for `.` (`blocks_0_attn_qkv_weight`); `reader()` reads the tensor from
    its module at the time of the call. A tensor held twice (tied weights) is named once."""
    found, seen = {}, set()
    for path, mod in module.named_modules():
        for store in (mod._parameters, mod._buffers, mod.__dict__):
            for name, tensor in store.items():
                if not isinstance(tensor, torch.Tensor) or id(tensor) in seen:
                    continue
                seen.add(id(tensor))
                found[_identifier(path, name, found)] = (
                    tensor, lambda store=store, name=name: store.get(name))
    return found


def structure_key(module) -> tuple:
    """What the traces of `module`'s methods take as constant about its tree: one record per
    module (depth first) of its identity, class, training flag, the names of its parameters and
    buffers, which of them are None and whether calling it runs hooks (then the trace calls it
    as an opaque call); then which state slots hold one tensor (tied weights), as (slot, first
    slot holding it) pairs. Run at every call: kept to plain dict and tuple work."""
    records, stack, ties, first_slot, slot = [], [module], [], {}, 0
    global_hooks = _global_hooks()
    while stack:
        mod = stack.pop()
        d = mod.__dict__
        params, buffers = d["_parameters"], d["_buffers"]
        unset = ()
        for store in (params, buffers):
            for name, value in store.items():
                if value is None:
                    unset += (name,)
                    continue
                first = first_slot.setdefault(id(value), slot)
                if first != slot:
                    ties.append((slot, first))
                slot += 1
        hooked = mod is not module and bool(
            global_hooks or d["_forward_hooks"] or d["_forward_pre_hooks"]
            or d["_backward_hooks"] or d["_backward_pre_hooks"] or "forward" in d)
        records.append((id(mod), mod.__class__, mod.training, tuple(params), tuple(buffers),
                        unset, hooked))
        children = d["_modules"]
        if children:
            stack.extend(child for child in reversed(children.values()) if child is not None)
    return tuple(records), tuple(ties)


def distance(old: tuple, new: tuple) -> int:
    """How many module records (and tie patterns) of two structure keys differ."""
    (old_records, old_ties), (new_records, new_ties) = old, new
    return (sum(a != b for a, b in zip(old_records, new_records))
            + abs(len(old_records) - len(new_records)) + (old_ties != new_ties))


def _set_names(record, field) -> list:
    """The names of a module record's parameters (field 3) or buffers (4) that are not None."""
    return [name for name in record[field] if name not in record[5]]


def describe_change(module, old: tuple, new: tuple) -> str | None:
    """Why `new` (the structure key of `module` now) differs from `old`, in words, or None."""
    if old == new:
        return None
    (old, old_ties), (new, new_ties) = old, new
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
        if was[6] != now[6]:
            now_runs = "added: it now runs" if now[6] else "removed: it no longer runs"
            return f"{where}: hooks {now_runs} as an opaque call in eager"
        return f"{where}: its parameters or buffers changed"
    if len(old) != len(new):
        return f"the module tree changed: {len(old)} -> {len(new)} modules"
    return (f"which parameters and buffers share one tensor (tied weights) changed: "
            f"{list(old_ties)} -> {list(new_ties)} (slot, tied to slot)")


def refuse_wrapper(module) -> None:
    """Raises for `ir.jit` of a wrapper whose forward does per-call work (DDP's reducer, FSDP's
    unshard): traced, that work would run once. The wrapper goes around the jitted module."""
    name = wrapper_name(module)
    if name is not None:
        raise TypeError(f"ir.jit: {name}'s forward does per-call work (communication, "
                        f"scattering) that a trace would run once; jit the module it wraps "
                        f"and wrap the jitted module instead: {name}(ir.jit(model))")


# The JitModule's own state that is not the original's: everything else is read from and
# written to the original.
_OWN = frozenset({"_orig_mod", "_jitted"})


class JitModule(torch.nn.Module):
    """What `ir.jit(module)` returns: the module, with its forward jitted.

    It shares the original's parameters, buffers, submodules and hooks (its `named_parameters()`,
    `state_dict()` and `named_modules()` names are the original's, and a hook registered on
    either runs at the calls of both), and `train()`/`eval()`, `.to()`/`.cuda()`/`.float()`,
    `state_dict()`/`load_state_dict()` act on the original; other attributes are read from and
    written to the original. `copy.deepcopy`, `pickle` and `torch.save` copy the original and
    jit the copy with the same options (the cache is not copied).
    """

    def __init__(self, module: torch.nn.Module, jitted):
        super().__init__()
        d = self.__dict__
        # Not registered as a submodule: the tree below is the original's own; the hook
        # dictionaries are the original's, so its hooks run when the JitModule is called.
        shared = [k for k in d if k in ("_parameters", "_buffers", "_modules",
                                        "_non_persistent_buffers_set") or "hooks" in k]
        d.update({k: module.__dict__[k] for k in shared}, _orig_mod=module, _jitted=jitted)
        d.pop("_is_full_backward_hook", None)       # read from (and written to) the original

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

    def __setattr__(self, name: str, value) -> None:
        if name in _OWN or hasattr(type(self), name):   # `training`, `__class__` (FSDP2)
            super().__setattr__(name, value)
        else:
            setattr(self._orig_mod, name, value)

    def __delattr__(self, name: str) -> None:
        if name in _OWN or name in self.__dict__:
            super().__delattr__(name)
        else:
            delattr(self._orig_mod, name)

    def __reduce_ex__(self, protocol):
        """Copies and pickles as the original module and the jit options (not the cache)."""
        return _rebuild, (self._orig_mod, self._jitted.options(), type(self._jitted))

    def __repr__(self) -> str:
        return f"ir.jit({self._orig_mod!r})"


def _rebuild(module, options: dict, function_type) -> JitModule:
    """`ir.jit(module, **options)` of a copied module (`function_type`: `ir.jit.JitFunction`)."""
    return JitModule(module, function_type(module.forward, **options))
