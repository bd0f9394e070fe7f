"""Functionalization: in-place ops traced as the functional ops they stand for.

Every in-place form the traced code uses (`x.add_(y)`, `x += y`, `out=`, `inplace=True`,
`x[i] = v`, `torch.relu_(x)`, `copy_`, `zero_`, `fill_`, ...) is traced as its out-of-place op,
cast to the target's dtype and broadcast to its shape as eager's in-place op does, then *written*:
the tensor the code holds (the same proxy object) stands for the new value from then on. A
`Mutations` record per trace keeps, for each written proxy, its current value, and for each view
made while tracing, its root tensor and how to derive it (the view ops replayed): a write through a
view scatters the new values into the root, and every other view of that root is derived again
from the new root when it is next used (as eager's views see the change).

Which ops return views is eager's answer: the op runs on a meta tensor laid out as the tensor
(`ir.ops.movement.layout_meta`), and a result that shares its storage is a view. Errors are
eager's: the in-place op itself runs on empty tensors first (a dtype it cannot cast to, a shape it cannot
broadcast to), a write into an overlapping layout (an expanded view) or into a leaf that requires
grad raises eager's own exception.

At the end, each written input gets its final value copied into its storage (`ir.write_back`).
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
from typing import Callable

import torch
import torch.nn.functional as F
from torch.utils import _pytree as pytree

from ir import containers, dispatch, prims, recording
from ir.ops import casts, elementwise, factories, movement, shapes
from ir.ops.registry import SHAPE_RULES
from ir.proxies import TensorProxy, hint, same_shape

# augmented assignments and the out-of-place operators they stand for
IN_PLACE_DUNDERS = {f"__i{op}__": f"__{op}__" for op in (
    "add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or", "xor", "lshift",
    "rshift", "matmul")}
# in-place methods that change a tensor's metadata (shape, strides, storage), not its values
_REFUSED = frozenset({"resize_", "resize_as_", "set_", "as_strided_", "squeeze_", "unsqueeze_",
                      "t_", "transpose_", "swapdims_", "swapaxes_", "detach_", "share_memory_",
                      "rename_", "refine_names_"})
# ops whose result may be a view of their first argument (eager decides, see `note_views`)
VIEW_OPS = frozenset({
    "__getitem__", "view", "view_as", "reshape", "reshape_as", "flatten", "unflatten",
    "unsqueeze", "squeeze", "permute", "transpose", "swapaxes", "swapdims", "t", "T", "mT", "H",
    "mH", "adjoint", "movedim", "moveaxis", "expand", "expand_as", "broadcast_to", "narrow",
    "select", "split", "split_with_sizes", "chunk", "tensor_split", "hsplit", "vsplit", "dsplit",
    "unbind", "diagonal", "unfold", "as_strided", "detach", "alias", "contiguous", "to",
    "type_as", "float", "half", "double", "bfloat16", "int", "long", "bool", "atleast_1d",
    "atleast_2d", "atleast_3d", "ravel", "data"})
_DETACHING = frozenset({"detach", "data"})
# reading these of a tensor freezes its value into the trace
_DATA_READS = frozenset({"__float__", "__int__", "__bool__", "__index__", "__complex__", "item",
                         "tolist", "numpy", "__array__", "__format__"})


@dataclasses.dataclass
class View:
    base: TensorProxy       # the root tensor (not a view) it shares memory with
    fn: Callable            # root value -> this view's value (the view ops, replayed)
    meta: torch.Tensor      # a meta tensor laid out as eager lays the view out
    synced: int             # the root's version its value was last derived at
    sibling: bool = False   # one of several views one op returned (split, chunk, unbind)
    detached: bool = False  # made through `detach()` / `.data`: its writes are not autograd's


@dataclasses.dataclass
class Mutations:
    values: dict = dataclasses.field(default_factory=dict)    # id(proxy) -> (proxy, value)
    views: dict = dataclasses.field(default_factory=dict)     # id(view proxy) -> View
    versions: dict = dataclasses.field(default_factory=dict)  # id(root) -> writes so far
    leaves: set = dataclasses.field(default_factory=set)      # ids of leaf inputs needing grad
    written_inputs: list = dataclasses.field(default_factory=list)  # set by `write_backs`

    def __copy__(self):
        """A copy whose tables change apart from these (a trace rolled back to it, see
        `ir.module_calls`, forgets the writes made since)."""
        return Mutations(dict(self.values), dict(self.views), dict(self.versions),
                         set(self.leaves), list(self.written_inputs))


# ---- values ---------------------------------------------------------------------------

def current(ctx, proxy):
    """The value `proxy` (a tensor the traced code holds) stands for now."""
    m = ctx.mutations
    view = m.views.get(id(proxy))
    if view is not None:
        version = m.versions.get(id(view.base), 0)
        if version != view.synced:
            if view.sibling and torch.is_grad_enabled() and current(ctx, view.base).requires_grad:
                _sibling_view_error(modify_base=True)
            m.values[id(proxy)] = (proxy, ctx.run(view.fn, current(ctx, view.base)))
            view.synced = version
    entry = m.values.get(id(proxy))
    return proxy if entry is None else entry[1]


def resolve(ctx, x):
    """x with each proxy replaced by its current value."""
    if not ctx.mutations.values:
        return x
    return containers.tree_map(
        lambda v: current(ctx, v) if isinstance(v, TensorProxy) else v, x)


def write(ctx, target: TensorProxy, value) -> TensorProxy:
    """Makes `value` the contents of `target` from now on, converted and broadcast to it as an
    in-place op stores its result; through a view, the view's root changes too. A write autograd
    does not see (in a no_grad block, or through `detach()` / `.data`) into a tensor that
    requires grad changes its values only: its gradient still flows to its old history."""
    m = ctx.mutations
    view = m.views.get(id(target))
    root = view.base if view is not None else target
    detached = view is not None and view.detached
    input_leaf(ctx, root)
    if not detached:
        _check_writable(ctx, root, view)
    hidden = (detached or not torch.is_grad_enabled()) and current(ctx, root).requires_grad
    if (view is not None and view.sibling and torch.is_grad_enabled() and not hidden
            and current(ctx, target).requires_grad):
        _sibling_view_error(modify_base=False)
    value = ctx.run(_fit, ctx, target, value, hidden)
    if id(root) in ctx.input_layouts and any(v.base is root for v in m.views.values()):
        # guards it: which ops made views depends on its layout
        ctx.run(movement.layout_meta, root)
    old = current(ctx, root)
    new = value if view is None else ctx.run(_scatter, old, view.fn, value)
    if hidden:
        with torch.enable_grad():
            new = ctx.run(record_helper, values_behind_autograd, (old, new),
                          [(root.shape, root.dtype)])[0]
    m.values[id(root)] = (root, new)
    version = m.versions[id(root)] = m.versions.get(id(root), 0) + 1
    if view is not None and not hidden:     # else derived again from the root, with its history
        m.values[id(target)] = (target, value)
        view.synced = version
    return target


class _BehindAutograd(torch.autograd.Function):
    @staticmethod
    def forward(ctx, old, new):
        return new.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def values_behind_autograd(old, new):
    """`new`'s values with `old`'s autograd history: what a write autograd does not see leaves
    in a tensor that requires grad (eager's graph still holds the old history, and the gradient
    reaches it unchanged)."""
    return _BehindAutograd.apply(old, new)


def _fit(ctx, target, value, hidden: bool = False):
    """value as target's dtype and shape (a number filled in); where autograd sees the write
    (not `hidden`), it requires grad if target did."""
    if not isinstance(value, TensorProxy):
        value = factories.full(target.shape, value, dtype=target.dtype, device=target.device)
    value = casts.convert(value, target.dtype)
    if not same_shape(value.shape, target.shape):
        shapes.broadcast_shape(target.shape, value.shape)    # guards the sizes it relies on
        value = movement.expand_to(value, target.shape)
    old = current(ctx, target)
    if old.requires_grad and not value.requires_grad and not hidden:
        # eager's result keeps requiring grad (a zero gradient flows to the old value)
        never = factories.full(target.shape, False, dtype=torch.bool, device=target.device)
        value = elementwise.where(never, old, value)
    return value


def requires_grad_now(ctx, x) -> bool:
    """Whether x requires grad as the traced code sees it: the value an in-place op last wrote
    into it does (or x itself)."""
    entry = ctx.mutations.values.get(id(x))
    return (x if entry is None else entry[1])._requires_grad


def is_leaf(ctx, x) -> bool:
    """`x.is_leaf` of a tensor the traced code holds: one that does not require grad is a leaf,
    one computed (or written) with a value that requires grad is not, and an input that
    requires grad is a leaf or not as the caller made it (`input_leaf`)."""
    if not requires_grad_now(ctx, x):
        return True
    return x._requires_grad and input_leaf(ctx, x)


def input_leaf(ctx, x) -> bool:
    """Whether x is an input that requires grad and is a leaf, guarded: eager's checks of a
    write into it, and its write-back, depend on it."""
    if id(x) not in ctx.input_layouts or not x._requires_grad:
        return False
    leaf = id(x) in ctx.mutations.leaves
    ctx.add_guard(("is_leaf", x, leaf))
    return leaf


def _check_writable(ctx, root, view) -> None:
    """Eager's refusal of a write into a leaf that requires grad (or a view of one) in grad
    mode."""
    if id(root) in ctx.mutations.leaves and torch.is_grad_enabled():
        leaf = torch.zeros(2, requires_grad=True)
        (leaf if view is None else leaf[:1]).add_(1)     # raises eager's own error


def _sibling_view_error(modify_base: bool) -> None:
    """Raises eager's error for a write into one of several views an op returned (`split`), or a
    use of one after its base was written, where they require grad."""
    base = torch.zeros(2, requires_grad=True).clone()
    view = base.split(1)[0]
    if modify_base:
        base.add_(1)
        view.add(1)
    else:
        view.add_(1)


def _root(ctx, proxy):
    view = ctx.mutations.views.get(id(proxy))
    return view.base if view is not None else proxy


def _layout(ctx, proxy) -> torch.Tensor:
    """A meta tensor laid out as eager lays out the tensor the traced code holds (an input as it
    is in this call, unguarded: `write` guards it where a write through a view relies on it;
    anything computed contiguous)."""
    view = ctx.mutations.views.get(id(proxy))
    if view is not None:
        return view.meta
    sizes = [hint(s) for s in proxy.shape]
    if id(proxy) in ctx.input_layouts:
        strides, _ = ctx.input_layouts[id(proxy)]
        return torch.empty_strided(sizes, strides, dtype=proxy.dtype, device="meta")
    return torch.empty(sizes, dtype=proxy.dtype, device="meta")


def check_memory_overlap(ctx, fn, target, args, kwargs) -> None:
    """Eager's refusals of an in-place op that depend on memory: a target whose elements share
    memory (an expanded view), an operand partly overlapping it (`x[None].add_(x)`). Where one
    may apply, the op runs on CPU tensors laid out as the traced ones, sharing one storage as
    they do, which raises eager's own error."""
    root = _root(ctx, target)
    flat, spec = pytree.tree_flatten((args, kwargs))
    sharing = [v for v in flat if isinstance(v, TensorProxy) and v is not target
               and _root(ctx, v) is root and v.dtype == target.dtype]
    target_meta = _layout(ctx, target)
    if not sharing and torch._debug_has_internal_overlap(target_meta) != 1:
        return
    metas = {id(p): _layout(ctx, p) for p in [target, *sharing]}
    span = 1 + max(m.storage_offset() + sum((n - 1) * s for n, s in zip(m.shape, m.stride()))
                   for m in metas.values())
    storage = torch.zeros(span, dtype=target.dtype)
    laid_out = {key: storage.as_strided(m.shape, m.stride(), m.storage_offset())
                for key, m in metas.items()}

    def stand_in(v):
        return laid_out[id(v)] if id(v) in laid_out else recording._stand_in(v, "cpu")
    args, kwargs = pytree.tree_unflatten([stand_in(v) for v in flat], spec)
    fn(laid_out[id(target)], *args, **kwargs)


def put_positions(base, positions, values):
    """base with `values` stored at the flat positions `positions` (the functional form of a
    write through a view: positions are the view of base's element indices)."""
    flat = base.reshape(-1).index_put((positions.reshape(-1),), values.reshape(-1))
    return flat.view(base.shape)


def _scatter(root_value, view_fn, values):
    """The root's new value after `values` were written through the view `view_fn` makes."""
    numel = root_value.numel()
    positions = movement.reshape(factories.arange(numel, device=root_value.device),
                                  root_value.shape)
    return record_helper(put_positions, (root_value, view_fn(positions), values),
                   [(root_value.shape, root_value.dtype)])[0]


def record_helper(fn, args, shapes_dtypes):
    """One opaque equation fn(*args) run by torch, with outputs of the given shapes and dtypes
    (the tracer's own functional helpers, whose shapes it knows)."""
    flat = pytree.tree_flatten(args)[0]
    device = next(x.device for x in flat if isinstance(x, TensorProxy))
    grad = recording._needs_grad(flat)
    outs = [recording.new_tensor(shape, dtype, device, grad) for shape, dtype in shapes_dtypes]
    recording.record(prims.opaque, args, {"fn": fn, "fn_name": f"opaque_{fn.__name__}",
                                        "kwargs": {}, "sequence": len(outs) > 1}, outs)
    return outs


# ---- views ----------------------------------------------------------------------------

def _stand_ins(x):
    return pytree.tree_map(lambda v: recording._stand_in(v, "meta"), x)


def note_views(ctx, name: str, self, result, replay, meta_run) -> None:
    """Records which outputs of the op `name` on `self` are views of it, as eager makes them:
    `replay(value)` traces the op again on another value of self, `meta_run(meta)` runs it on a
    meta tensor laid out as self."""
    if name not in VIEW_OPS or not isinstance(self, TensorProxy):
        return
    outs = result if isinstance(result, (tuple, list)) else (result,)
    if not any(isinstance(o, TensorProxy) and o is not self for o in outs):
        return
    m = ctx.mutations
    parent = m.views.get(id(self))
    root = parent.base if parent is not None else self
    self_meta = ctx.run(_layout, ctx, self)
    try:
        metas = ctx.run(meta_run, self_meta)
    except Exception:       # noqa: BLE001  (the op ran on proxies; its meta run is only a probe)
        return
    metas = metas if isinstance(metas, (tuple, list)) else (metas,)
    storage = _storage(self_meta)
    for i, (out, meta) in enumerate(zip(outs, metas)):
        if (isinstance(out, TensorProxy) and out is not self and isinstance(meta, torch.Tensor)
                and _storage(meta) == storage):
            sequence = isinstance(result, (tuple, list))
            m.views[id(out)] = View(root, _derivation(parent, replay, i, sequence), meta,
                                    m.versions.get(id(root), 0),
                                    sibling=sequence or (parent is not None and parent.sibling),
                                    detached=name in _DETACHING or (parent is not None
                                                                     and parent.detached))


def _storage(meta) -> int:
    """The identity of meta's storage: a view shares it, and so does an alias that autograd does
    not call a view (`detach()`, `.data`)."""
    return meta.untyped_storage()._cdata


def _derivation(parent, replay, index, sequence):
    def derive(root_value):
        value = root_value if parent is None else parent.fn(root_value)
        result = replay(value)
        return result[index] if sequence else result
    return derive


# ---- dispatch -------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _inplace_parameter(func):
    """The position of func's `inplace` parameter (F.relu, F.dropout, ...), or None."""
    try:
        names = list(inspect.signature(func).parameters)
    except (TypeError, ValueError):
        return None
    return names.index("inplace") if "inplace" in names else None


def _name(func) -> str:
    return getattr(func, "__name__", "")


def is_in_place_name(name: str) -> bool:
    """Whether a method or function of this name writes into its first argument."""
    return name in IN_PLACE_DUNDERS or name == "__setitem__" or (
        name.endswith("_") and not name.startswith("_") and name not in ("requires_grad_",))


def is_in_place(func, args, kwargs) -> bool:
    """Whether the torch call writes into a tensor argument."""
    if kwargs.get("out") is not None or is_in_place_name(_name(func)):
        return True
    at = _inplace_parameter(func)
    return kwargs.get("inplace", args[at] if at is not None and at < len(args) else False) is True


def call_torch(ctx, func, args, kwargs):
    """A torch call of the traced code (its real tensors already captured)."""
    if kwargs.get("out") is not None:
        return _out_call(ctx, func, args, kwargs)
    at = _inplace_parameter(func)
    if kwargs.get("inplace", args[at] if at is not None and at < len(args) else False) is True:
        if at is not None and at < len(args):
            args = args[:at] + (False,) + args[at + 1:]
        else:
            kwargs = {**kwargs, "inplace": False}
        target = args[0] if args else kwargs["input"]
        return write(ctx, target, dispatch.call_torch(func, *resolve(ctx, (args, kwargs))))
    name = _name(func)
    if is_in_place_name(name) and args and isinstance(args[0], TensorProxy):
        return in_place_method(ctx, name, args[0], args[1:], kwargs)
    if func is F.batch_norm:
        return _batch_norm(ctx, args, kwargs)
    rargs, rkwargs = resolve(ctx, (args, kwargs))
    result = dispatch.call_torch(func, rargs, rkwargs)
    if args and name in VIEW_OPS:
        note_views(ctx, name, args[0], result,
                   lambda b: dispatch.call_torch(func, (b, *rargs[1:]), rkwargs),
                   lambda meta: func(meta, *_stand_ins(rargs[1:]), **_stand_ins(rkwargs)))
    return result


def call_method(ctx, name: str, self, args):
    """An operator of the traced code on a tensor (`x + y`, `x[i]`, `x += y`, `x[i] = v`)."""
    if name in IN_PLACE_DUNDERS or name == "__setitem__":
        return in_place_method(ctx, name, self, args, {})
    rself, rargs = resolve(ctx, (self, args))
    result = dispatch.call_method(name, rself, rargs)
    note_views(ctx, name, self, result, lambda b: dispatch.call_method(name, b, rargs),
               lambda meta: getattr(meta, name)(*_stand_ins(rargs)))
    return result


def tensor_method(ctx, self, name: str):
    """The attribute `name` of a traced tensor: a method (traced when called) or a property."""
    if is_in_place_name(name) and hasattr(torch.Tensor, name):
        return lambda *args, **kwargs: ctx.run(in_place_method, ctx, name, self,
                                               *ctx.run(ctx.captured, (args, kwargs)))
    if name == "is_leaf":       # of the tensor the code holds, not of its current value
        return ctx.run(is_leaf, ctx, self)
    attribute = ctx.run(dispatch.tensor_method, current(ctx, self), name)
    if not callable(attribute):
        note_views(ctx, name, self, attribute, lambda b: dispatch.tensor_method(b, name),
                   lambda meta: getattr(meta, name))
        return attribute

    def method(*args, **kwargs):
        rargs, rkwargs = resolve(ctx, ctx.run(ctx.captured, (args, kwargs)))
        result = ctx.run(attribute, *rargs, **rkwargs)
        note_views(ctx, name, self, result,
                   lambda b: dispatch.tensor_method(b, name)(*rargs, **rkwargs),
                   lambda meta: getattr(meta, name)(*_stand_ins(rargs), **_stand_ins(rkwargs)))
        return result
    return method


def in_place_method(ctx, name: str, target, args, kwargs):
    """`target.<name>(*args, **kwargs)` for an in-place method (or `__iadd__`, `__setitem__`):
    eager's checks, then its functional op, written into target; returns target, as eager."""
    if name == "__setitem__":
        return _setitem(ctx, target, *args)
    method = getattr(torch.Tensor, name, None)
    if method is None or name in _REFUSED:
        raise NotImplementedError(f"ir.jit: the in-place tensor method {name} changes the "
                                  "tensor's shape or storage, which ir.jit does not support")
    with ctx.op(f"Tensor.{name}"):
        dispatch.eager_checks(method, (target, *args), kwargs)
        check_memory_overlap(ctx, method, target, args, kwargs)
    rtarget, rargs, rkwargs = resolve(ctx, (target, args, kwargs))
    value = _functional_value(ctx, name, rtarget, rargs, rkwargs)
    if (name not in _STORES and isinstance(value, TensorProxy)
            and not torch.can_cast(value.dtype, target.dtype)):     # meta does not check it
        method(*recording._stand_in((target, *args), "cpu"),
               **{k: recording._stand_in(v, "cpu") for k, v in kwargs.items()})
        raise RuntimeError(f"result type {value.dtype} can't be cast to the desired output "
                           f"type {target.dtype}")
    write(ctx, target, value)
    return target


_STORES = frozenset({"copy_", "zero_", "fill_"})    # store any dtype, converted as eager's copy


def _functional_value(ctx, name, target, args, kwargs):
    """What the in-place method `name` computes for target (before the cast into it)."""
    if name == "copy_":
        return args[0]
    if name == "zero_":
        return 0
    if name == "fill_":
        return args[0]
    functional = IN_PLACE_DUNDERS.get(name, name[:-1])
    if functional in IN_PLACE_DUNDERS.values():
        return dispatch.call_method(functional, target, args)
    if hasattr(torch.Tensor, functional):
        return dispatch.tensor_method(target, functional)(*args, **kwargs)
    # no out-of-place form (normal_, uniform_, ...): the op itself, on a copy, run by torch
    return recording.opaque(_on_a_copy(name), (target, *args), kwargs)


@functools.lru_cache(maxsize=None)
def _on_a_copy(name: str):
    def fn(tensor, *args, **kwargs):
        return getattr(tensor.clone(), name)(*args, **kwargs)
    fn.__name__ = f"{name[:-1]}_on_a_copy"
    return _same_shape_rule(fn)


def _basic(index) -> bool:
    index = index if isinstance(index, tuple) else (index,)
    return not any(isinstance(i, (TensorProxy, torch.Tensor, list, bool)) for i in index)


def _setitem(ctx, target, index, value):
    """`target[index] = value`: a write through the view `target[index]` for basic indexing
    (ints, slices, None, ...), else the functional setitem run by torch."""
    with ctx.op("Tensor.__setitem__"):
        dispatch.eager_checks(torch.Tensor.__setitem__, (target, index, value), {})
        check_memory_overlap(ctx, torch.Tensor.__setitem__, target, (index, value), {})
    if _basic(index):
        view = call_method(ctx, "__getitem__", target, (index,))
        if not _rewrites_itself(ctx, view, value):
            write(ctx, view, _leading_ones_dropped(ctx, value, len(view.shape)))
        return None
    rtarget, rindex, rvalue = resolve(ctx, (target, index, value))
    write(ctx, target, recording.opaque(setitem_on_a_copy, (rtarget, rindex, rvalue), {}))
    return None


def _leading_ones_dropped(ctx, value, ndim):
    """The current value of a setitem's value, without the leading size-1 dims beyond the
    target's rank (eager's setitem drops them: `y[0] = x[1:2]`)."""
    if not isinstance(value, TensorProxy):
        return value
    value = current(ctx, value)
    drop = 0
    while len(value.shape) - drop > ndim and value.shape[drop] == 1:
        drop += 1
    return dispatch.call_torch(torch.reshape, (value, value.shape[drop:]), {}) if drop else value


def _rewrites_itself(ctx, view, value) -> bool:
    """Whether `target[index] = value` stores a view into the very memory it was read from,
    after a write to it (`x[:, :2] += y` ends with `x[:, :2] = <that view>`): nothing changes."""
    if not isinstance(value, TensorProxy) or view is value:
        return view is value
    root = _root(ctx, view)
    if _root(ctx, value) is not root or not ctx.mutations.versions.get(id(root)):
        return False
    a, b = _layout(ctx, view), _layout(ctx, value)
    return (a.shape, a.stride(), a.storage_offset()) == (b.shape, b.stride(), b.storage_offset())


def setitem_on_a_copy(tensor, index, value):
    out = tensor.clone()
    out[index] = value
    return out


def _same_shape_rule(fn):
    """Registers fn's shape rule: its output has its first argument's shape."""
    SHAPE_RULES[fn] = lambda tensor, *args, **kwargs: [tensor.shape]
    return fn


_same_shape_rule(setitem_on_a_copy)


def _out_call(ctx, func, args, kwargs):
    """`func(..., out=o)`: the call without `out`, written into o (which keeps its shape: an
    out of another shape would be resized, which ir.jit does not support)."""
    out = kwargs["out"]
    if not isinstance(out, TensorProxy):
        raise NotImplementedError(f"ir.jit: {_name(func)}(..., out=...) with out of type "
                                  f"{type(out).__name__} is not supported")
    with ctx.op(recording._opaque_name(func)):
        dispatch.eager_checks(func, args, kwargs)
        if torch.is_grad_enabled() and any(isinstance(v, TensorProxy) and v.requires_grad
                                           for v in pytree.tree_flatten((args, kwargs))[0]):
            func(*_needing_grad(args), **_needing_grad(kwargs))    # raises eager's error
    rest = {k: v for k, v in kwargs.items() if k != "out"}
    value = dispatch.call_torch(func, *resolve(ctx, (args, rest)))
    if not isinstance(value, TensorProxy) or len(value.shape) != len(out.shape) or any(
            a != b for a, b in zip(value.shape, out.shape)):    # guarded equal where equal
        raise NotImplementedError(
            f"ir.jit: {_name(func)}(..., out=...) would resize out from "
            f"{[hint(s) for s in out.shape]}; pass an out of the result's shape")
    if not torch.can_cast(value.dtype, out.dtype):
        raise RuntimeError(f"result type {value.dtype} can't be cast to the desired output "
                           f"type {out.dtype}")
    return write(ctx, out, value)


def _needing_grad(x):
    """x with empty CPU tensors for proxies, requiring grad where they do."""
    return pytree.tree_map(lambda v: recording._stand_in(v, "cpu").requires_grad_(v.requires_grad)
                           if isinstance(v, TensorProxy) else v, x)


def batch_norm_functional(input, running_mean, running_var, weight, bias, momentum, eps):
    """F.batch_norm in training with running statistics, as a function: (output, the new
    running mean, the new running variance), by eager's own kernel."""
    out, _, _, mean, var = torch.ops.aten._native_batch_norm_legit_functional(
        input, weight, bias, running_mean, running_var, True, momentum, eps)
    return out, mean, var


def _batch_norm(ctx, args, kwargs):
    """F.batch_norm: in training with running statistics, its functional form and the writes of
    the new statistics; else the op itself (it writes nothing)."""
    bound = inspect.signature(F.batch_norm).bind(*args, **kwargs)
    bound.apply_defaults()
    a = bound.arguments
    if not (a["training"] and a["running_mean"] is not None):
        return dispatch.call_torch(F.batch_norm, *resolve(ctx, (args, kwargs)))
    with ctx.op("torch.nn.functional.batch_norm"):
        dispatch.eager_checks(F.batch_norm, args, kwargs)
    x, mean, var, weight, bias = resolve(ctx, (a["input"], a["running_mean"], a["running_var"],
                                               a["weight"], a["bias"]))
    momentum, eps = recording.specialize(a["momentum"]), recording.specialize(a["eps"])
    channel = x.shape[1]
    out, new_mean, new_var = record_helper(
        batch_norm_functional, (x, mean, var, weight, bias, momentum, eps),
        [(x.shape, x.dtype), ((channel,), mean.dtype), ((channel,), var.dtype)])
    new_mean.requires_grad = new_var.requires_grad = False     # running statistics: no grad
    write(ctx, a["running_mean"], new_mean)
    write(ctx, a["running_var"], new_var)
    return out


def check_data_read(ctx, func, args) -> None:
    """Refuses reading the data of a captured tensor that the traced code wrote in place (e.g.
    `float(self.num_batches_tracked)` after its `add_(1)`): the value would be frozen into the
    trace, and wrong from the next call."""
    if _name(func) not in _DATA_READS or not args or not isinstance(args[0], torch.Tensor):
        return
    for proxy, tensor, source in ctx.captures:
        if tensor is args[0] and id(proxy) in ctx.mutations.values:
            raise NotImplementedError(
                f"ir.jit: the traced code reads the value of {source or 'a captured tensor'} "
                f"({_name(func)}) after changing it in place; that value depends on the data of "
                "each call, which a trace cannot hold (e.g. nn.BatchNorm with momentum=None): "
                "run this module eagerly")
