"""The accurate math functions generated kernels call, as `libdevice.<name>`.

Compiled, each is CUDA's libdevice function (`__nv_tanhf`, `__nv_expf`, ...: a few ulp over the
whole fp32 domain, where `tl.exp`/`tl.sin` lower to approximate instructions), through Triton's
`triton.language.extra.libdevice`. Triton's interpreter (3.6) cannot call extern functions, so
there the same function maps the tile's data through numpy's function of that name (also
accurate). Each is a Triton builtin: the compiler calls it with `_semantic`, the interpreter
without.

`rcp` and `exp2` are the approximate functions: the GPU's reciprocal instruction
(`rcp.approx.ftz.f32`, within 1 ulp for a normal result; the interpreter divides exactly), which
sigmoid and silu divide by, and its exp2 instruction (`ex2.approx.ftz.f32`, within 2 ulp; the
interpreter takes numpy's), which the softmax family's exp(x - max) is computed with (see
`codegen.lower_elementwise`).
"""
from __future__ import annotations

import math

import numpy as np

_LIBDEVICE = "triton.language.extra.libdevice"

_NUMPY = {"exp": np.exp, "log": np.log, "sin": np.sin, "cos": np.cos, "tanh": np.tanh,
          "rsqrt": lambda a: 1 / np.sqrt(a),
          # numpy has no erf: Python's (double precision), rounded once to the tile's dtype
          "erf": np.vectorize(math.erf, otypes=[np.float64]),
          "pow": np.power}     # pow(x, exponent): the exponent is a Python number


def _builtin(name):
    numpy_fn = _NUMPY[name]

    def fn(x, *numbers, _semantic=None):
        if _semantic is not None:   # compiling: the target's libdevice (as Triton maps it)
            backend = _semantic.builder.module_map.get(_LIBDEVICE, None)
            return getattr(backend, name)(x, *numbers, _semantic=_semantic)
        import triton.language as tl
        from triton.runtime.interpreter import TensorHandle
        dtype = x.handle.data.dtype
        with np.errstate(all="ignore"):
            data = numpy_fn(x.handle.data, *(dtype.type(n) for n in numbers)).astype(dtype)
        return tl.core.tensor(TensorHandle(data, x.handle.dtype), x.type)

    fn.__name__ = name
    fn.__triton_builtin__ = True
    return fn


exp, log, sin, cos, tanh, rsqrt, erf, pow = (_builtin(name) for name in _NUMPY)


def _instruction(name: str, ptx: str, numpy_fn):
    """A builtin computing one fp32 PTX instruction (`ptx`: `$0` the result, `$1` the operand);
    under the interpreter `numpy_fn` of the tile's data, in fp32."""
    def fn(x, _semantic=None):
        import triton.language as tl
        if _semantic is not None:
            return tl.inline_asm_elementwise(ptx, "=f,f", [x], dtype=tl.float32, is_pure=True,
                                             pack=1, _semantic=_semantic)
        from triton.runtime.interpreter import TensorHandle
        data = x.handle.data
        with np.errstate(all="ignore"):
            data = numpy_fn(data).astype(data.dtype)
        return tl.core.tensor(TensorHandle(data, x.handle.dtype), x.type)

    fn.__name__ = name
    fn.__triton_builtin__ = True
    return fn


# 1 / x by the GPU's reciprocal: within 1 ulp where the result is normal, subnormal results
# flushed to zero (callers scale the operand to keep the result normal)
rcp = _instruction("rcp", "rcp.approx.ftz.f32 $0, $1;", lambda a: np.float32(1) / a)
# 2 ** x by the GPU's exp2: within 2 ulp, results below 2^-126 flushed to zero (the softmax
# family's exp(x - max) as exp2((x - max) * log2(e)), see `codegen.lower_elementwise`)
exp2 = _instruction("exp2", "ex2.approx.ftz.f32 $0, $1;", np.exp2)
