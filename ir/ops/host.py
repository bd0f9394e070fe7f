"""Host prims: shape queries and arithmetic on sizes and numbers, plain Python that prints as the
Python that runs it (`x.shape`, `i0 * i1`, `math.floor(f0)`). The tracer records them itself
(`ir.recording`: folded, guarded, deduplicated); the prologue and the computation run them.
"""
from __future__ import annotations

import math
import operator

from ir.ops.registry import define
from ir.proxies import IntProxy, hint
from ir.trace import render

SCALAR_OPS = {"add": ("+", operator.add), "sub": ("-", operator.sub), "mul": ("*", operator.mul),
              "truediv": ("/", operator.truediv), "floordiv": ("//", operator.floordiv),
              "mod": ("%", operator.mod), "pow": ("**", operator.pow), "and": ("&", operator.and_),
              "or": ("|", operator.or_), "xor": ("^", operator.xor),
              "lshift": ("<<", operator.lshift), "rshift": (">>", operator.rshift)}
SCALAR_UNARY = {"neg": ("-{}", operator.neg), "abs": ("abs({})", abs),
                "invert": ("~{}", operator.invert), "floor": ("math.floor({})", math.floor),
                "ceil": ("math.ceil({})", math.ceil), "trunc": ("math.trunc({})", math.trunc),
                "round": ("round({})", round)}

shape_p = define("shape", "host", lambda t: [int(s) if not isinstance(s, IntProxy) else s.hint
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
