"""The lowering of elementwise ops and their numerics: unary and binary ops as Triton/libdevice
source, comparisons with eager's NaN rules, pow by a constant, casts, `where`, `full`; fp16/bf16
results rounded as eager rounds them (add, sub and mul of two such tensors on narrow tiles).
Registers each prim's rule (`triton_exec.rules`) on import. A lowering is `(w, eqn, idx, mask,
path) -> the kernel name of the value`, `w` the kernel writer; imports `kernel_types` and
`narrow_tiles` from this package.
"""
from __future__ import annotations

import dataclasses
import math

import torch

from ir import IntProxy, TensorProxy, prims
from ir.proxies import FloatProxy
from triton_exec import index
from triton_exec.codegen.kernel_types import (
    COMPUTE_DTYPE, TL_DTYPE, compute_dtype, is_negative_zero, negative_zero)
from triton_exec.codegen.narrow_tiles import (
    NarrowTile, held_tile, narrow_operand, representable, rounded_tile)
from triton_exec.rules import register

# Transcendental ops go through libdevice (`triton_exec.kernel_math`): `tl.exp`, `tl.sin`, ...
# lower to approximate instructions, and formulas such as 2 / (1 + exp(-2x)) - 1 for tanh lose
# all relative accuracy near 0. Square root rounds correctly. Sigmoid and silu divide by eager's
# 1 + exp(-x) (libdevice's exp) through the reciprocal instruction, 1 ulp (an IEEE division is
# ~15 instructions and a slow-path call): with both sides scaled by 1/4 (exact), the reciprocal
# of 1 + exp(-x) < 2^128 stays normal, and 1 / inf is 0 (x / inf = -0.0, as eager's).
QUARTER_DENOMINATOR = "(1.0 + libdevice.exp({0} * -1.0)) * 0.25"
# The softmax family's exp of x - max (`softmax_exp`): the GPU's exp2 instruction of the fp32
# product x * log2(e) (`kernel_math.exp2`), (2 + 1.17 |x|) fp32 ulps, results below 2^-126
# flushed to 0, as Liger-Kernel's and Inductor's softmax kernels compute it.
SOFTMAX_EXP = "libdevice.exp2({0} * 1.4426950408889634)"
UNARY_SRC = {"neg": "-{0}", "abs": "tl.abs({0})", "exp": "libdevice.exp({0})",
             "softmax_exp": SOFTMAX_EXP,
             "log": "libdevice.log({0})", "sin": "libdevice.sin({0})", "cos": "libdevice.cos({0})",
             "sqrt": "tl.sqrt_rn({0})", "rsqrt": "libdevice.rsqrt({0})",
             "sigmoid": f"libdevice.rcp({QUARTER_DENOMINATOR}) * 0.25",
             "tanh": "libdevice.tanh({0})", "erf": "libdevice.erf({0})",
             "silu": f"{{0}} * libdevice.rcp({QUARTER_DENOMINATOR}) * 0.25",
             "relu": "tl.where({0} < 0, 0.0, {0})"}
# gelu by its `approximate`, with eager's constants (sqrt(1/2); sqrt(2/pi) and 0.044715)
GELU_SRC = {"none": "{0} * 0.5 * (1.0 + libdevice.erf({0} * 0.7071067811865476))",
            "tanh": "0.5 * {0} * (1.0 + libdevice.tanh(0.7978845608028654 * ({0} + 0.044715 * "
                    "({0} * {0} * {0}))))"}
# pow by a constant float exponent, as eager special-cases it (others: libdevice.pow)
POW_SRC = {2: "{0} * {0}", 3: "{0} * {0} * {0}", -2: "tl.div_rn(1.0, {0} * {0})",
           0.5: "tl.sqrt_rn({0})", -0.5: UNARY_SRC["rsqrt"], -1: "tl.div_rn(1.0, {0})"}
# Float neg is `x * -1.0` (Triton's -x is 0 - x, which gives +0.0 for x = +0.0).
# maximum/minimum as eager computes them: NaN wins, and of two equal values (+0.0 and -0.0)
# the first operand is the result.
BINARY_SRC = {"add": "{0} + {1}", "sub": "{0} - {1}", "mul": "{0} * {1}", "div": "tl.div_rn({0}, {1})",
              "maximum": "tl.where(({0} < {1}){nan}, {1}, {0})",
              "minimum": "tl.where(({1} < {0}){nan}, {1}, {0})",
              "gt": "{0} > {1}", "lt": "{0} < {1}", "ge": "{0} >= {1}", "le": "{0} <= {1}",
              "eq": "{0} == {1}", "ne": "{0} != {1}"}
# Ops computed on fp16/bf16 tiles directly: the GPU's instruction rounds as eager does
NATIVE_NARROW = frozenset({"add", "sub", "mul"})
# Ops whose number operands eager converts to the op's dtype first (a clamp bound it does not)
ROUNDED_NUMBERS = frozenset({"add", "sub", "mul", "div"})
# Ops whose fp32 result is already a value of the operands' dtype: no rounding to do
EXACT_ON_HELD = frozenset({"neg", "abs", "maximum", "minimum", "clamp", "relu"})


def _native(w, name: str, a: NarrowTile, b: NarrowTile, dtype) -> str:
    """a <name> b on narrow tiles, negations folded: -a * b is -(a * b) and a + -b is a - b
    (exact identities: round to nearest is symmetric). Where folding would need -(a + b), whose
    zero has the other sign when a == -b, the negated operand is materialized instead."""
    if name == "mul":
        return held_tile(w, w.let("v", f"narrow.mul({a.name}, {b.name})"), dtype,
                     a.negated != b.negated)
    if name == "sub":
        b = dataclasses.replace(b, negated=not b.negated)
    if a.negated and b.negated:             # -a + -b: materialize a
        a = NarrowTile(w.let("v", f"narrow.round({a.name}.to(tl.float32) * -1.0, "
                                  f"{TL_DTYPE[dtype]})"), dtype)
    if a.negated:
        a, b = b, a
    op = "sub" if b.negated else "add"
    return held_tile(w, w.let("v", f"narrow.{op}({a.name}, {b.name})"), dtype)


def _elementwise(w, eqn, idx, mask, path):
    """An elementwise op; an fp16/bf16 result is rounded to its dtype, as eager rounds it (add,
    sub and mul of two such tensors computed on narrow tiles, see `narrow_math`)."""
    name, dtype = eqn.prim.name, eqn.out.dtype
    args = [w.value(a, idx, mask, path) for a in eqn.args]
    if name == "div":       # a runtime integer divisor (a mean's count): tl.div_rn takes floats
        args = [f"tl.cast({s}, tl.float32)" if isinstance(a, IntProxy) else s
                for a, s in zip(eqn.args, args)]
    narrow = dtype in COMPUTE_DTYPE
    if narrow and name in ROUNDED_NUMBERS:  # a runtime float, converted to the dtype as eager does
        args = [rounded_tile(w, s, dtype) if isinstance(a, FloatProxy) else s
                for a, s in zip(eqn.args, args)]
    held = [a is None or isinstance(a, TensorProxy) and a.dtype == dtype
            or representable(a, dtype) for a in eqn.args]
    if narrow and name in NATIVE_NARROW and all(isinstance(a, TensorProxy) for a in eqn.args) \
            and all(held):
        return _native(w, name, *(narrow_operand(w, a, dtype) for a in args), dtype)
    result = _fp32_elementwise(w, eqn, args)
    if not narrow or (name in EXACT_ON_HELD and all(held)):
        if narrow and name == "neg" and args[0] in w.narrow_tiles:      # fold the sign into users
            tile = w.narrow_tiles[args[0]]
            w.narrow_tiles[result] = dataclasses.replace(tile, negated=not tile.negated)
        return result
    return rounded_tile(w, result, dtype)


def _fp32_elementwise(w, eqn, args) -> str:
    """The op on fp32 (or integer) tiles."""
    name = eqn.prim.name
    if name == "neg" and eqn.args[0].dtype.is_floating_point:
        return w.let("v", f"{args[0]} * -1.0")
    if name in UNARY_SRC:
        return w.let("v", UNARY_SRC[name].format(*args))
    if name == "gelu":
        return w.let("v", GELU_SRC[eqn.params["approximate"]].format(*args))
    if name == "pow":
        return _pow(w, args[0], eqn.args[1], eqn.out.dtype)
    if name == "clamp":     # maximum with lo, then minimum with hi; a bound None is left out
        result = args[0]
        for extremum, bound, src in (("maximum", eqn.args[1], args[1]),
                                     ("minimum", eqn.args[2], args[2])):
            if bound is not None:
                result = _binary(w, extremum, result, bound, src)
        return result
    return _binary(w, name, args[0], eqn.args[1], args[1])


def _binary(w, name: str, a: str, b, b_src: str) -> str:
    """a <name> b on fp32 (or integer) tiles (`b_src` holds b); a NaN b wins a maximum or
    minimum."""
    runtime_float = isinstance(b, FloatProxy) or (isinstance(b, TensorProxy)
                                                  and b.dtype.is_floating_point)
    nan = (f" | ({b_src} != {b_src})" if runtime_float
           else " | True" if isinstance(b, float) and math.isnan(b) else "")
    if name == "div" and (reciprocal := _exact_reciprocal(b)) is not None:
        return w.let("v", f"{a} * {reciprocal!r}")
    return w.let("v", BINARY_SRC[name].format(a, b_src, nan=nan))


def _exact_reciprocal(b) -> float | None:
    """1 / b for a number b that is a power of two whose reciprocal is a normal fp32 (a mean's
    count of 4096): then a * (1 / b) is a / b, the same real number correctly rounded, for every
    a (an IEEE division costs ~15 instructions and a slow-path call); None otherwise."""
    if isinstance(b, bool) or not isinstance(b, (int, float)) or not math.isfinite(b) or b == 0:
        return None
    mantissa, exponent = math.frexp(b)
    if abs(mantissa) != 0.5 or not -126 <= 1 - exponent <= 127:
        return None
    return 1.0 / b


def _pow(w, x: str, e, dtype) -> str:
    """x ** e for a constant e as eager computes it: 0 gives 1 (NaN too), 1 gives x; a float by
    `POW_SRC`, e rounded to an fp16/bf16 x's dtype as eager's kernel converts it; an integer by
    squaring (wrapping as eager's does; e >= 0, eager refuses less)."""
    if e == 0:
        return w.constant_tile(1, dtype)
    if e == 1:
        return x
    if dtype in COMPUTE_DTYPE:
        e = torch.tensor(float(e), dtype=torch.float64).to(dtype).item()
    if dtype.is_floating_point:
        return w.let("v", POW_SRC.get(e, f"libdevice.pow({{0}}, {float(e)!r})").format(x))
    result, square, e = None, x, int(e)
    while True:
        if e & 1:
            result = square if result is None else w.let("v", f"{result} * {square}")
        e >>= 1
        if not e:
            return result
        square = w.let("v", f"{square} * {square}")


def _convert(w, eqn, idx, mask, path):
    """A cast sees its source as eager holds it (rounded to a narrow float dtype) and rounds to
    a narrow float target exactly, so casts to int or bool and later comparisons agree."""
    src = w.value(eqn.args[0], idx, mask, path)
    to = eqn.params["dtype"]
    if to == torch.bool:
        return w.let("v", f"{src} != 0")
    if to in COMPUTE_DTYPE:     # round to the narrow type as eager does, compute in fp32
        if not eqn.args[0].dtype.is_floating_point:     # ints reach bf16/fp16 through fp32
            src = w.let("v", f"{src}.to(tl.float32)")
        return rounded_tile(w, src, to)
    return w.let("v", f"{src}.to({TL_DTYPE[to]})")


def _where(w, eqn, idx, mask, path):
    c, a, b = (w.value(x, idx, mask, path) for x in eqn.args)
    result = w.let("v", f"tl.where({c}, {a}, {b})")
    dtype = eqn.out.dtype
    if dtype in COMPUTE_DTYPE and all(    # of values held in the narrow dtype: held too
            representable(x, dtype) or (s in w.narrow_tiles and w.narrow_tiles[s].dtype == dtype
                                        and not w.narrow_tiles[s].negated)
            for x, s in zip(eqn.args[1:], (a, b))):
        w.narrow_tiles[result] = NarrowTile(w.let("v", f"{result}.to({TL_DTYPE[dtype]})"), dtype)
    return result


def _full(w, eqn, idx, mask, path):
    dtype, value = compute_dtype(eqn.params["dtype"]), eqn.params["value"]
    if is_negative_zero(value):
        return w.let("v", negative_zero(w.shape))
    return w.let("v", f"tl.full({w.shape}, {w.value(value, [], index.TRUE, path)}, {TL_DTYPE[dtype]})")


def _arange(w, eqn, idx, mask, path):
    """start + i * step at index i (integer constants: `_arange_refusal`)."""
    start, _, step = eqn.args
    value = w.tile_shaped(index.add(index.mul(idx[0], step), start))
    return w.let("v", f"({w.render.expr(value, top=True)}).to({TL_DTYPE[eqn.out.dtype]})")


def _arange_refusal(eqn):
    start, _, step = eqn.args
    if not all(isinstance(v, int) for v in (start, step)) or eqn.out.dtype != torch.int32:
        return "arange is fused as int32 with constant start and step only"
    return None


def _full_merged(eqn, args, params, k, inner):
    shape = eqn.outs[0].shape   # its sizes as guards left them (the merged ones constants)
    kept = shape[k] if inner == 1 else shape[k] * inner     # trailing 1s dropped: any size
    return (tuple(shape[:k]) + (kept,),), params


def _pow_refusal(eqn):
    base, exponent = eqn.args
    if not isinstance(base, TensorProxy) or isinstance(exponent, TensorProxy):
        return "pow is fused with a tensor base and a number exponent only"
    if math.isfinite(exponent) and (base.dtype.is_floating_point or exponent == int(exponent)):
        return None
    return f"pow is not fused with the exponent {exponent!r}"


register(prims.convert_element_type, lower=_convert)
register(prims.where, lower=_where)
register(prims.full, lower=_full, merged=_full_merged)
register(prims.arange, lower=_arange, refuse=_arange_refusal, merges=lambda eqn, k: False)
_FLOAT_ONLY = {"exp", "softmax_exp", "log", "sin", "cos", "sqrt", "rsqrt", "sigmoid", "tanh", "div", "erf",
               "silu", "gelu", "relu"}
_ARITHMETIC = {"add", "sub", "mul", "div", "maximum", "minimum", "clamp", "neg", "abs", "pow"}
for _name in list(UNARY_SRC) + list(BINARY_SRC) + ["pow", "gelu", "clamp"]:
    register(prims.PRIMS[_name], lower=_elementwise, float_only=_name in _FLOAT_ONLY,
             no_bool=_name in _ARITHMETIC, refuse=_pow_refusal if _name == "pow" else None)

