"""Autocast as eager applies it: the casts `torch.autocast` makes to each traced op's arguments.

Eager's autocast (aten/src/ATen/autocast_mode.cpp) casts the arguments of the ops it lists, per
device type: "lower" ops (matmul, linear, conv, bmm, ...) run in the autocast dtype, "fp32" ops
(losses, norms, and on CUDA exp/log/pow/softmax/sum, ...) in float32, "promote" ops (cat, stack,
index_put, ...) in the widest floating type of their arguments. An argument is cast where it is a
floating tensor of that device type and not float64 (eager's `is_eligible`).

While tracing, `torch.autocast` entered outside the call or inside `fn` sets torch's own state,
which `cast_arguments` reads at each op the user's code calls: the casts are recorded as
`convert_element_type` prims, so fused kernels and grad rules see eager's dtypes, and the
computation runs with autocast disabled (`disabled`), so no op is cast twice and an op outside
the lists runs in its arguments' dtypes as the trace typed it. The autocast state is part of
the cache key and the prologue (`state`).
"""
from __future__ import annotations

import torch

from ir.ops.casts import convert
from ir.proxies import TensorProxy

DEVICE_TYPES = ("cpu", "cuda")

# CastPolicy per aten op (base name), from PyTorch 2.13's autocast_mode.cpp (the ops registered
# for AutocastCPU/AutocastCUDA in its dispatcher). CPU does not list einsum, but eager's einsum
# runs its bmm in the autocast dtype: listed here as that.
_CPU_LOWER = """conv1d conv2d conv3d bmm mm linalg_vecdot baddbmm addmm addbmm linear _convolution
    matmul conv_tbc mkldnn_rnn_layer conv_transpose1d conv_transpose2d conv_transpose3d prelu
    scaled_dot_product_attention _native_multi_head_attention _addmm_activation einsum"""
_CPU_FP32 = """avg_pool3d binary_cross_entropy grid_sampler polar prod quantile nanquantile stft
    cdist trace view_as_complex cholesky cholesky_inverse cholesky_solve inverse lu_solve orgqr
    ormqr pinverse max_pool3d max_unpool2d max_unpool3d adaptive_avg_pool3d reflection_pad1d
    reflection_pad2d replication_pad1d replication_pad2d replication_pad3d mse_loss
    cosine_embedding_loss nll_loss nll_loss2d hinge_embedding_loss poisson_nll_loss smooth_l1_loss
    cross_entropy_loss l1_loss huber_loss margin_ranking_loss soft_margin_loss triplet_margin_loss
    multi_margin_loss ctc_loss kl_div multilabel_margin_loss binary_cross_entropy_with_logits
    fft_fft fft_ifft fft_fft2 fft_ifft2 fft_fftn fft_ifftn fft_rfft fft_irfft fft_rfft2
    fft_irfft2 fft_rfftn fft_irfftn fft_hfft fft_ihfft linalg_cond linalg_matrix_rank
    linalg_solve linalg_cholesky linalg_svdvals linalg_eigvals linalg_eigvalsh linalg_inv
    linalg_householder_product linalg_tensorinv linalg_tensorsolve fake_quantize_per_tensor_affine
    geqrf _lu_with_info qr svd triangular_solve fractional_max_pool2d fractional_max_pool3d
    adaptive_max_pool3d linalg_qr linalg_cholesky_ex linalg_svd linalg_eig linalg_eigh
    linalg_lstsq linalg_inv_ex"""
_CPU_PROMOTE = "cat stack index_copy"
_CUDA_LOWER = """_convolution conv1d conv2d conv3d conv_tbc conv_transpose1d conv_transpose2d
    conv_transpose3d convolution prelu addmm addmv addr matmul einsum mm mv linalg_vecdot linear
    addbmm baddbmm bmm chain_matmul linalg_multi_dot _thnn_fused_lstm_cell _thnn_fused_gru_cell
    lstm_cell gru_cell rnn_tanh_cell rnn_relu_cell _scaled_dot_product_flash_attention
    scaled_dot_product_attention"""
_CUDA_FP32 = """acos asin cosh erfinv exp expm1 log log10 log2 log1p reciprocal rsqrt sinh tan pow
    softplus layer_norm native_layer_norm group_norm frobenius_norm nuclear_norm cosine_similarity
    poisson_nll_loss cosine_embedding_loss nll_loss nll_loss2d hinge_embedding_loss kl_div l1_loss
    smooth_l1_loss huber_loss mse_loss margin_ranking_loss multilabel_margin_loss
    soft_margin_loss triplet_margin_loss multi_margin_loss binary_cross_entropy_with_logits dist
    pdist cdist renorm logsumexp upsample_nearest1d upsample_nearest2d upsample_nearest3d
    upsample_linear1d upsample_bilinear2d upsample_trilinear2d upsample_bicubic2d rms_norm
    cross_entropy_loss"""
# fp32_set_opt_dtype / fp32_append_dtype: the op computes in float32 where its first argument
# is eligible and no dtype was given
_CUDA_FP32_FIRST = """prod softmax log_softmax cumprod cumsum linalg_vector_norm linalg_matrix_norm
    sum norm"""
_CUDA_PROMOTE = """addcdiv addcmul atan2 bilinear cross dot vdot grid_sampler index_put scatter_add
    tensordot"""


def _table(**policies) -> dict:
    return {name: policy for policy, names in policies.items() for name in names.split()}


POLICIES = {
    "cpu": _table(lower=_CPU_LOWER, fp32=_CPU_FP32, promote=_CPU_PROMOTE),
    "cuda": _table(lower=_CUDA_LOWER, fp32=_CUDA_FP32, fp32_first=_CUDA_FP32_FIRST,
                   promote=_CUDA_PROMOTE),
}
# Python names whose aten op has another name. cross_entropy is one aten op on CPU; on CUDA its
# parts (log_softmax in float32, then nll_loss) make it a float32 op as well.
_ATEN_NAMES = {"__matmul__": "matmul", "__rmatmul__": "matmul", "__pow__": "pow",
               "__rpow__": "pow", "concat": "cat", "concatenate": "cat",
               "cross_entropy": "cross_entropy_loss"}


_STATE_SOURCE = ("(torch.is_autocast_enabled('cpu'), torch.get_autocast_dtype('cpu'), "
                 "torch.is_autocast_enabled('cuda'), torch.get_autocast_dtype('cuda'), "
                 "torch.is_autocast_cache_enabled())")


OFF = "off"     # the state while autocast is off for every device type: its dtypes do not matter


def state():
    """The autocast state eager consults (part of the cache key): `OFF`, or enabled and dtype per
    device type and the cast cache flag. Off, it is one query."""
    if not torch._C._is_any_autocast_enabled():
        return OFF
    return (torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"),
            torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda"),
            torch.is_autocast_cache_enabled())


def describe(s) -> str:
    """A `state()` for people: `cpu bfloat16`, `off`, with `, no cast cache` where it is off."""
    if s == OFF:
        return OFF
    on = [f"{d} {str(dtype).removeprefix('torch.')}" for d, (enabled, dtype)
          in zip(DEVICE_TYPES, (s[0:2], s[2:4])) if enabled]
    return (" and ".join(on) or "off") + ("" if s[4] else ", no cast cache")


def enabled() -> bool:
    """Whether autocast is on for some device type."""
    return torch._C._is_any_autocast_enabled()


def prologue_check() -> str:
    """The prologue's line rejecting another autocast state than this moment's."""
    s = state()
    if s == OFF:
        return "if torch._C._is_any_autocast_enabled(): return False"
    return f"if {_STATE_SOURCE} != ({', '.join(map(repr, s))}): return False"


def _eligible(x, device_type: str) -> bool:
    return (isinstance(x, TensorProxy) and x.dtype.is_floating_point and x.dtype != torch.float64
            and x.device.type == device_type)


def _tensors(x):
    if isinstance(x, (tuple, list)):
        for item in x:
            yield from _tensors(item)
    elif isinstance(x, TensorProxy):
        yield x


def _promoted(args, device_type: str, lower):
    """The widest floating type of the eligible arguments, in order, as eager's `promote_type`
    (which refuses to meet a floating type other than float32 and `lower`, even before a
    float32)."""
    dtype = lower
    for t in _tensors(args):
        if not _eligible(t, device_type):
            continue
        if torch.float32 in (dtype, t.dtype):
            dtype = torch.float32
        elif dtype != lower or t.dtype != lower:
            raise RuntimeError("Unexpected floating ScalarType in at::autocast::prioritize: "
                               f"{t.dtype} under autocast to {lower}")
    return dtype


def _cast_all(x, dtype, device_type):
    if isinstance(x, (tuple, list)):
        return type(x)(_cast_all(item, dtype, device_type) for item in x)
    if _eligible(x, device_type) and x.dtype != dtype:
        return convert(x, dtype)
    return x


def cast_arguments(name: str, args, kwargs):
    """(args, kwargs) of the torch function or method `name` as eager's autocast casts them in
    the autocast state of this moment; unchanged where autocast is off or the op is not listed."""
    first = next(_tensors((args, tuple(kwargs.values()))), None)
    if first is None or first.device.type not in POLICIES:
        return args, kwargs
    device_type = first.device.type
    if not torch.is_autocast_enabled(device_type):
        return args, kwargs
    policy = POLICIES[device_type].get(_ATEN_NAMES.get(name, name))
    if policy is None:
        return args, kwargs
    lower = torch.get_autocast_dtype(device_type)
    if policy == "fp32_first":
        if kwargs.get("dtype") is not None or not args or not _eligible(args[0], device_type):
            return args, kwargs
        return (_cast_all(args[0], torch.float32, device_type), *args[1:]), kwargs
    dtype = {"lower": lower, "fp32": torch.float32}.get(policy) or _promoted(
        (args, tuple(kwargs.values())), device_type, lower)
    return (_cast_all(args, dtype, device_type),
            {k: _cast_all(v, dtype, device_type) for k, v in kwargs.items()})


def disabled(computation):
    """computation run with autocast off on every device type (its casts are in the trace),
    restoring the caller's state afterwards."""
    def run(*args):
        if not torch._C._is_any_autocast_enabled():
            return computation(*args)
        before = [torch.is_autocast_enabled(d) for d in DEVICE_TYPES]
        for d in DEVICE_TYPES:
            torch.set_autocast_enabled(d, False)
        try:
            return computation(*args)
        finally:
            for d, was in zip(DEVICE_TYPES, before):
                torch.set_autocast_enabled(d, was)
    return run
