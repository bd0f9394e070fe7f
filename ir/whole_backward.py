"""Training: one backward for the whole computation trace.

In grad mode the whole computation becomes one `torch.autograd.Function`. Its backward is one
trace, built from the grad rules over every prim of the computation (the fusible ones inside
fusion groups and the ones torch runs alike) and, for each opaque torch call (matmul, attention,
embedding, any op without a rule), a vector-Jacobian product run by PyTorch: the forward runs the
call with grad on detached inputs and keeps its autograd node (a handle, `h0`), and the backward
calls `torch.autograd.grad` on that node. The backward trace then goes through the same passes
and executors as a forward trace, so gradient accumulation (a value read by the q, k and v
projections), the sums of broadcast gradients and the elementwise work between two groups fuse.

What the backward reads is saved only where the forward materializes it anyway (an input, the
output of a kernel or of a torch call); a value inside a fusion group is recomputed in the
backward from what was saved, as the per-group units do (`ir.autodiff`).

Where this cannot be made sound, `plan` returns a reason and the jit falls back to a
differentiable unit per fusion group (`ir.autodiff`), and `ir.explain` says why: the call is not
in grad mode, `fn` changes the grad mode it leaves set, writes its inputs in place, returns a
view (which a custom Function's output cannot be written through as eager's can), or calls a
function that is not torch's own (a submodule run in eager, whose parameters are not inputs).
`IR_WHOLE_BACKWARD=0` turns it off.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import os

import torch
from torch.utils import _pytree as pytree

from ir import autocast, autodiff, prims
from ir.executors import compile_trace
from ir.ops.registry import GRAD_RULES
from ir.ops.vjp import emit, needs_grad
from ir.proxies import ScalarProxy, TensorProxy, Var, hint
from ir.recording import _to_meta, new_tensor, record
from ir.trace import Trace, free_vars, iter_vars, map_vars
from ir.tracing import TraceContext, tracing
from ir.transforms import per_sample

VIEW_PRIMS = ("reshape", "slice", "permute", "broadcast_in_dim")


def enabled() -> bool:
    return os.environ.get("IR_WHOLE_BACKWARD", "1") != "0"


class Handle(Var):
    """A trace value standing for the autograd node of an opaque call run in the forward."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name


@dataclasses.dataclass
class Node:
    """At run time: what `torch.autograd.grad` needs to differentiate one opaque call."""

    inputs: list        # the detached inputs that need grad, leaves of the call's graph
    outputs: list       # the call's results, with their graph


class Refused(Exception):
    """The whole-trace backward cannot be made sound for this trace (the reason)."""


@dataclasses.dataclass
class Plan:
    """The whole computation as one autograd Function, once both traces are compiled."""

    name: str
    grad_inputs: tuple          # paths (into the trace's arguments) of the inputs getting grads
    non_differentiable: tuple   # positions of outputs autograd must not differentiate
    grads_read: tuple           # output positions whose gradients the backward reads
    reaches: tuple              # per grad input: the output positions it reaches
    rebuild: object             # (args, output values) -> the trace's output structure
    forward: object = None      # compiled forward: args -> (outputs, saved, scalars, handles)
    backward: object = None     # compiled backward trace

    def __call__(self, *args):
        grads = [_at(args, path) for path in self.grad_inputs]
        outs = _WholeFunction.apply(self, args, *grads)
        return self.rebuild(args, outs)


def _at(args, path):
    value = args[path[0]]
    for p in path[1:]:
        value = tuple(value.values())[p] if isinstance(value, dict) else value[p]
    return value


class _WholeFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, plan, args, *grad_inputs):
        outs, saved, scalars, handles = plan.forward(*args)
        ctx.plan, ctx.scalars, ctx.handles = plan, scalars, handles
        # a tensor saved with the handles: freed by autograd when the graph is, which tells the
        # end-of-backward callback whether to free the handles' graphs too
        ctx.save_for_backward(*saved, *((torch.empty(0),) if handles else ()))
        ctx.n_saved = len(saved)
        ctx.outputs = [(o.shape, o.dtype, o.device) if isinstance(o, torch.Tensor) else None
                       for o in outs]
        if plan.non_differentiable:
            ctx.mark_non_differentiable(*[outs[k] for k in plan.non_differentiable])
        ctx.set_materialize_grads(False)
        return outs

    @staticmethod
    def backward(ctx, *grads):
        plan = ctx.plan
        autodiff.refuse_double_backward(plan.name)
        present = {k for k, g in enumerate(grads) if g is not None}
        if not present:
            return (None, None, *[None] * len(plan.grad_inputs))
        saved = ctx.saved_tensors[:ctx.n_saved]    # eager's error after the graph was freed
        read = autodiff.grads_read(ctx, grads, present, plan.grads_read)
        results = per_sample(plan.backward, *saved, *ctx.scalars, *ctx.handles, *read)
        if ctx.handles:
            torch.autograd.Variable._execution_engine.queue_callback(
                functools.partial(_release_if_freed, ctx))
        return (None, None, *[g if present & reaches else None
                              for g, reaches in zip(results, plan.reaches)])


def _release_if_freed(ctx) -> None:
    """At the end of a backward: drops the handles' graphs where autograd freed ours (no
    retain_graph), as eager frees the opaque calls' saved tensors then."""
    try:
        ctx.saved_tensors
    except RuntimeError:
        ctx.handles = None


# ---- building the plan ---------------------------------------------------------------------

def refusal(traced: Trace, tctx: TraceContext, grad_mode: bool,
            final_grad_mode: bool) -> str | None:
    """Why the whole-trace backward is not used for this trace before looking at it; None."""
    if not enabled():
        return "turned off (IR_WHOLE_BACKWARD=0)"
    if not grad_mode:
        return "called with grad disabled (grad enabled inside fn)"
    if final_grad_mode != grad_mode:
        return "fn leaves grad disabled"
    if tctx.mutations.written_inputs:
        return "fn writes its inputs in place"
    if not any(needs_grad(v) for v in traced.input_vars()):
        return "no input needs grad"
    return None


def differentiate(traced: Trace, fused: Trace, tctx: TraceContext, cctx, lower, grad_modes):
    """(forward trace, {name: backward traces}, host equations the backward added, the Plan or
    None): one backward for the whole trace, else (`ir.explain` says why) a differentiable
    unit per fusion group (`ir.autodiff`). grad_modes: (the call's, the one fn leaves set)."""
    reason = refusal(traced, tctx, *grad_modes)
    if reason is None:
        mark = _mark(cctx)
        try:
            forward, traces, host, plan = build(traced, fused, tctx, cctx, lower)
            cctx.extra["backward"] = f"one for the whole trace: {traces[-1].name}"
            cctx.extra["whole_backward"] = plan
            return forward, {traces[-1].name: traces}, host, plan
        except Refused as why:    # what its lowerings added goes with it
            _roll_back(cctx, mark)
            reason = str(why)
    cctx.extra["backward"] = f"per fusion group ({reason})"
    return (*autodiff.differentiate(fused, tctx, cctx, lower), None)


def build(traced: Trace, fused: Trace, tctx: TraceContext, cctx, lower):
    """(forward trace, backward traces, host equations the backward added, plan) for one
    autograd Function running `fused` (the forward after the fusion passes) and a backward
    derived from `traced` (the same computation before them); raises Refused.

    lower(trace, cctx) -> the traces of the passes and executors (the last is what runs)."""
    eqns = list(traced.eqns)
    materialized = {id(v) for v in traced.input_vars()}
    materialized.update(id(o) for e in fused.eqns for o in e.outs if o is not None)
    out_vars, out_index = _outputs(traced)
    _refuse(eqns, fused, out_vars)
    grad_inputs = _distinct(v for v in traced.input_vars() if needs_grad(v))
    cut = _non_differentiable(eqns)
    reaches = tuple(_reaches(eqns, v, out_vars, cut) for v in grad_inputs)
    reached = frozenset().union(*reaches)
    name = f"{cctx.name}_backward"
    built, grads, handles, host = _backward_trace(eqns, out_vars, grad_inputs, tctx, name, cut)
    fused = _saving(_per_row_values(built, _recomputed(built, eqns, materialized)), fused,
                    materialized, cctx)
    grad_of = {id(g): k for k, g in grads.items()}

    def lowered():
        return _lowered(_with_recomputation(built, eqns, materialized), grad_of,
                        {id(h) for h in handles.values()}, materialized,
                        dataclasses.replace(cctx, name=name, direction="backward"), lower)
    mark = _mark(cctx)
    traces, reads = lowered()
    kept = _recomputing_kernels(traces[-1], _recomputed(built, eqns, materialized))
    if kept:    # values a backward kernel of its own would recompute: the forward writes them
        _roll_back(cctx, mark)
        fused = _saving(kept, fused, materialized, cctx)
        traces, reads = lowered()
    saved, scalars, used_handles, read = reads
    used = {id(h) for h in used_handles}
    forward = _recording(fused, {id(o): h for e in eqns if id(e) in handles and
                                 id(h := handles[id(e)]) in used for o in e.outs if o is not None})
    forward = forward.replace(outputs=(tuple(out_vars), tuple(saved), tuple(scalars),
                                       tuple(used_handles)),
                              provenance="One backward for the whole trace: the forward keeps "
                                         "what it reads")
    plan = Plan(
        name=traced.name,
        grad_inputs=tuple(_paths(traced.inputs)[id(v)] for v in grad_inputs),
        non_differentiable=tuple(k for k, o in enumerate(out_vars) if isinstance(
            o, TensorProxy) and k not in reached),
        grads_read=tuple(grad_of[id(v)] for v in read),
        reaches=reaches,
        rebuild=_rebuilder(traced, out_index),
        backward=autocast.disabled(compile_trace(traces[-1])))     # its casts are in the trace
    return forward, traces, host, plan


def _refuse(eqns, fused: Trace, out_vars) -> None:
    """Raises Refused where one Function would not be sound or would gain nothing."""
    if not any(e.prim.kind == "fusion" for e in fused.eqns):
        raise Refused("nothing fused: eager autograd records the torch calls (double backward "
                      "included)")
    for e in eqns:
        if e.prim is prims.opaque and (not e.params["fn_name"].startswith("torch.")
                                       or "module_call" in e.params):
            raise Refused(f"it calls {e.params['fn_name']}, not a torch function (its closure "
                          "may hold tensors that need grad, which are not inputs)")
    kernels_write = {id(o) for e in fused.eqns if e.prim.kind == "fusion" for o in e.outs}
    _refuse_views(eqns, out_vars, kernels_write)


def _lowered(built: Trace, grad_of: dict, handle_ids: set, materialized: set, bctx, lower):
    """(the backward's traces through the passes and executors, each taking what the executed
    one reads, and those reads: (saved tensors, sizes, handles, output gradients))."""
    unknown = [v.name for v in free_vars(built) if isinstance(v, TensorProxy)
               and id(v) not in grad_of and id(v) not in materialized]
    if unknown:
        raise Refused(f"the backward reads {', '.join(unknown)}, which the forward does not keep")
    traces = lower(built, bctx)
    free = free_vars(traces[-1])
    saved = [v for v in free if isinstance(v, TensorProxy) and id(v) not in grad_of]
    lost = [v.name for v in saved if id(v) not in materialized]
    if lost:    # a pass of the backward's lowering reads a forward value no kernel writes
        raise Refused(f"the lowered backward reads {', '.join(lost)}, which the forward does "
                      "not keep")
    reads = (saved, [v for v in free if isinstance(v, ScalarProxy)],
             [v for v in free if id(v) in handle_ids], [v for v in free if id(v) in grad_of])
    inputs = tuple((v.name, v) for v in sum(reads, []))
    return [t.replace(inputs=inputs) for t in [built] + traces], reads


def _distinct(vs) -> list:
    seen, kept = set(), []
    for v in vs:
        if id(v) not in seen:
            seen.add(id(v))
            kept.append(v)
    return kept


def _outputs(traced: Trace):
    """(the output Vars the Function returns: the distinct ones that are not inputs, their
    positions by id)."""
    inputs = {id(v) for v in traced.input_vars()}
    out_vars = _distinct(v for v in iter_vars(traced.outputs) if id(v) not in inputs)
    return out_vars, {id(v): k for k, v in enumerate(out_vars)}


def _refuse_views(eqns, out_vars, kernels_write) -> None:
    """Refuses a trace returning a view (torch's, not a kernel's copy): eager lets one write
    through it in place afterwards, which autograd forbids on a view a custom Function
    returns."""
    producer = {id(o): e for e in eqns for o in e.outs if o is not None}
    for v in out_vars:
        e = producer.get(id(v))
        if e is None or not isinstance(v, TensorProxy):
            continue
        if e.prim.name in VIEW_PRIMS and id(v) not in kernels_write or (
                e.prim is prims.opaque and _returns_view(e)):
            raise Refused(f"it returns {v.name}, a view")


def _returns_view(eqn) -> bool:
    """Whether an opaque call returns a view of an argument or the argument itself (run on
    meta tensors)."""
    flat, spec = pytree.tree_flatten((eqn.args, eqn.params["kwargs"]))
    meta = [_to_meta(x) for x in flat]
    args, kwargs = pytree.tree_unflatten(meta, spec)
    try:
        result = eqn.params["fn"](*args, **kwargs)
    except Exception:     # noqa: BLE001  (it ran at tracing; assume the worst)
        return True
    results = result if isinstance(result, (tuple, list)) else (result,)
    return any(isinstance(r, torch.Tensor) and (r._base is not None or any(r is m for m in meta))
               for r in results)


def _paths(inputs) -> dict:
    """id(Var) -> its path into the trace's arguments."""
    found = {}

    def walk(value, path):
        if isinstance(value, dict):
            value = tuple(value.values())
        if isinstance(value, tuple):
            for i, item in enumerate(value):
                walk(item, path + (i,))
        elif isinstance(value, Var):
            found.setdefault(id(value), path)
    for i, (_, value) in enumerate(inputs):
        walk(value, (i,))
    return found


def _rebuilder(traced: Trace, out_index: dict):
    """(args, the Function's outputs) -> the trace's output structure (inputs returned as they
    are, as eager returns them)."""
    paths = _paths(traced.inputs)
    structure = traced.outputs

    def rebuild(args, outs):
        return map_vars(lambda v: outs[out_index[id(v)]] if id(v) in out_index
                        else _at(args, paths[id(v)]), structure)
    return rebuild


def _backward_trace(eqns, out_vars, grad_inputs, tctx, name, cut):
    """The gradients of `grad_inputs` from the outputs' gradients, by the grad rules and one
    PyTorch vector-Jacobian product per opaque call: (trace, {output position: its gradient's
    Var}, {id(opaque eqn): Handle}, host equations the rules added)."""
    start = len(tctx.eqns)
    memo = dict(tctx.scalar_results), dict(tctx.definitions)
    handles = {}
    try:
        with tracing(tctx):
            grads, cts = {}, {}
            for k, o in enumerate(out_vars):
                if isinstance(o, TensorProxy) and o.requires_grad:
                    grads[k] = cts[id(o)] = TensorProxy(tctx.new_name("t"), o.shape, o.dtype,
                                                        o.device)
            for e in reversed(eqns):
                out_cts = [None if o is None or id(o) in cut else cts.get(id(o))
                           for o in e.outs]
                if all(c is None for c in out_cts) or not any(
                        needs_grad(v) for v in e.input_vars()):
                    continue
                if e.prim is prims.opaque:
                    pairs = _opaque_vjp(e, out_cts, handles, tctx)
                else:
                    rule = GRAD_RULES.get(e.prim)
                    if rule is None:
                        raise Refused(f"{e.prim.name} has no grad rule")
                    pairs = rule(e, out_cts)
                for v, ct in pairs:
                    if needs_grad(v):
                        ct = ct if ct.dtype == v.dtype else emit(prims.convert_element_type, ct,
                                                                 dtype=v.dtype)
                        prev = cts.get(id(v))
                        cts[id(v)] = ct if prev is None else emit(prims.PRIMS["add"], prev, ct,
                                                                  like=v)
            outputs = tuple(cts.get(id(v)) for v in grad_inputs)
        added = tctx.eqns[start:]
    finally:
        del tctx.eqns[start:]
        tctx.scalar_results, tctx.definitions = memo
    trace = Trace(name, (), tuple(added), outputs,
                  "Backward of the whole trace, constructed from the grad rules")
    return trace, grads, handles, [e for e in added if e.prim.kind == "host"]


def _grad_positions(eqn) -> list:
    """Positions, among the flattened (args, kwargs) of an opaque call, of the tensors that
    need grad."""
    flat = pytree.tree_flatten((eqn.args, eqn.params["kwargs"]))[0]
    return [i for i, x in enumerate(flat) if needs_grad(x)]


def _opaque_vjp(eqn, out_cts, handles, tctx):
    fn_name = eqn.params["fn_name"]
    flat = pytree.tree_flatten((eqn.args, eqn.params["kwargs"]))[0]
    wrt = [flat[i] for i in _grad_positions(eqn)]
    tctx.counters.setdefault("h", 0)
    handle = handles.setdefault(id(eqn), Handle(tctx.new_name("h")))
    present = tuple(k for k, c in enumerate(out_cts) if c is not None)
    outs = [new_tensor(v.shape, v.dtype, v.device) for v in wrt]
    short = fn_name.rsplit(".", 1)[-1].strip("_")
    record(prims.opaque, (handle, *[out_cts[k] for k in present]),
           {"fn": functools.partial(_vjp, present), "fn_name": f"vjp_{short}_{handle.name}",
            "kwargs": {}, "sequence": True, "repeatable": True}, outs)
    return list(zip(wrt, outs))


def _vjp(present, node, *cts):
    """The gradients of an opaque call's inputs from its outputs' (those at `present`)."""
    pairs = [(node.outputs[k], c) for k, c in zip(present, cts)
             if node.outputs[k].requires_grad]     # an input returned as it is, included
    grads = torch.autograd.grad([o for o, _ in pairs], node.inputs, [c for _, c in pairs],
                                retain_graph=True, allow_unused=True) if pairs else \
        [None] * len(node.inputs)
    return [torch.zeros_like(x) if g is None else g for x, g in zip(node.inputs, grads)]


def _recording(fused: Trace, handles: dict) -> Trace:
    """The forward with each differentiated opaque call run with grad on detached inputs,
    keeping its autograd node as a second kind of output (`(t5, h0) = record_linear_h0(x, w)`).
    handles: id(an output of the call) -> its Handle."""
    eqns = []
    for e in fused.eqns:
        h = next((handles[id(o)] for o in e.outs if o is not None and id(o) in handles), None)
        if h is None or e.prim is not prims.opaque:
            eqns.append(e)
            continue
        short = e.params["fn_name"].rsplit(".", 1)[-1].strip("_")
        params = dict(e.params, fn=functools.partial(_record, e.params["fn"], _grad_positions(e)),
                      fn_name=f"record_{short}_{h.name}", sequence=True)
        eqns.append(e.replace(params=params, outs=(*e.outs, h)))
    return fused.replace(eqns=tuple(eqns))


def _record(fn, positions, *args, **kwargs):
    """fn(*args, **kwargs) run with grad on detached copies of the tensors at `positions`:
    (its results detached..., the Node that differentiates them)."""
    flat, spec = pytree.tree_flatten((args, kwargs))
    for i in positions:
        flat[i] = flat[i].detach().requires_grad_()
    args, kwargs = pytree.tree_unflatten(flat, spec)
    with torch.enable_grad():
        result = fn(*args, **kwargs)
    results = list(result) if isinstance(result, (tuple, list)) else [result]
    return (*[r.detach() for r in results], Node([flat[i] for i in positions], results))


def _recomputed(built: Trace, eqns, materialized) -> list:
    """The forward's equations the backward needs that the forward does not keep (values inside
    a fusion group), in trace order: recomputed from what it keeps."""
    producer = {id(o): e for e in eqns for o in e.outs if o is not None}
    needed: set = set()
    stack = [v for v in free_vars(built) if id(v) not in materialized and id(v) in producer]
    while stack:
        e = producer[id(stack.pop())]
        if id(e) in needed:
            continue
        needed.add(id(e))
        stack.extend(v for v in e.input_vars() if id(v) not in materialized and id(v) in producer)
    return [e for e in eqns if id(e) in needed]


def _numel(v) -> int:
    return math.prod(hint(s) for s in v.shape)


def _per_row_values(built: Trace, recomputed: list) -> set:
    """ids of the values to keep rather than recompute: the last values of reduced size
    computed from a reduction (`rsqrt(mean(x * x) + eps)`: one per row) before they are
    broadcast or combined with full-size values."""
    size: dict = {}     # id(value of reduced size computed from a reduction) -> that size
    for e in recomputed:
        if e.prim in prims.REDUCTIONS:
            bound = _numel(e.out)
        else:
            bound = min((size[id(v)] for v in e.input_vars() if id(v) in size), default=None)
            if bound is None:
                continue
        size.update((id(o), bound) for o in e.outs
                    if isinstance(o, TensorProxy) and _numel(o) <= bound)
    kept = set()
    for e in (*recomputed, *built.eqns):
        if not all(id(o) in size for o in e.outs if o is not None):
            kept.update(id(v) for v in e.input_vars() if id(v) in size)
    return kept


def _with_recomputation(built: Trace, eqns, materialized) -> Trace:
    """The backward with the forward's values it needs recomputed first."""
    return built.replace(eqns=tuple(_recomputed(built, eqns, materialized)) + built.eqns)


def _recomputing_kernels(executed: Trace, recomputed: list) -> set:
    """ids of the values computed by backward kernels that only recompute forward values (a
    residual sum `x + attn` that two groups of the backward read)."""
    forward = {id(o) for e in recomputed for o in e.outs if o is not None}
    return {id(o) for e in executed.eqns if e.prim.kind == "fusion"
            and all(id(o) in forward for b in e.params["body"] for o in b.outs if o is not None)
            for o in e.outs if o is not None}


def _mark(cctx):
    """What a lowering adds to the compile context (guards, executors' records) starts here."""
    return len(cctx.guards), {k: len(v) for k, v in cctx.extra.items() if isinstance(v, list)}


def _roll_back(cctx, mark) -> None:
    """Drops what a lowering added to the compile context after `mark`."""
    guards, lists = mark
    del cctx.guards[guards:]
    for key, n in lists.items():
        del cctx.extra[key][n:]


def _saving(wanted: set, fused: Trace, materialized: set, cctx) -> Trace:
    """The forward with the values of `wanted` that a fusion group computes written by its
    kernel too, where its executor can add an output (`with_outputs`); adds them to
    `materialized`."""
    if not wanted:
        return fused
    rebuilt = []
    for e in fused.eqns:
        extra = [o for b in e.params.get("body", ()) for o in b.outs
                 if o is not None and id(o) in wanted] if e.prim.kind == "fusion" else []
        with_outputs = getattr(e.executor, "with_outputs", None)
        if extra and with_outputs is not None:
            e = with_outputs(e, extra, cctx)
            materialized.update(id(o) for o in extra)
        rebuilt.append(e)
    return fused.replace(eqns=tuple(rebuilt))


def _non_differentiable(eqns) -> set:
    """ids of the outputs of torch calls that autograd does not differentiate although an
    input needs grad (`detach`, `argmax`), found by running each on meta tensors."""
    cut = set()
    for e in eqns:
        if e.prim is not prims.opaque or not any(needs_grad(v) for v in e.input_vars()):
            continue
        flat, spec = pytree.tree_flatten((e.args, e.params["kwargs"]))
        meta = [_to_meta(x).requires_grad_() if needs_grad(x) else _to_meta(x) for x in flat]
        args, kwargs = pytree.tree_unflatten(meta, spec)
        try:
            with torch.enable_grad():
                result = e.params["fn"](*args, **kwargs)
        except Exception:     # noqa: BLE001  (as differentiable as the tracer says)
            continue
        results = list(result) if isinstance(result, (tuple, list)) else [result]
        cut.update(id(o) for o, r in zip(e.outs, results)
                   if o is not None and isinstance(r, torch.Tensor) and not r.requires_grad)
    return cut


def _reaches(eqns, var, out_vars, cut) -> frozenset:
    """The output positions `var` is differentiable into: paths through values that need
    grad (a comparison, an int cast or a `detach` cuts them)."""
    reached = {id(var)}
    for e in eqns:
        if any(id(v) in reached for v in e.input_vars() if needs_grad(v)):
            reached.update(id(o) for o in e.outs if needs_grad(o) and id(o) not in cut)
    return frozenset(k for k, o in enumerate(out_vars) if id(o) in reached)


__all__ = ["differentiate", "build", "refusal", "enabled", "Plan", "Refused", "Handle"]
