"""Grad mode per region: `torch.no_grad()`, `torch.enable_grad()`, `torch.set_grad_enabled(b)` and
`torch.inference_mode()` inside the traced function, as eager honours them.

While tracing, these set torch's own grad mode, which `output_requires_grad` reads at each op: a
value computed where grad is off does not require grad, and one computed where it is on does when
an input does, as autograd says. The grad rules and the differentiable units follow these flags
(a gradient never flows through a value that does not require grad). At run time, `regions`
wraps each run of equations of the executed trace whose outputs need the other grad mode than
the call's in a block, so torch's own ops record autograd history exactly where eager does:

    with torch.no_grad():
      t3 = torch.matmul(x, w)  # f32[4, 4]
    t4 = x * t3  # f32[4, 4]

An equation needs grad mode on where an output requires grad, and off where a floating output
does not while an input does. A mode `fn` leaves set (`torch.set_grad_enabled(False)` as a plain
call) is set again at the end of every call, as eager's call leaves it. `inference_mode()` inside
`fn` runs as `no_grad()`: its values do not require grad (they are not inference tensors).
"""
from __future__ import annotations

import torch

from ir.ops.registry import define
from ir.proxies import ACTIVE_TRACE, TensorProxy
from ir.trace import Eqn, Trace

_MODES = {True: "enable_grad", False: "no_grad"}
begin = define("grad_mode", "host", lambda *, enabled, grad_block: [],
               lambda eqn: f"with torch.{_MODES[eqn.params['enabled']]}():")
end = define("end_grad_mode", "host", lambda *, grad_block: [], lambda eqn: "")
set_mode = define("set_grad_enabled", "host", lambda *, enabled: [],
                  lambda eqn: f"torch._C._set_grad_enabled({eqn.params['enabled']})")


def output_requires_grad(inputs) -> bool:
    """Whether a floating output computed now from `inputs` requires grad, as autograd says;
    records on the active trace that an op was traced in grad mode."""
    if not torch.is_grad_enabled():
        return False
    ctx = ACTIVE_TRACE.get()
    if ctx is not None:
        ctx.grad_ops = True
    return any(isinstance(x, TensorProxy) and x.requires_grad for x in inputs)


def needed_mode(eqn: Eqn):
    """The grad mode eqn must run in (True, False), or None where either gives eager's result."""
    if eqn.prim.kind == "host":
        return None
    outs = [o for o in eqn.outs if isinstance(o, TensorProxy)]
    if any(o.requires_grad for o in outs):
        return True
    if any(o.dtype.is_floating_point for o in outs) and any(
            isinstance(v, TensorProxy) and v.requires_grad for v in eqn.input_vars()):
        return False
    return None


def regions(trace: Trace, outer: bool, final: bool) -> Trace:
    """The executed trace with each run of equations that needs grad mode `not outer` (the
    call's) in a `with` block, and the mode `fn` left set (`final`) set at the end."""
    eqns, open_mode = [], None
    for eqn in trace.eqns:
        mode = needed_mode(eqn)
        if mode is not None and (mode != outer) != (open_mode is not None):
            if open_mode is None:
                eqns.append(Eqn(begin, (), {"enabled": mode, "grad_block": 1}, ()))
                open_mode = mode
            else:
                eqns.append(Eqn(end, (), {"grad_block": -1}, ()))
                open_mode = None
        eqns.append(eqn)
    if open_mode is not None:
        eqns.append(Eqn(end, (), {"grad_block": -1}, ()))
    if final != outer:
        eqns.append(Eqn(set_mode, (), {"enabled": final}, ()))
    return trace if len(eqns) == len(trace.eqns) else trace.replace(eqns=tuple(eqns))
