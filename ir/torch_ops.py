"""Torch-level operations as decompositions into prims.

`HANDLERS` maps torch callables (torch.cat, torch.Tensor.add, F.pad, ...) and `METHODS` maps
tensor method names to a function of the same signature that records prims. Type promotion follows
PyTorch: the torch function itself is run on `meta` tensors to find the result dtype and to raise
PyTorch's own error for invalid input.
"""
from __future__ import annotations

import operator

import torch
import torch.nn.functional as F

from ir import prims
from ir.proxies import FloatProxy, IntProxy, TensorProxy, hint, same_size
from ir.tracing import bind, current, opaque, specialize

HANDLERS: dict = {}
METHODS: dict = {}


def register(*targets, methods=()):
    def wrap(fn):
        for t in targets:
            HANDLERS[t] = fn
        for m in methods:
            METHODS[m] = fn
        return fn
    return wrap


def _meta(x):
    if isinstance(x, TensorProxy):
        return torch.empty([hint(s) for s in x.shape], dtype=x.dtype, device="meta")
    return hint(x)


def meta_dtype(fn, *args, **kwargs):
    """Result dtype of fn on these arguments, found by running it on meta tensors."""
    return fn(*[_meta(a) for a in args], **{k: _meta(v) for k, v in kwargs.items()}).dtype


# ---- shapes and broadcasting -------------------------------------------------------------

def _is_one(s) -> bool:
    """A derived size that is 1 in this call (`i0 - 1`) broadcasts as in eager: guarded == 1."""
    if isinstance(s, IntProxy):
        return s.hint == 1 and s == 1
    return s == 1


def broadcast_shape(*shapes):
    """PyTorch's broadcast of symbolic shapes; equal symbolic sizes are guarded equal."""
    ndim = max(len(s) for s in shapes)
    out = []
    for i in range(ndim):
        sizes = [s[i - ndim + len(s)] for s in shapes if i - ndim + len(s) >= 0]
        real = [d for d in sizes if not _is_one(d)]
        if not real:
            out.append(1)
            continue
        chosen = next((d for d in real if not isinstance(d, IntProxy)), real[0])
        for d in real:
            if d is not chosen and d != chosen:
                raise RuntimeError(f"shapes {[tuple(map(hint, s)) for s in shapes]} "
                                   f"cannot be broadcast together (dim {i})")
        out.append(chosen)
    return tuple(out)


def expand_to(t, shape):
    """broadcast_in_dim of t to `shape` (right-aligned, as PyTorch broadcasts)."""
    shape = tuple(shape)
    if len(t.shape) == len(shape) and all(same_size(a, b) for a, b in zip(t.shape, shape)):
        return t
    offset = len(shape) - len(t.shape)
    return bind(prims.broadcast_in_dim, t, shape, dims=tuple(range(offset, len(shape))))


def convert(t, dtype):
    if not isinstance(t, TensorProxy) or t.dtype == dtype:
        return t
    return bind(prims.convert_element_type, t, dtype=dtype)


def _numel(shape):
    n = 1
    for s in shape:
        n = n * s
    return n


def _dim(d, ndim):
    d = operator.index(d)
    if not -max(ndim, 1) <= d < max(ndim, 1):
        raise IndexError(f"dimension {d} out of range for a tensor of rank {ndim}")
    return d % max(ndim, 1)


# ---- Python numbers as eager uses them -------------------------------------------------------

_NARROW_FLOATS = (torch.float16, torch.bfloat16)


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, IntProxy)


def operand_scalar(value, dtype, *, rounded: bool, comparison: bool = False):
    """A Python number operand of an elementwise op computing in `dtype`, as eager sees it: an
    int wraps to an integer dtype's range (`uint8 + (-1)` adds 255, `int8 > 128` compares with
    -128). With `rounded` (a binary op or a comparison: eager's TensorIterator converts the
    number to the op's dtype first), an fp16/bf16 op uses the number rounded to that dtype
    (through fp32, as eager converts it: `bf16 + 1/3` adds 0.333984375); a clamp bound is used
    unrounded, in fp32, as eager's clamp does. A runtime float (symbolic mode) stays one where
    the kernel computes with it (it rounds one of an fp16/bf16 op itself), and is specialized
    for an fp16/bf16 comparison."""
    if isinstance(value, FloatProxy):   # a runtime float: kept where the kernel computes with it
        if dtype == torch.float32 or (dtype.is_floating_point and not comparison):
            return value
        value = specialize(value)       # eager rounds it to the dtype: a constant
    if not _is_number(value) or isinstance(value, bool) or dtype == torch.bool:
        return value
    if not dtype.is_floating_point and isinstance(value, int):
        return torch.tensor(value, dtype=torch.int64).to(dtype).item()
    if rounded and dtype in _NARROW_FLOATS:
        return torch.tensor(float(value), dtype=torch.float32).to(dtype).item()
    if isinstance(value, float) and dtype in (torch.float32, *_NARROW_FLOATS):
        return torch.tensor(value, dtype=torch.float32).item()  # eager computes with its fp32
    return value


def stored_scalar(value, dtype, check):
    """A Python number that eager stores into a tensor of `dtype` (a fill, pad or where value),
    converted as eager converts it (1.7 -> 1 for int32, rounded for bf16). `check(value)` runs
    the op eagerly on a one-element tensor first, so a value eager refuses (300 into int8) raises
    eager's error here. A runtime float is specialized: eager converts it, or refuses it (1e308
    into float32), by its value."""
    if isinstance(value, FloatProxy):
        value = specialize(value)
    if not _is_number(value):
        return value
    check(value)
    if dtype == torch.bool:
        return bool(value)
    source = torch.float32 if isinstance(value, float) else torch.int64
    return torch.tensor(value, dtype=source).to(dtype).item()


def _one(dtype):
    return torch.zeros(1, dtype=dtype)


# ---- elementwise ---------------------------------------------------------------------------

def rounds_number(prim_name, device) -> bool:
    """Whether eager converts a Python number operand of a binary op to the op's dtype first:
    TensorIterator converts it for every binary op and comparison, except that eager's CPU
    kernels of mul and div read the number as given (`original_scalar_value`: in fp32 for an
    fp16/bf16 op)."""
    return not (device.type == "cpu" and prim_name in ("mul", "div"))


def elementwise(prim_name, torch_fn, *args, compute_dtype=None, number_as_given=False):
    """Type-promotes, broadcasts and records one elementwise prim (`number_as_given`: a Python
    number operand is eager's fp32 value already, see `rounds_number`)."""
    out_dtype = meta_dtype(torch_fn, *args)
    if compute_dtype is None:
        compute_dtype = out_dtype
    tensors = [a for a in args if isinstance(a, TensorProxy)]
    shape = broadcast_shape(*[a.shape for a in tensors])
    rounded = not number_as_given and rounds_number(prim_name, tensors[0].device)
    args = [convert(expand_to(a, shape), compute_dtype) if isinstance(a, TensorProxy)
            else operand_scalar(a, compute_dtype, rounded=rounded,
                                comparison=prim_name in prims.COMPARE) for a in args]
    return bind(prims.PRIMS[prim_name], *args)


def _unary(name, fn):
    register(fn, getattr(torch.Tensor, name), methods=(name,))(
        lambda input: elementwise(name, fn, input))


for _name in prims.UNARY:
    _unary(_name, getattr(torch, _name))
register(torch.Tensor.__neg__, methods=("__neg__",))(lambda x: elementwise("neg", torch.neg, x))
register(torch.Tensor.__abs__, methods=("__abs__",))(lambda x: elementwise("abs", torch.abs, x))
HANDLERS[F.sigmoid] = HANDLERS[torch.sigmoid]


def _binary(name, fn, dunder=None, rdunder=None, swap_scalar=False):
    def forward(input, other):
        return elementwise(name, fn, input, other)

    def reverse(a, b):
        return elementwise(name, fn, b, a)
    if name == "div":
        forward, reverse = div, _reverse_div
    register(fn, getattr(torch.Tensor, name, fn), methods=(name,) + ((dunder,) if dunder else ()))(
        forward)
    if dunder:
        HANDLERS[getattr(torch.Tensor, dunder)] = forward
    if rdunder:
        register(getattr(torch.Tensor, rdunder), methods=(rdunder,))(reverse)


_binary("add", torch.add, "__add__", "__radd__")
_binary("sub", torch.sub, "__sub__", "__rsub__")
_binary("mul", torch.mul, "__mul__", "__rmul__")


@register(torch.pow, torch.Tensor.pow, torch.Tensor.__pow__, methods=("pow", "__pow__"))
def pow(input, exponent):
    if isinstance(input, TensorProxy) and not isinstance(exponent, TensorProxy):
        return _pow_number(input, exponent)
    return elementwise("pow", torch.pow, input, exponent)


def _pow_number(input, exponent):
    """x ** number as eager computes it. The number is a constant of the trace (a runtime one is
    specialized): eager's kernel depends on its value (x * x for 2, sqrt for 0.5, 1 for 0). An
    integer base to a negative integer power is refused with eager's error."""
    exponent = specialize(exponent)
    if (not input.dtype.is_floating_point and isinstance(exponent, int)
            and not isinstance(exponent, bool) and exponent < 0):
        raise RuntimeError("Integers to negative integer powers are not allowed.")
    dtype = meta_dtype(torch.pow, input, exponent)
    return bind(prims.PRIMS["pow"], convert(input, dtype), exponent)


register(torch.Tensor.__rpow__, methods=("__rpow__",))(
    lambda self, other: elementwise("pow", torch.pow, other, self))


def _compare(name, fn):
    def compare_op(input, other):
        return elementwise(name, fn, input, other,
                           compute_dtype=torch.result_type(_meta(input), _meta(other)))
    for key in (fn, getattr(torch.Tensor, name), getattr(torch.Tensor, f"__{name}__")):
        HANDLERS[key] = compare_op
    METHODS[name] = METHODS[f"__{name}__"] = compare_op


for _name in prims.COMPARE:
    _compare(_name, getattr(torch, _name))


@register(torch.add, torch.Tensor.add, methods=("add",))
def add(input, other, *, alpha=1):
    return elementwise("add", torch.add, input, _scaled(other, alpha))


@register(torch.sub, torch.Tensor.sub, methods=("sub",))
def sub(input, other, *, alpha=1):
    return elementwise("sub", torch.sub, input, _scaled(other, alpha))


def _scaled(other, alpha):
    """`alpha * other` of add and sub (a number times a number is the host's)."""
    if alpha == 1:
        return other
    return mul(other, alpha) if isinstance(other, TensorProxy) else other * alpha


def mul(input, other):
    return elementwise("mul", torch.mul, input, other)


@register(torch.div, torch.Tensor.div, methods=("div",))
def div(input, other, *, rounding_mode=None):
    if rounding_mode is not None:
        return opaque(torch.div, (input, other), {"rounding_mode": rounding_mode})
    if (isinstance(input, TensorProxy) and input.device.type == "cuda"
            and input.dtype.is_floating_point and isinstance(other, (int, float, FloatProxy))
            and not isinstance(other, (bool, IntProxy))):
        # eager's CUDA kernel divides by a number as a product with its reciprocal, in fp32
        number = torch.tensor(float(specialize(other) if isinstance(other, FloatProxy)
                                    else other), dtype=torch.float32).to(input.dtype)
        reciprocal = (1 / number.to(torch.float32)).item()
        return elementwise("mul", torch.div, input, reciprocal, number_as_given=True)
    return elementwise("div", torch.div, input, other)


def _reverse_div(input, other):
    """`number / x`, which eager computes as `x.reciprocal() * number`."""
    return mul(elementwise("div", torch.div, 1, input), other)


_binary("div", torch.div, "__truediv__", "__rtruediv__")


@register(torch.maximum, torch.Tensor.maximum, methods=("maximum",))
def maximum(input, other):
    return elementwise("maximum", torch.maximum, input, other)


@register(torch.minimum, torch.Tensor.minimum, methods=("minimum",))
def minimum(input, other):
    return elementwise("minimum", torch.minimum, input, other)


@register(torch.clamp, torch.Tensor.clamp, torch.clip, torch.Tensor.clip, methods=("clamp", "clip"))
def clamp(input, min=None, max=None):
    """One clamp prim, its bounds tensors (broadcast with the input, in the promoted dtype) or
    numbers (used unrounded, in fp32, as eager's clamp does) or None: the gradient is eager's
    clamp rule (`ir.grad_rules`), not the chain of maximum's and minimum's."""
    dtype = meta_dtype(torch.clamp, input, min, max)     # eager's refusals: no bound, mixed kinds
    if any(_is_number(b) for b in (min, max)):   # eager refuses bounds out of an int dtype's range
        torch.clamp(_one(input.dtype), *(b if _is_number(b) else None for b in (min, max)))
    shape = broadcast_shape(*[t.shape for t in (input, min, max) if isinstance(t, TensorProxy)])
    input, min, max = (convert(expand_to(b, shape), dtype) if isinstance(b, TensorProxy)
                       else operand_scalar(b, dtype, rounded=False) for b in (input, min, max))
    return bind(prims.clamp, input, min, max)


@register(torch.clamp_min, torch.Tensor.clamp_min, methods=("clamp_min",))
def clamp_min(input, min):
    return clamp(input, min=min)


@register(torch.clamp_max, torch.Tensor.clamp_max, methods=("clamp_max",))
def clamp_max(input, max):
    return clamp(input, max=max)


@register(torch.relu, F.relu, torch.Tensor.relu, methods=("relu",))
def relu(input, inplace=False):
    """A float relu is its prim (eager's values, -0.0 kept, and its gradient from the output);
    an integer one a select (no gradient)."""
    if input.dtype.is_floating_point:
        return bind(prims.relu, input)
    return where(METHODS["le"](input, 0), 0, input)


def _activation(prim, fn, input, **params):
    """A float activation prim; eager has no integer kernel (it raises when called)."""
    if not input.dtype.is_floating_point:
        return opaque(fn, (input,), params)
    return bind(prim, input, **params)


@register(F.silu)
def silu(input, inplace=False):
    return _activation(prims.silu, F.silu, input)


@register(F.gelu)
def gelu(input, approximate="none"):
    return _activation(prims.gelu, F.gelu, input, approximate=approximate)


@register(torch.where, torch.Tensor.where)
def where(condition, input, other):
    dtype = meta_dtype(torch.where, condition, input, other)
    shape = broadcast_shape(*[x.shape for x in (condition, input, other)
                              if isinstance(x, TensorProxy)])
    input, other = (convert(expand_to(x, shape), dtype) if isinstance(x, TensorProxy) else
                    stored_scalar(x, dtype,
                                  lambda v: torch.where(_one(torch.bool), _one(dtype), v))
                    for x in (input, other))
    if not any(isinstance(x, TensorProxy) for x in (input, other)):
        input = full(shape, input, dtype=dtype, device=condition.device)
    return bind(prims.where, expand_to(condition, shape), input, other)


@register(torch.masked_fill, torch.Tensor.masked_fill, methods=("masked_fill",))
def masked_fill(input, mask, value):
    """where(mask, value, input) in input's dtype: eager converts the value (a number, or a 0-d
    tensor) to it and never promotes; the result has the broadcast shape of input and mask.
    Eager's checks (a bool mask, a 0-d value) ran while tracing."""
    dtype = input.dtype
    shape = broadcast_shape(input.shape, mask.shape)
    if isinstance(value, TensorProxy):
        value = expand_to(convert(value, dtype), shape)
    else:
        value = stored_scalar(value, dtype, lambda v: torch.masked_fill(
            _one(dtype), torch.ones(1, dtype=torch.bool), v))
    return bind(prims.where, expand_to(mask, shape), value, expand_to(input, shape))


# ---- dtype and layout ----------------------------------------------------------------------

_DTYPE_METHODS = {"float": torch.float32, "half": torch.float16, "bfloat16": torch.bfloat16,
                  "double": torch.float64, "int": torch.int32, "long": torch.int64,
                  "bool": torch.bool}
for _m, _dt in _DTYPE_METHODS.items():
    METHODS[_m] = (lambda dt: lambda x, memory_format=None: convert(x, dt))(_dt)


_FORMATS = (None, torch.preserve_format, torch.contiguous_format)


def copy(x, memory_format=torch.preserve_format):
    """New memory holding x (eager's clone, cat of one tensor, zero pad, ...)."""
    fmt = "contiguous" if memory_format is torch.contiguous_format else "preserve"
    return bind(prims.copy, x, memory_format=fmt)


def contiguous_copy(x):
    """Eager's `.contiguous()`: x itself where its layout is contiguous already (an input's,
    guarded, or the one the views that made x give it: `layout_meta`; a computed value is
    contiguous), else a copy into new memory."""
    if layout_meta(x).is_contiguous():
        return x
    return copy(x, torch.contiguous_format)


@register(torch.Tensor.to, methods=("to",))
def to(x, *args, **kwargs):
    dtype, device = kwargs.get("dtype"), kwargs.get("device")
    flags = [a for a in args if isinstance(a, bool)]       # non_blocking, copy
    copy_ = kwargs.get("copy", flags[1] if len(flags) > 1 else False)
    memory_format = kwargs.get("memory_format")
    for a in args:
        if isinstance(a, torch.dtype):
            dtype = a
        elif isinstance(a, TensorProxy):
            dtype, device = a.dtype, a.device
        elif isinstance(a, (str, torch.device)):
            device = a
    if (device is not None and torch.device(device) != x.device) or memory_format not in _FORMATS:
        return opaque(torch.Tensor.to, (x, *args), kwargs)
    if dtype is not None and dtype != x.dtype:
        result = convert(x, dtype)
    elif copy_:
        return copy(x, memory_format or torch.preserve_format)
    else:
        result = x
    if memory_format is torch.contiguous_format:
        return contiguous_copy(result)
    return result


@register(torch.Tensor.type_as, methods=("type_as",))
def type_as(input, other):
    return convert(input, other.dtype)


@register(torch.Tensor.contiguous, methods=("contiguous",))
def contiguous(x, memory_format=torch.contiguous_format):
    if memory_format not in _FORMATS[1:]:
        return opaque(torch.Tensor.contiguous, (x,), {"memory_format": memory_format})
    return contiguous_copy(x)


@register(torch.clone, torch.Tensor.clone, methods=("clone",))
def clone(input, *, memory_format=torch.preserve_format):
    if memory_format not in _FORMATS:
        return opaque(torch.clone, (input,), {"memory_format": memory_format})
    return copy(input, memory_format or torch.preserve_format)


# ---- queries: answered from the proxy's metadata (guarded where the answer is a layout's) ------

METHODS["size"] = TensorProxy.size
HANDLERS[torch.numel] = HANDLERS[torch.Tensor.numel] = TensorProxy.numel
METHODS["numel"] = METHODS["nelement"] = TensorProxy.numel
METHODS["dim"] = METHODS["ndimension"] = TensorProxy.dim
METHODS["element_size"] = lambda input: input.dtype.itemsize
METHODS["get_device"] = lambda input: input.device.index if input.device.type != "cpu" else -1
METHODS["is_signed"] = lambda input: input.dtype.is_signed
HANDLERS[torch.Tensor.get_device] = METHODS["get_device"]
HANDLERS[torch.Tensor.is_signed] = METHODS["is_signed"]


@register(torch.is_floating_point, torch.Tensor.is_floating_point, methods=("is_floating_point",))
def is_floating_point(input):
    return input.dtype.is_floating_point


@register(torch.is_complex, torch.Tensor.is_complex, methods=("is_complex",))
def is_complex(input):
    return input.dtype.is_complex


@register(torch.Tensor.is_contiguous, methods=("is_contiguous",))
def is_contiguous(input, memory_format=torch.contiguous_format):
    return layout_meta(input).is_contiguous(memory_format=memory_format)


@register(torch.Tensor.stride, methods=("stride",))
def stride(input, dim=None):
    """Eager's strides of the traced tensor (`layout_meta`): of a contiguous one, products of its
    sizes (symbolic where they are); of another, its strides with its sizes specialized."""
    meta = layout_meta(input)
    if meta.is_contiguous():
        strides, step = [], 1
        for size in reversed(input.shape):
            strides.insert(0, step)
            step = step * size
    else:
        for size in input.shape:
            specialize(size)
        strides = list(meta.stride())
    return tuple(strides) if dim is None else strides[dim]


@register(torch.Tensor.cpu, methods=("cpu",))
def cpu(input, memory_format=torch.preserve_format):
    return to(input, "cpu", memory_format=memory_format)


def _matrix_transpose(input):
    if input.ndim < 2:
        raise RuntimeError(f"tensor.mT is only supported on matrices or batches of matrices. Got "
                           f"{input.ndim}-D tensor.")
    return transpose(input, -2, -1)


# Attributes that compute a tensor (`x.T`); real dtypes only, so H and mH are T and mT.
PROPERTIES = {"T": lambda input: permute(input, tuple(reversed(range(input.ndim)))),
              "mT": _matrix_transpose}
PROPERTIES["H"], PROPERTIES["mH"] = PROPERTIES["T"], PROPERTIES["mT"]
# Attributes that library code reads of a tensor, answered from the metadata (traced tensors are
# dense, strided and real: `ir.jit` refuses other arguments)
PROPERTIES.update({
    "layout": lambda input: torch.strided, "itemsize": lambda input: input.dtype.itemsize,
    "nbytes": lambda input: input.numel() * input.dtype.itemsize,
    "is_cpu": lambda input: input.device.type == "cpu",
    "is_meta": lambda input: input.device.type == "meta",
    **dict.fromkeys(("is_sparse", "is_quantized", "is_nested", "is_mkldnn", "is_sparse_csr"),
                    lambda input: False)})


# ---- views and resizes ---------------------------------------------------------------------

def _sizes(args):
    if len(args) == 1 and isinstance(args[0], (tuple, list, torch.Size)):
        return tuple(args[0])
    return tuple(args)


@register(torch.Tensor.view, methods=("view",))
def view(x, *shape, size=None):
    """reshape, where eager's view of x's layout exists: its error (a view across non-mergeable
    strides) otherwise, checked on a meta tensor laid out as x is (`layout_meta`)."""
    shape = _sizes(shape) if size is None else tuple(size)
    if len(shape) == 1 and isinstance(shape[0], torch.dtype):
        return opaque(torch.Tensor.view, (x, shape[0]), {})
    layout_meta(x).view([hint(s) for s in shape])
    return reshape(x, *shape)


def layout_meta(x, guard: bool = True) -> torch.Tensor:
    """A meta tensor with the strides eager gives x: an input's own (guarded unless not `guard`:
    contiguity, and the strides of a non-contiguous input), views of it derived through the view
    prims that made x, contiguous for anything computed."""
    ctx = current()
    sizes = [hint(s) for s in x.shape]
    if id(x) in ctx.input_layouts:
        strides, is_contiguous = ctx.input_layouts[id(x)]
        if not guard:
            return torch.empty_strided(sizes, strides, dtype=x.dtype, device="meta")
        ctx.add_guard(("contiguous", x, is_contiguous))
        if not is_contiguous:
            for d, stride in enumerate(strides):
                ctx.add_guard(("stride_eq", x, (d, stride)))
        return torch.empty_strided(sizes, strides, dtype=x.dtype, device="meta")
    eqn = next((e for e in reversed(ctx.eqns) if any(o is x for o in e.outs)), None)
    if eqn is None or eqn.prim.name not in ("slice", "reshape", "permute", "broadcast_in_dim"):
        return torch.empty(sizes, dtype=x.dtype, device="meta")
    base = layout_meta(eqn.args[0], guard)
    if eqn.prim is prims.slice_:
        _, starts, stops, steps = eqn.args
        return base[tuple(slice(hint(a), hint(b), c) for a, b, c in zip(starts, stops, steps))]
    if eqn.prim is prims.permute:
        return base.permute(eqn.params["perm"])
    if eqn.prim is prims.reshape:
        try:
            return base.view(sizes)
        except RuntimeError:        # eager's reshape copies: contiguous
            return torch.empty(sizes, dtype=x.dtype, device="meta")
    dims, strides = eqn.params["dims"], [0] * len(sizes)
    for j, d in enumerate(dims):
        if base.shape[j] == sizes[d]:
            strides[d] = base.stride(j)
    return base.as_strided(sizes, strides, base.storage_offset())


@register(torch.reshape, torch.Tensor.reshape, methods=("reshape",))
def reshape(input, *sizes, shape=None):
    shape = _sizes(sizes) if shape is None else tuple(shape)
    if len(shape) == 1 and isinstance(shape[0], torch.dtype):
        return opaque(torch.Tensor.view, (input, shape[0]), {})
    if len(shape) == input.ndim and all(same_size(a, b) for a, b in zip(shape, input.shape)):
        return input
    numel = _numel(input.shape)
    if sum(1 for s in shape if not isinstance(s, IntProxy) and s == -1) > 1:
        raise RuntimeError("only one dimension can be inferred")
    if any(not isinstance(s, IntProxy) and s == -1 for s in shape):
        known = _numel([s for s in shape if isinstance(s, IntProxy) or s != -1])
        if known == 0:
            raise RuntimeError(f"cannot reshape tensor of {hint(numel)} elements into {shape}")
        shape = tuple(numel // known if not isinstance(s, IntProxy) and s == -1 else s
                      for s in shape)
    if _numel(shape) != numel:
        raise RuntimeError(f"shape {tuple(map(hint, shape))} is invalid for input of size "
                           f"{hint(numel)}")
    if _reshape_copies(input, shape):     # eager's reshape: a contiguous copy, viewed
        input = copy(input, torch.contiguous_format)
    return bind(prims.reshape, input, shape)


def _reshape_copies(x, shape) -> bool:
    """Whether eager's reshape of x to `shape` copies: x's layout (an input's, or a view's of
    it: `layout_meta`) cannot view as `shape`; the layout is then guarded. Where it can, the
    reshape prim serves every layout unguarded (torch's reshape where it runs alone, index
    math in a kernel)."""
    sizes = [hint(s) for s in shape]
    try:
        layout_meta(x, guard=False).view(sizes)
    except RuntimeError:
        layout_meta(x)
        return True
    return False


@register(torch.Tensor.reshape_as, methods=("reshape_as",))
def reshape_as(x, other):
    return reshape(x, other.shape)


@register(torch.Tensor.view_as, methods=("view_as",))
def view_as(x, other):
    return view(x, other.shape)


@register(torch.flatten, torch.Tensor.flatten, methods=("flatten",))
def flatten(input, start_dim=0, end_dim=-1):
    if input.ndim == 0:
        return reshape(input, (1,))
    start, end = _dim(start_dim, input.ndim), _dim(end_dim, input.ndim)
    merged = _numel(input.shape[start:end + 1])
    return reshape(input, input.shape[:start] + (merged,) + input.shape[end + 1:])


@register(torch.unflatten, torch.Tensor.unflatten, methods=("unflatten",))
def unflatten(input, dim, sizes):
    """reshape splitting dim `dim` into `sizes` (one of them may be -1), checked as eager does."""
    d = _dim(dim, input.ndim)
    sizes = tuple(sizes)
    inferred = [k for k, s in enumerate(sizes) if not isinstance(s, IntProxy) and s == -1]
    if not sizes or len(inferred) > 1:
        raise RuntimeError("unflatten: provide non-empty sizes with at most one -1")
    size = input.shape[d]
    if inferred:
        known = _numel([s for k, s in enumerate(sizes) if k != inferred[0]])
        if known == 0 or size % known != 0:
            raise RuntimeError(f"unflatten: Provided sizes {list(map(hint, sizes))} don't "
                               f"multiply up to the size of dim {d} ({hint(size)}) in the input "
                               f"tensor")
        sizes = tuple(size // known if k == inferred[0] else s for k, s in enumerate(sizes))
    elif _numel(sizes) != size:
        raise RuntimeError(f"unflatten: Provided sizes {list(map(hint, sizes))} don't multiply "
                           f"up to the size of dim {d} ({hint(size)}) in the input tensor")
    return reshape(input, tuple(input.shape[:d]) + sizes + tuple(input.shape[d + 1:]))


@register(torch.unsqueeze, torch.Tensor.unsqueeze, methods=("unsqueeze",))
def unsqueeze(input, dim):
    d = _dim(dim, input.ndim + 1)
    return reshape(input, input.shape[:d] + (1,) + input.shape[d:])


@register(torch.squeeze, torch.Tensor.squeeze, methods=("squeeze",))
def squeeze(input, dim=None):
    if dim is None:
        dims = range(input.ndim)
    else:
        dims = [_dim(d, input.ndim) for d in (dim if isinstance(dim, (tuple, list)) else (dim,))]
    drop = {d for d in dims if input.shape[d] == 1}
    return reshape(input, tuple(s for d, s in enumerate(input.shape) if d not in drop))


@register(torch.permute, torch.Tensor.permute, methods=("permute",))
def permute(input, *perm, dims=None):
    perm = tuple(_dim(d, input.ndim) for d in (_sizes(perm) if dims is None else dims))
    if sorted(perm) != list(range(input.ndim)):
        raise RuntimeError(f"permute: {perm} is not a permutation of the dims of a rank-{input.ndim} "
                           "tensor")
    if perm == tuple(range(input.ndim)):
        return input
    return bind(prims.permute, input, perm=perm)


@register(torch.transpose, torch.Tensor.transpose, torch.swapaxes, torch.Tensor.swapaxes,
          methods=("transpose", "swapaxes"))
def transpose(input, dim0, dim1):
    perm = list(range(input.ndim))
    a, b = _dim(dim0, input.ndim), _dim(dim1, input.ndim)
    perm[a], perm[b] = perm[b], perm[a]
    return permute(input, perm)


@register(torch.Tensor.t, torch.t, methods=("t",))
def t(x):      # x.ndim <= 2: eager's check ran first (`tracing.eager_checks`)
    return transpose(x, 0, 1) if x.ndim == 2 else x


@register(torch.Tensor.expand, methods=("expand",))
def expand(input, *sizes, size=None):
    sizes = _sizes(sizes) if size is None else tuple(size)
    if len(sizes) < input.ndim:
        raise RuntimeError(f"expand: {len(sizes)} sizes given for a rank-{input.ndim} tensor")
    offset = len(sizes) - input.ndim
    shape = []
    for i, s in enumerate(sizes):
        own = input.shape[i - offset] if i >= offset else 1
        if not isinstance(s, IntProxy) and s == -1:
            shape.append(own)
        elif _is_one(own) or own is s or own == s:
            shape.append(s)
        else:
            raise RuntimeError(f"expand: size {hint(own)} of dim {i - offset} cannot become "
                               f"{hint(s)}")
    return expand_to(input, shape)


@register(torch.Tensor.expand_as, methods=("expand_as",))
def expand_as(x, other):
    return expand(x, other.shape)


@register(torch.broadcast_to)
def broadcast_to(input, size):
    return expand(input, size)


def _clamp_index(i, size):
    if i < 0:
        i = i + size
        if i < 0:
            i = 0
    elif i > size:
        i = size
    return i


def _slice_bounds(s: slice, size):
    step = 1 if s.step is None else specialize(s.step)
    if step <= 0:
        raise ValueError("slice step must be positive")
    start = 0 if s.start is None else _clamp_index(s.start, size)
    stop = size if s.stop is None else _clamp_index(s.stop, size)
    if stop < start:
        stop = start
    return start, stop, step


def slice_dims(x, bounds):
    """One slice prim over all dims; bounds is a list of (start, stop, step); skips identities."""
    if all(same_size(start, 0) and same_size(stop, size) and step == 1
           for (start, stop, step), size in zip(bounds, x.shape)):
        return x
    starts, stops, steps = zip(*bounds) if bounds else ((), (), ())
    return bind(prims.slice_, x, tuple(starts), tuple(stops), tuple(steps))


@register(torch.Tensor.__getitem__, methods=("__getitem__",))
def getitem(x, index):
    index = index if isinstance(index, tuple) else (index,)
    if any(isinstance(i, (TensorProxy, torch.Tensor, list)) for i in index):
        return opaque(torch.Tensor.__getitem__, (x, index), {})
    consumed = sum(1 for i in index if i is not None and i is not Ellipsis)
    if consumed > x.ndim:
        raise IndexError(f"too many indices for a tensor of rank {x.ndim}")
    if Ellipsis in index:
        at = index.index(Ellipsis)
        index = index[:at] + (slice(None),) * (x.ndim - consumed) + index[at + 1:]
    else:
        index = index + (slice(None),) * (x.ndim - consumed)
    bounds, dim = [], 0
    for i in index:
        if i is None:
            continue
        size = x.shape[dim]
        if isinstance(i, slice):
            start, stop, step = _slice_bounds(i, size)
            bounds.append((start, stop, step))
        else:
            if not -size <= i < size:
                raise IndexError(f"index {hint(i)} is out of bounds for dim {dim} of size "
                                 f"{hint(size)}")
            start = i + size if i < 0 else i
            bounds.append((start, start + 1, 1))
        dim += 1
    sliced = slice_dims(x, bounds)
    shape = []
    for i, size in zip((i for i in index if i is not None), sliced.shape):
        if isinstance(i, slice):
            shape.append(size)
    shape = iter(shape)
    return reshape(sliced, tuple(1 if i is None else next(shape)
                                 for i in index if i is None or isinstance(i, slice)))


@register(torch.narrow, torch.Tensor.narrow, methods=("narrow",))
def narrow(input, dim, start, length):
    d = _dim(dim, input.ndim)
    if start < 0:       # eager wraps a negative start once (its range was checked)
        start = start + input.shape[d]
    return getitem(input, (slice(None),) * d + (slice(start, start + length),))


def _pieces(input, d, lengths):
    """Slices of input along dim d of these lengths, in order (eager's split views); the last
    ends at the dim's size."""
    bounds = [(0, s, 1) for s in input.shape]
    pieces, start = [], 0
    for k, length in enumerate(lengths):
        stop = input.shape[d] if k == len(lengths) - 1 else start + length
        pieces.append(slice_dims(input, bounds[:d] + [(start, stop, 1)] + bounds[d + 1:]))
        start = stop
    return tuple(pieces)


def _split(input, split_size, dim):
    """Eager's split: pieces of split_size, the last one shorter, at least one piece. With
    runtime sizes each comparison is a guard of the entry, so one entry serves every size that
    gives the same number of pieces."""
    d = _dim(dim, input.ndim)
    size, lengths, start = input.shape[d], [], 0
    while start + split_size < size:
        lengths.append(split_size)
        start = start + split_size
    return _pieces(input, d, lengths + [size - start])


@register(torch.split)
def split(tensor, split_size_or_sections, dim=0):
    if isinstance(split_size_or_sections, (tuple, list)):
        return split_with_sizes(tensor, split_size_or_sections, dim)
    return _split(tensor, split_size_or_sections, dim)


@register(torch.Tensor.split, methods=("split",))
def split_method(self, split_size, dim=0):
    return split(self, split_size, dim)


@register(torch.split_with_sizes, torch.Tensor.split_with_sizes, methods=("split_with_sizes",))
def split_with_sizes(input, split_sizes, dim=0):
    d = _dim(dim, input.ndim)
    total = 0
    for s in split_sizes:
        total = total + s
    if total != input.shape[d]:     # a guard where the dim's size is a runtime one
        raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to "
                           f"{hint(input.shape[d])}, but got split_sizes={list(split_sizes)}")
    return _pieces(input, d, list(split_sizes))


@register(torch.chunk, torch.Tensor.chunk, methods=("chunk",))
def chunk(input, chunks, dim=0):
    """Eager's chunk: split by ceil(size / chunks), so fewer than `chunks` pieces may come
    back; a dim of size 0 gives `chunks` empty pieces."""
    d = _dim(dim, input.ndim)
    size = input.shape[d]
    if size == 0:
        return _pieces(input, d, [0] * chunks)
    return _split(input, (size + chunks - 1) // chunks, d)


@register(torch.unbind, torch.Tensor.unbind, methods=("unbind",))
def unbind(input, dim=0):
    """One slice per index of the dim, each without the dim (its count is a constant: the
    dim's size is specialized)."""
    d = _dim(dim, input.ndim)
    return tuple(getitem(input, (slice(None),) * d + (i,))
                 for i in range(specialize(input.shape[d])))


def _legacy_empty(t) -> bool:
    """A 1-d tensor of size 0 (`torch.tensor([])`), which eager's cat skips (a KV cache starts as
    one) but for the dtype of the result."""
    return t.ndim == 1 and type(t.shape[0]) is int and t.shape[0] == 0


@register(torch.cat, torch.concat, torch.concatenate)
def cat(tensors, dim=0):
    tensors = list(tensors)
    if not tensors:
        raise RuntimeError("torch.cat(): expected a non-empty list of tensors")
    kept = [t for t in tensors if not _legacy_empty(t)] or tensors
    ndim = kept[0].ndim
    d = _dim(dim, ndim)
    dtype = meta_dtype(lambda *ts: torch.cat(ts, d), *tensors)
    tensors = kept
    for t in tensors[1:]:
        if t.ndim != ndim:
            raise RuntimeError(f"torch.cat(): tensors must have the same rank, got {ndim} and "
                               f"{t.ndim}")
        for i in range(ndim):
            if i != d and t.shape[i] is not tensors[0].shape[i] and t.shape[i] != tensors[0].shape[i]:
                raise RuntimeError(f"torch.cat(): sizes of dim {i} differ")
    pieces = [convert(t, dtype) for t in tensors]
    if len(pieces) == 1:        # new memory, as eager's cat returns, even of one tensor
        return pieces[0] if pieces[0] is not tensors[0] else copy(pieces[0], torch.contiguous_format)
    return bind(prims.cat, tuple(pieces), dim=d)


@register(torch.stack)
def stack(tensors, dim=0):
    tensors = list(tensors)
    d = _dim(dim, tensors[0].ndim + 1)
    return cat([unsqueeze(t, d) for t in tensors], d)


@register(F.pad)
def pad(input, pad, mode="constant", value=None):
    if mode != "constant":
        return opaque(F.pad, (input, pad), {"mode": mode, "value": value})
    return constant_pad(input, pad, value, F.pad)


@register(torch.constant_pad_nd)
def constant_pad_nd(input, pad, value=0):
    return constant_pad(input, pad, value, torch.constant_pad_nd)


def constant_pad(input, pad, value, eager):
    """A constant pad; `eager` (F.pad or torch.constant_pad_nd, which check the value
    differently) checks the value on a small tensor of the same rank and widths."""
    if len(pad) % 2 or len(pad) // 2 > input.ndim:
        raise ValueError(f"pad: {len(pad)} widths given for a rank-{input.ndim} tensor")
    config = [(0, 0)] * input.ndim
    for i in range(len(pad) // 2):
        config[input.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    for (lo, hi), s in zip(config, input.shape):
        if lo + s + hi < 0:
            raise RuntimeError(f"pad: resulting size {hint(lo + s + hi)} is negative")
    # eager's check of the value depends on the pad's rank and widths: run it on a small tensor
    small = [1 + max(0, -hint(lo)) + max(0, -hint(hi)) for lo, hi in config]
    value = stored_scalar(0 if value is None else value, input.dtype, lambda v: eager(
        torch.zeros(small, dtype=input.dtype), [hint(w) for w in pad], value=v))
    if all(not isinstance(v, IntProxy) and v == 0 for lh in config for v in lh):
        return copy(input)      # eager's zero pad is a clone
    return bind(prims.pad, input, tuple(config), value=value)


# ---- factories -----------------------------------------------------------------------------

@register(torch.full)
def full(size, fill_value, *, dtype=None, device=None, layout=None, pin_memory=False,
         requires_grad=False):
    dtype = dtype or torch.full((), hint(fill_value)).dtype
    fill_value = stored_scalar(fill_value, dtype, lambda v: torch.full((1,), v, dtype=dtype))
    return bind(prims.full, tuple(_sizes((size,))), value=fill_value, dtype=dtype,
                device=torch.device(device or "cpu"))


def _constant_factory(value):
    def factory(*size, dtype=None, device=None, layout=None, pin_memory=False,
                requires_grad=False):
        return full(_sizes(size), value, dtype=dtype or torch.get_default_dtype(), device=device)
    return factory


HANDLERS[torch.zeros] = _constant_factory(0)
HANDLERS[torch.ones] = _constant_factory(1)


def _like_factory(value):
    def factory(input, fill_value=None, *, dtype=None, device=None, layout=None,
                pin_memory=False, requires_grad=False, memory_format=None):
        fill = value if value is not None else fill_value
        return full(input.shape, fill, dtype=dtype or input.dtype, device=device or input.device)
    return factory


@register(torch.arange)
def arange(start, end=None, step=1, *, dtype=None, device=None, layout=None, pin_memory=False,
           requires_grad=False, out=None):
    if end is None:
        start, end = 0, start
    if hint(step) == 0:
        raise RuntimeError("step must be nonzero")
    integral = all(isinstance(hint(v), int) for v in (start, end, step))
    dtype = dtype or (torch.int64 if integral else torch.get_default_dtype())
    step = specialize(step)     # its sign decides the length: one entry per step
    if not integral:            # a float range's length has no size proxy: its bounds are pinned
        start, end = specialize(start), specialize(end)
    if (hint(end) - hint(start)) * step < 0:
        raise RuntimeError("upper bound and larger bound inconsistent with step sign")
    return bind(prims.arange, start, end, step, dtype=dtype, device=torch.device(device or "cpu"))


@register(torch.tensor, torch.as_tensor, torch.scalar_tensor)
def tensor(data, *, dtype=None, device=None, requires_grad=False, pin_memory=False):
    """A Python number becomes a 0-d `full`; other data (lists) is a constant torch makes at
    each call."""
    if not isinstance(data, (int, float, bool, IntProxy)):
        return opaque(torch.tensor, (data,), {"dtype": dtype, "device": device})
    dtype = dtype or torch.tensor(hint(data)).dtype
    return full((), data, dtype=dtype, device=device)


HANDLERS[torch.empty] = _constant_factory(0)     # any value is eager's: zeros are one
# Torch functions with no tensor argument that traced code may call: the jit's torch function
# mode routes them here (handlers above, or opaque calls torch runs at each call).
FACTORIES = frozenset({torch.full, torch.zeros, torch.ones, torch.empty, torch.arange,
                       torch.tensor, torch.as_tensor, torch.scalar_tensor, torch.rand,
                       torch.randn, torch.randint, torch.linspace, torch.eye})

HANDLERS[torch.zeros_like] = _like_factory(0)
HANDLERS[torch.ones_like] = _like_factory(1)
HANDLERS[torch.full_like] = _like_factory(None)

from ir import reductions  # noqa: E402,F401  (registers the reductions' decompositions)
from ir import cross_entropy  # noqa: E402,F401  (registers F.cross_entropy's decomposition)
