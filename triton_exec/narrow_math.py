"""Eager's fp16/bf16 arithmetic in generated kernels, as `narrow.<name>`.

Eager rounds the result of every fp16/bf16 op to its dtype (it computes in fp32, then rounds to
nearest even). Generated kernels do the same: `round(x, dtype)` rounds an fp32 tile to a narrow
tile, and `add`, `sub`, `mul` compute on narrow tiles directly, each rounded once. For these
three the GPU's own instructions (`add/sub/mul.rn.bf16x2`, `.f16x2`: two lanes per instruction)
give eager's result bit for bit: the fp32 result eager rounds is exact for a product of two
narrow values, and a sum rounded twice (to fp32, then to the narrow type) equals the sum rounded
once, as fp32 carries more than twice the narrow significand plus two bits. Kernels are compiled
with `enable_fp_fusion=False` so that no `a * b + c` is contracted into one fma.

Triton's interpreter holds bf16 tiles as their 16 bits and computes on those bits as integers,
and truncates where it converts fp32 to bf16; there each function computes in fp32 with numpy and
rounds to nearest even on the bits. Each is a Triton builtin: the compiler calls it with
`_semantic`, the interpreter without.
"""
from __future__ import annotations

import numpy as np

_BF16_NAN = np.uint16(0x7FC0)       # the NaN eager's bf16 rounding produces


def _interpreted_dtype(dtype):
    import triton.language as tl
    dtype = getattr(dtype, "value", dtype)
    if dtype not in (tl.bfloat16, tl.float16):
        raise TypeError(f"narrow float dtype expected (tl.bfloat16 or tl.float16), got {dtype}")
    return dtype


def _to_fp32(x) -> np.ndarray:
    """An interpreted narrow tile's values as fp32 (bf16: its bits are fp32's upper half)."""
    import triton.language as tl
    data = x.handle.data
    if x.dtype.scalar == tl.bfloat16:
        return (data.astype(np.uint32) << 16).view(np.float32)
    return data.astype(np.float32)


def _from_fp32(values: np.ndarray, dtype):
    """fp32 values rounded to nearest even in the narrow `dtype`, as an interpreted tile."""
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle
    values = np.asarray(values, dtype=np.float32)
    if dtype == tl.bfloat16:
        bits = values.view(np.uint32).astype(np.uint64)
        rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
        data = np.where(np.isnan(values), _BF16_NAN, rounded)
    else:
        data = values.astype(np.float16)
    shape = list(values.shape)
    return tl.core.tensor(TensorHandle(data, dtype), tl.block_type(dtype, shape) if shape
                          else dtype)


def round(x, dtype, _semantic=None):     # noqa: A001 - the kernel's name for it
    """The fp32 tile x rounded to nearest even in `dtype` (tl.bfloat16 or tl.float16)."""
    if _semantic is not None:
        return x.to(dtype, _semantic=_semantic)
    dtype = _interpreted_dtype(dtype)
    values = x.handle.data if hasattr(x, "handle") else x    # a float parameter comes as is
    return _from_fp32(np.asarray(values, dtype=np.float32), dtype)


def _binary(name, numpy_fn):
    def fn(a, b, _semantic=None):
        if _semantic is not None:       # compiling: the narrow op itself
            return getattr(a, f"__{name}__")(b, _semantic=_semantic)
        with np.errstate(all="ignore"):
            values = numpy_fn(_to_fp32(a), _to_fp32(b))
        return _from_fp32(values, _interpreted_dtype(a.dtype.scalar))

    fn.__name__ = name
    fn.__doc__ = f"a {name} b on two narrow tiles of one dtype, rounded once as eager rounds it."
    fn.__triton_builtin__ = True
    return fn


round.__triton_builtin__ = True
add, sub, mul = (_binary(name, fn) for name, fn in
                 (("add", np.add), ("sub", np.subtract), ("mul", np.multiply)))
