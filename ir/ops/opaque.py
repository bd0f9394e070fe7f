"""Symbolic output shapes of the torch ops the tracer leaves to torch (opaque calls).

In "symbolic values" mode an opaque call's outputs get the shapes its rule computes from the
arguments' symbolic sizes, so one cache entry serves every size (`F.linear(x, w)` is
`x.shape[:-1] + (w.shape[0],)` for every batch and sequence length). `SHAPE_RULES` maps each torch
callable (function, method, `Tensor.__matmul__`) to a rule taking the call's own arguments and
returning the list of its outputs' shapes, or None where it does not apply (an unusual signature:
the call then specializes its sizes, as an op without a rule does). A rule guards the relations
the op needs (`x.shape[-1] == w.shape[1]`) as equalities between sizes, never by pinning them.

The call still runs on meta tensors first, at the sizes' values in the traced call: that raises
eager's errors and gives the output dtypes, and a rule's shapes are checked against it. The
rules of ops a family models otherwise (reductions, norms, `F.pad`) are in that family's module.

The `opaque` prim is the equation such a call records (`ir.recording.opaque`): torch runs it.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ir.ops.registry import SHAPE_RULES, TORCH_SOURCE, define, shape_rule as rule
from ir.ops.shapes import _dim, _numel, broadcast_shape
from ir.proxies import IntProxy, TensorProxy, hint, same_size
from ir.trace import render

# A torch call the tracer does not model; one returning a sequence of one tensor (`x.split`)
# is indexed, so its single output names the tensor, not the sequence.
opaque_p = define("opaque", "opaque", None,
                  lambda eqn: f"{eqn.params['fn_name']}({', '.join(render(a) for a in eqn.args)}"
                  + "".join(f", {k}={render(v)}" for k, v in eqn.params['kwargs'].items())
                  + ")" + ("[0]" if eqn.params.get("sequence") and len(eqn.outs) == 1 else ""))
TORCH_SOURCE[opaque_p] = opaque_p.render_rhs


def equal(a, b) -> None:
    """Guards two sizes equal (the op requires it, and eager's check on meta tensors passed)."""
    if not same_size(a, b) and a != b:
        raise RuntimeError(f"ir.jit: a shape rule found sizes {hint(a)} and {hint(b)} unequal "
                           "where eager's check passed")


def _tensors(*xs):
    return [x for x in xs if isinstance(x, TensorProxy)]


# ---- same shape as the input ----------------------------------------------------------------

@rule("softmax", "log_softmax", "softmin", "dropout", "dropout1d", "dropout2d", "dropout3d",
      "alpha_dropout", "feature_alpha_dropout", "gelu", "silu", "mish", "softplus", "elu", "selu",
      "celu", "leaky_relu", "hardtanh", "relu6", "hardswish", "hardsigmoid", "logsigmoid",
      "softsign", "tanhshrink", "hardshrink", "softshrink", "threshold", "erf", "erfc",
      "erfinv", "log1p", "expm1", "log2", "log10", "sign", "sgn", "floor", "ceil", "trunc",
      "round", "frac", "reciprocal", "square", "tan", "asin", "acos", "atan", "sinh", "cosh",
      "asinh", "acosh", "atanh", "isnan", "isinf", "isfinite", "logical_not", "bitwise_not",
      "nan_to_num", "cumsum", "cumprod", "logcumsumexp", "flip", "roll", "tril", "triu",
      "resolve_neg", "resolve_conj", "detach", "normalize", "scatter", "scatter_add",
      "scatter_reduce", "index_add", "index_copy", "index_fill", "masked_scatter", "argsort",
      "group_norm", "batch_norm", "instance_norm", "local_response_norm", "bernoulli", torch.Tensor.to, torch.Tensor.contiguous, torch.clone, torch.Tensor.clone,
      torch.Tensor.__invert__)
def same_as_input(input, *args, **kwargs):
    return [input.shape]


@rule(torch.Tensor.view)
def view_as_dtype(input, dtype):
    """`x.view(dtype)` (a view with sizes is a reshape the tracer models): the last dim scales
    by the ratio of the item sizes."""
    if not isinstance(dtype, torch.dtype):
        return None
    old, new = input.dtype.itemsize, dtype.itemsize
    if old == new or input.ndim == 0:
        return [input.shape]
    return [input.shape[:-1] + (input.shape[-1] * old // new,)]


@rule("sort", "cummax", "cummin")
def values_and_indices(input, *args, **kwargs):
    return [input.shape, input.shape]


# ---- elementwise ops that broadcast their tensor arguments -----------------------------------

@rule("remainder", "fmod", "atan2", "floor_divide", "bitwise_and", "bitwise_or", "bitwise_xor",
      "logical_and", "logical_or", "logical_xor", "hypot", "copysign", "lerp", "addcmul",
      "addcdiv", "xlogy", "div", torch.Tensor.__and__, torch.Tensor.__or__, torch.Tensor.__xor__,
      torch.Tensor.__floordiv__, torch.Tensor.__mod__, torch.Tensor.__rfloordiv__,
      torch.Tensor.__rmod__)
def broadcast(*args, **kwargs):
    return [broadcast_shape(*[t.shape for t in _tensors(*args, *kwargs.values())])]


@rule("masked_fill")
def masked_fill(input, mask, value):
    equal_broadcast(input.shape, mask.shape)
    return [input.shape]


def equal_broadcast(shape, other) -> None:
    """Guards that `other` broadcasts to `shape` (eager requires it of a mask, a bias, ...)."""
    broadcast_shape(shape, other)


# ---- other ops over dims --------------------------------------------------------------------

@rule("cosine_similarity")
def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    shape = broadcast_shape(x1.shape, x2.shape)
    d = _dim(dim, len(shape))
    return [shape[:d] + shape[d + 1:]]


@rule(F.glu)
def glu(input, dim=-1):
    d = _dim(dim, input.ndim)
    equal(input.shape[d] % 2, 0)
    return [input.shape[:d] + (input.shape[d] // 2,) + input.shape[d + 1:]]


@rule("topk")
def topk(input, k, dim=-1, largest=True, sorted=True):
    d = _dim(dim, input.ndim)
    shape = input.shape[:d] + (k,) + input.shape[d + 1:]
    return [shape, shape]


# ---- matrix products ---------------------------------------------------------------------

@rule("matmul", torch.Tensor.__matmul__)
def matmul(input, other):
    a, b = input.shape, other.shape
    equal(a[-1], b[-2] if len(b) >= 2 else b[0])
    if len(a) == 1 and len(b) == 1:
        return [()]
    if len(b) == 1:
        return [a[:-1]]
    if len(a) == 1:
        return [b[:-2] + b[-1:]]
    return [broadcast_shape(a[:-2], b[:-2]) + (a[-2], b[-1])]


SHAPE_RULES[torch.Tensor.__rmatmul__] = lambda input, other: matmul(other, input)


@rule("mm")
def mm(input, mat2):
    equal(input.shape[1], mat2.shape[0])
    return [(input.shape[0], mat2.shape[1])]


@rule("bmm")
def bmm(input, mat2):
    equal(input.shape[0], mat2.shape[0])
    equal(input.shape[2], mat2.shape[1])
    return [(input.shape[0], input.shape[1], mat2.shape[2])]


@rule("addmm", "baddbmm")
def addmm(input, mat1, mat2, *, beta=1, alpha=1):
    (shape,) = (bmm if mat1.ndim == 3 else mm)(mat1, mat2)
    equal_broadcast(shape, input.shape)
    return [shape]


@rule(F.linear)
def linear(input, weight, bias=None):
    equal(input.shape[-1], weight.shape[-1])
    shape = input.shape[:-1] + weight.shape[:-1]
    if isinstance(bias, TensorProxy):
        equal_broadcast(shape, bias.shape)
    return [shape]


def _is_literal_one(size) -> bool:
    return not isinstance(size, IntProxy) and size == 1


@rule("einsum")
def einsum(equation, *operands):
    """Each letter's size from the operands that have it (equal, or a literal 1 broadcast);
    ellipses are left to the meta run."""
    if len(operands) == 1 and isinstance(operands[0], (tuple, list)):
        operands = operands[0]
    if not isinstance(equation, str) or "..." in equation:
        return None
    equation = equation.replace(" ", "")
    inputs, _, output = equation.partition("->")
    if "->" not in equation:        # implicit output: the letters seen once, sorted
        output = "".join(sorted(c for c in set(inputs) - {","} if inputs.count(c) == 1))
    terms = inputs.split(",")
    if len(terms) != len(operands) or any(len(t) != x.ndim for t, x in zip(terms, operands)):
        return None
    sizes = {}
    for term, operand in zip(terms, operands):
        for letter, size in zip(term, operand.shape):
            if letter not in sizes or _is_literal_one(sizes[letter]):
                sizes[letter] = size
            elif not _is_literal_one(size):
                equal(sizes[letter], size)
    return [tuple(sizes[letter] for letter in output)]


def _whole(index) -> bool:
    return isinstance(index, slice) and index.start is None and index.stop is None \
        and index.step is None


@rule(torch.Tensor.__getitem__)
def advanced_index(input, index):
    """Indexing with integer tensors (`cos[positions]`, `x[:, idx]`), the other entries whole
    slices: the indices' broadcast shape replaces the dims they index, in place where they are
    adjacent, else in front. Masks (data-dependent sizes) and other mixes have no rule."""
    index = index if isinstance(index, tuple) else (index,)
    at = next((k for k, i in enumerate(index) if i is Ellipsis), None)    # never `==` a tensor
    if at is not None:
        index = index[:at] + (slice(None),) * (input.ndim - len(index) + 1) + index[at + 1:]
    index = index + (slice(None),) * (input.ndim - len(index))
    tensors = [d for d, i in enumerate(index) if isinstance(i, TensorProxy)]
    if (len(index) != input.ndim or not tensors
            or any(not isinstance(i, TensorProxy) and not _whole(i) for i in index)
            or any(index[d].dtype in (torch.bool, torch.uint8) for d in tensors)):
        return None
    indexed = broadcast_shape(*[index[d].shape for d in tensors])
    rest = [s for d, s in enumerate(input.shape) if d not in tensors]
    if tensors[-1] - tensors[0] == len(tensors) - 1:        # adjacent: in place
        first = tensors[0]
        return [tuple(rest[:first]) + indexed + tuple(rest[first:])]
    return [indexed + tuple(rest)]


@rule("gather", "take_along_dim")
def gather(input, dim_or_indices, index=None, **kwargs):
    """gather(input, dim, index) is index's shape; take_along_dim(input, indices, dim) too,
    where the two broadcast but in dim."""
    if isinstance(dim_or_indices, TensorProxy):
        dim = index if index is not None else kwargs.get("dim")
        if dim is None or dim_or_indices.ndim != input.ndim:
            return None
        d = _dim(dim, input.ndim)
        shape = list(broadcast_shape(*[t.shape[:d] + (1,) + t.shape[d + 1:]
                                       for t in (input, dim_or_indices)]))
        shape[d] = dim_or_indices.shape[d]
        return [tuple(shape)]
    return [index.shape]


@rule("index_select")
def index_select(input, dim, index):
    d = _dim(dim, input.ndim)
    return [input.shape[:d] + tuple(index.shape[:1]) + input.shape[d + 1:]]


@rule("repeat")
def repeat(input, *repeats):
    repeats = tuple(repeats[0]) if len(repeats) == 1 and isinstance(
        repeats[0], (tuple, list, torch.Size)) else repeats
    shape = (1,) * (len(repeats) - input.ndim) + input.shape
    return [tuple(s * r for s, r in zip(shape, repeats))]


@rule("repeat_interleave")
def repeat_interleave(input, repeats=None, dim=None, *, output_size=None):
    if isinstance(repeats, TensorProxy) or repeats is None:
        return None         # the sizes come from the data
    if dim is None:
        return [(_numel(input.shape) * repeats,)]
    d = _dim(dim, input.ndim)
    return [input.shape[:d] + (input.shape[d] * repeats,) + input.shape[d + 1:]]


@rule("outer", "ger")
def outer(input, vec2):
    return [(input.shape[0], vec2.shape[0])]


@rule("new_zeros", "new_ones", "new_empty")
def new_tensor(input, *size, **kwargs):
    return [tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size))
            else size]


@rule("new_full")
def new_full(input, size, fill_value, **kwargs):
    return [tuple(size)]


@rule(F.one_hot)
def one_hot(input, num_classes=-1):
    if not isinstance(num_classes, IntProxy) and num_classes < 0:
        return None         # the number of classes comes from the data
    return [input.shape + (num_classes,)]


@rule(F.interpolate)
def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    """A given size, or an integer scale factor (a float one rounds by value: no rule)."""
    n = input.ndim - 2
    if size is not None:
        return [input.shape[:2] + _per_dim(size, n)]
    scales = _per_dim(scale_factor, n)
    if not all(type(s) is int or (type(s) is float and s.is_integer()) for s in scales):
        return None
    return [input.shape[:2] + tuple(own * int(s) for own, s in zip(input.shape[2:], scales))]


# ---- convolution and pooling --------------------------------------------------------------

def _per_dim(value, n):
    return tuple(value) * (n // len(value)) if isinstance(value, (tuple, list)) else (value,) * n


def _windows(sizes, kernel, stride, padding, dilation):
    """The output sizes of a sliding window (floor mode) over `sizes`."""
    n = len(sizes)
    kernel, padding, dilation = (_per_dim(v, n) for v in (kernel, padding, dilation))
    stride = kernel if stride is None or (isinstance(stride, (tuple, list)) and not stride) \
        else _per_dim(stride, n)
    return tuple((size + 2 * p - d * (k - 1) - 1) // s + 1
                 for size, k, s, p, d in zip(sizes, kernel, stride, padding, dilation))


def _conv(n):
    def conv(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
        batch = input.shape[:input.ndim - n - 1]
        equal(input.shape[-n - 1], weight.shape[1] * groups)
        spatial = input.shape[input.ndim - n:]
        if isinstance(padding, str) and padding == "same":
            out = spatial
        else:
            out = _windows(spatial, weight.shape[2:], stride, 0 if isinstance(padding, str) else
                           padding, dilation)
        return [batch + (weight.shape[0],) + out]
    return conv


def _pool(n, indices=False):
    def pool(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
             return_indices=False):
        if ceil_mode:
            return None     # the last window's rule: left to the meta run
        shape = input.shape[:input.ndim - n] + _windows(input.shape[input.ndim - n:],
                                                       kernel_size, stride, padding, dilation)
        return [shape, shape] if indices or return_indices else [shape]
    return pool


def _avg_pool(n):
    def avg_pool(input, kernel_size, stride=None, padding=0, ceil_mode=False,
                 count_include_pad=True, divisor_override=None):
        return _pool(n)(input, kernel_size, stride, padding, 1, ceil_mode)
    return avg_pool


def _adaptive_pool(n, indices=False):
    def adaptive(input, output_size, return_indices=False):
        sizes = _per_dim(output_size, n)
        shape = input.shape[:input.ndim - n] + tuple(
            own if size is None else size for own, size in zip(input.shape[input.ndim - n:], sizes))
        return [shape, shape] if indices or return_indices else [shape]
    return adaptive


for _n in (1, 2, 3):        # F.max_pool2d and its kin reach the tracer under their public names
    rule(f"conv{_n}d")(_conv(_n))
    rule(f"avg_pool{_n}d")(_avg_pool(_n))
    rule(f"max_pool{_n}d")(_pool(_n))
    rule(f"max_pool{_n}d_with_indices")(_pool(_n, indices=True))
    rule(f"adaptive_avg_pool{_n}d")(_adaptive_pool(_n))
    rule(f"adaptive_max_pool{_n}d")(_adaptive_pool(_n))
    rule(f"adaptive_max_pool{_n}d_with_indices")(_adaptive_pool(_n, indices=True))


# ---- embedding, attention -------------------------------------------------------------------

@rule(F.embedding)
def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0,
              scale_grad_by_freq=False, sparse=False):
    return [input.shape + weight.shape[1:]]


SHAPE_RULES[torch.embedding] = lambda weight, indices, *args: embedding(indices, weight)


@rule(F.scaled_dot_product_attention)
def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False):
    equal(query.shape[-1], key.shape[-1])
    equal(key.shape[-2], value.shape[-2])
    if enable_gqa:      # key and value heads divide the query's
        batch = query.shape[:-2]
        for t in (key, value):
            equal(batch[-1] % t.shape[-3], 0)
            equal_broadcast(batch[:-1], t.shape[:-3])
    else:
        batch = broadcast_shape(query.shape[:-2], key.shape[:-2], value.shape[:-2])
    if isinstance(attn_mask, TensorProxy):
        equal_broadcast(batch + (query.shape[-2], key.shape[-2]), attn_mask.shape)
    return [batch + (query.shape[-2], value.shape[-1])]


# ---- losses -------------------------------------------------------------------------------

@rule(F.cross_entropy, F.nll_loss)
def class_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
               reduction="mean", label_smoothing=0.0):
    if size_average is not None or reduce is not None:
        return None     # the legacy arguments decide the reduction
    if reduction != "none":
        return [()]
    if input.ndim == 1:
        return [()]
    return [input.shape[:1] + input.shape[2:]]


@rule(F.mse_loss, F.l1_loss, F.smooth_l1_loss, F.huber_loss, F.binary_cross_entropy,
      F.binary_cross_entropy_with_logits, F.soft_margin_loss)
def pointwise_loss(input, target, *args, reduction="mean", size_average=None, reduce=None,
                   **kwargs):
    if size_average is not None or reduce is not None or args:
        return None     # positional or legacy arguments: left to the meta run
    if reduction != "none":
        return [()]
    return [broadcast_shape(input.shape, target.shape)]
