"""The prims: the small set of operations that traces are made of and executors implement.

Each prim is a named object with a meta rule (output shapes and dtypes from input metadata) and a
default printer. Host prims (shape queries and integer arithmetic) are plain Python and print as
the Python that runs them; tensor prims are run by an executor.
"""
from __future__ import annotations

import dataclasses
import math
import operator
from typing import Callable

import torch

from ir.proxies import IntProxy, TensorProxy, hint
from ir.trace import render

PRIMS: dict[str, "Prim"] = {}


@dataclasses.dataclass(frozen=True, eq=False)
class Prim:
    name: str
    kind: str                     # "host", "elementwise", "tensor" or "opaque"
    meta: Callable                # (*args, **params) -> list of (shape, dtype, device) or int hints
    render_rhs: Callable = None   # (eqn) -> source of the right-hand side

    def render(self, eqn):
        if self.render_rhs is not None:
            return self.render_rhs(eqn), []
        args = [render(a) for a in eqn.args]
        args += [f"{k}={render(v)}" for k, v in eqn.params.items()]
        return f"prims.{self.name}({', '.join(args)})", []

    def __repr__(self):
        return self.name


def define(name, kind, meta, render_rhs=None) -> Prim:
    prim = Prim(name, kind, meta, render_rhs)
    PRIMS[name] = prim
    return prim


# ---- host prims ----------------------------------------------------------------------------

SCALAR_OPS = {"add": ("+", operator.add), "sub": ("-", operator.sub), "mul": ("*", operator.mul),
              "truediv": ("/", operator.truediv), "floordiv": ("//", operator.floordiv),
              "mod": ("%", operator.mod), "pow": ("**", operator.pow), "and": ("&", operator.and_),
              "or": ("|", operator.or_), "xor": ("^", operator.xor),
              "lshift": ("<<", operator.lshift), "rshift": (">>", operator.rshift)}
SCALAR_UNARY = {"neg": ("-{}", operator.neg), "abs": ("abs({})", abs),
                "invert": ("~{}", operator.invert), "floor": ("math.floor({})", math.floor),
                "ceil": ("math.ceil({})", math.ceil), "trunc": ("math.trunc({})", math.trunc),
                "round": ("round({})", round)}

shape = define("shape", "host", lambda t: [int(s) if not isinstance(s, IntProxy) else s.hint
                                           for s in t.shape],
               lambda eqn: f"{eqn.args[0].name}.shape" + ("[0]" if len(eqn.outs) == 1 else ""))


def _operand(x) -> str:
    source = render(x)
    return f"({source})" if source.startswith("-") else source


for _op, (_sym, _fn) in SCALAR_OPS.items():
    define("scalar_" + _op, "host", lambda a, b, _fn=_fn: [_fn(hint(a), hint(b))],
           lambda eqn, _sym=_sym: f"{_operand(eqn.args[0])} {_sym} {_operand(eqn.args[1])}")
for _op, (_template, _fn) in SCALAR_UNARY.items():
    define("scalar_" + _op, "host", lambda a, _fn=_fn: [_fn(hint(a))],
           lambda eqn, _template=_template: _template.format(_operand(eqn.args[0])))


# ---- tensor prims --------------------------------------------------------------------------

def _same(t, dtype=None, shape=None):
    return [(t.shape if shape is None else tuple(shape), dtype or t.dtype, t.device)]


convert_element_type = define("convert_element_type", "elementwise",
                              lambda t, *, dtype: _same(t, dtype))
broadcast_in_dim = define("broadcast_in_dim", "tensor",
                          lambda t, shape, *, dims: _same(t, shape=shape))


def _slice_meta(t, starts, stops, steps):
    shape = [stop - start if step == 1 else (stop - start + step - 1) // step
             for start, stop, step in zip(starts, stops, steps)]
    return _same(t, shape=shape)


slice_ = define("slice", "tensor", _slice_meta)
pad = define("pad", "tensor", lambda t, config, *, value: _same(
    t, shape=[lo + s + hi for s, (lo, hi) in zip(t.shape, config)]))


def _cat_meta(tensors, *, dim):
    shape = list(tensors[0].shape)
    total = 0
    for t in tensors:
        total = total + t.shape[dim]
    shape[dim] = total
    return _same(tensors[0], shape=shape)


cat = define("cat", "tensor", _cat_meta)
where = define("where", "elementwise", lambda c, a, b: _same(
    next(x for x in (a, b, c) if isinstance(x, TensorProxy)),
    dtype=_first_tensor(a, b).dtype if _first_tensor(a, b) is not None else None))
def _arange_meta(start, end, step, *, dtype, device):
    if all(isinstance(v, (int, IntProxy)) for v in (start, end, step)):
        length = (end - start + step - (1 if step > 0 else -1)) // step
    else:       # float bounds (constants: the tracer pins them)
        length = math.ceil((end - start) / step)
    return [((max(length, 0) if not isinstance(length, IntProxy) else length,), dtype, device)]


arange = define("arange", "tensor", _arange_meta)
full = define("full", "tensor", lambda shape, *, value, dtype, device: [(tuple(shape), dtype, device)])
# A copy into new memory (clone, cat of one tensor, zero pad, `.contiguous()` or a reshape of a
# view whose layout is not contiguous / cannot view: decided and guarded while tracing).
copy = define("copy", "elementwise", lambda t, *, memory_format: _same(t))
reshape = define("reshape", "tensor", lambda t, shape: _same(t, shape=shape))
# Reductions over `dims` (sorted), which the output drops (keepdim is a reshape after): the
# Triton executor fuses those over the innermost dims, torch runs the others.
def _reduced_meta(t, *, dims):
    return _same(t, shape=[s for d, s in enumerate(t.shape) if d not in dims])


sum_ = define("sum", "tensor", _reduced_meta)
amax = define("amax", "tensor", _reduced_meta)
amin = define("amin", "tensor", _reduced_meta)
REDUCTIONS = (sum_, amax, amin)
permute = define("permute", "tensor", lambda t, *, perm: _same(t, shape=[t.shape[p] for p in perm]))


def _first_tensor(*xs):
    return next((x for x in xs if isinstance(x, TensorProxy)), None)


UNARY = ("neg", "abs", "exp", "log", "sin", "cos", "tanh", "sigmoid", "sqrt", "rsqrt", "erf")
BINARY = ("add", "sub", "mul", "div", "pow", "maximum", "minimum")
COMPARE = ("gt", "lt", "ge", "le", "eq", "ne")

for _name in UNARY:
    define(_name, "elementwise", lambda t: _same(t))
for _name in BINARY:
    define(_name, "elementwise", lambda a, b: _same(_first_tensor(a, b)))
for _name in COMPARE:
    define(_name, "elementwise", lambda a, b: _same(_first_tensor(a, b), dtype=torch.bool))
# Activations, as eager computes them (in fp32 for fp16/bf16, rounded once): silu(x) =
# x / (1 + exp(-x)); gelu(x) = x * 0.5 * (1 + erf(x / sqrt(2))), or with approximate="tanh"
# 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x**3))).
silu = define("silu", "elementwise", lambda t: _same(t))
gelu = define("gelu", "elementwise", lambda t, *, approximate: _same(t))
# relu of a float: x where x is not < 0 (-0.0 and NaN kept), else +0.0; its own prim for
# eager's gradient, read from the output (threshold_backward: 0 where result <= 0)
relu = define("relu", "elementwise", lambda t: _same(t))
# clamp(x, lo, hi): minimum(maximum(x, lo), hi) as eager computes it (NaN wins; crossed bounds
# give hi), each bound a tensor of x's shape and dtype, a number or None (absent); its own prim
# for eager's gradient (`ir.grad_rules`), which is not the chain of maximum's and minimum's.
clamp = define("clamp", "elementwise", lambda t, lo, hi: _same(t))

# A torch call the tracer does not model; one returning a sequence of one tensor (`x.split`)
# is indexed, so its single output names the tensor, not the sequence.
opaque = define("opaque", "opaque", None,
                lambda eqn: f"{eqn.params['fn_name']}({', '.join(render(a) for a in eqn.args)}"
                            + "".join(f", {k}={render(v)}" for k, v in eqn.params['kwargs'].items())
                            + ")" + ("[0]" if eqn.params.get("sequence") and len(eqn.outs) == 1
                                     else ""))
