"""Training: a differentiable unit per fusion group, where one backward for the whole trace
(`ir.whole_backward`) is not used (it says why).

In grad mode, each fusion call whose inputs need grad (`t3 = rope_fusion_0(x, cos, sin)`) becomes
a call of a `DifferentiableUnit`, a `torch.autograd.Function` whose forward runs the fused kernel
and whose backward runs a backward trace. The backward trace is built from the grad rules
(`ir.ops.registry.GRAD_RULES`) over the group's prims, reading the group's outputs where the rules
read them (a sigmoid's, tanh's or exp's output, as eager's formulas save it) and recomputing
everything else from the group's inputs, then run through the same passes and executors as a
forward trace: the Triton executor fuses it, and the vectorization analysis gives its accesses
their width. Only the inputs and outputs that trace reads are saved (never an intermediate: fp32
values are recomputed in the backward kernel), and only inputs that need grad get a gradient.
Everything outside fusion groups runs on torch, which records its backward as eager does.

Limits: double backward (`create_graph=True`) through a unit raises a clear error.
"""
from __future__ import annotations

import dataclasses

import torch

from ir import autocast
from ir.executors import CompileContext, Executor, compile_trace
from ir.ops.registry import GRAD_RULES
from ir.ops.vjp import emit, needs_grad
from ir.prims import PRIMS, Prim, convert_element_type
from ir.proxies import ScalarProxy, TensorProxy
from ir.trace import Eqn, Trace, free_vars, render, render_eqn
from ir.tracing import TraceContext, tracing
from ir.transforms import per_sample


class DoubleBackwardError(RuntimeError):
    pass


@dataclasses.dataclass
class DifferentiableUnit:
    """One fusion group (or several, see `differentiate`) made differentiable. Called with the
    fusion call's arguments followed by the sizes its backward needs that they lack."""

    name: str
    launch: object              # the fusion call's own function (the forward kernel's launcher)
    arity: int                  # how many of the arguments the launcher takes
    sizes: tuple                # argument positions of the sizes the backward reads
    backward: object            # the compiled backward trace
    saved: tuple                # argument positions saved for the backward
    saved_outputs: tuple        # output positions saved for the backward (after the arguments)
    grads_read: tuple           # output positions whose gradients the backward reads
    grad_inputs: tuple          # argument positions that get a gradient, in backward output order
    reaches: tuple              # per grad input: the output positions it is differentiable into
    non_differentiable: tuple   # output positions autograd must not differentiate
    n_args: int

    def __call__(self, *args):
        return _UnitFunction.apply(self, *args)


def refuse_double_backward(what: str) -> None:
    """Raises DoubleBackwardError when a fused backward runs with grad enabled (create_graph)."""
    if torch.is_grad_enabled():
        raise DoubleBackwardError(
            f"ir.jit: double backward (create_graph=True) through {what} is not supported; "
            "differentiate a function jitted with executors=['torch'] for higher-order "
            "gradients")


def grads_read(ctx, grads, present: set, positions) -> list:
    """The output gradients a fused backward reads, at `positions`: zeros (of the output's shape,
    dtype and device, recorded in `ctx.outputs`) where autograd computed none."""
    return [grads[k] if k in present else torch.zeros(
        ctx.outputs[k][0], dtype=ctx.outputs[k][1], device=ctx.outputs[k][2])
        for k in positions]


class _UnitFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, unit, *args):
        outs = unit.launch(*args[:unit.arity])
        flat = outs if isinstance(outs, tuple) else (outs,)
        ctx.unit = unit
        ctx.save_for_backward(*[args[i] for i in unit.saved],
                              *[flat[k] for k in unit.saved_outputs])
        ctx.sizes = [args[i] for i in unit.sizes]
        ctx.outputs = [(o.shape, o.dtype, o.device) for o in flat]
        if unit.non_differentiable:
            ctx.mark_non_differentiable(*[flat[k] for k in unit.non_differentiable])
        # an output autograd computed no gradient for arrives as None: as in eager, an input
        # that only such outputs depend on gets None, not zeros
        ctx.set_materialize_grads(False)
        return outs

    @staticmethod
    def backward(ctx, *grads):
        unit = ctx.unit
        refuse_double_backward(f"the fused group {unit.name}")
        present = {k for k, g in enumerate(grads) if g is not None}
        out = [None] * unit.n_args
        if not present:
            return (None, *out)
        read = grads_read(ctx, grads, present, unit.grads_read)
        results = per_sample(unit.backward, *ctx.saved_tensors, *read, *ctx.sizes)
        for position, reaches, g in zip(unit.grad_inputs, unit.reaches, results):
            out[position] = g if present & reaches else None
        return (None, *out)


class UnitPrim(Prim):
    """The prim of a differentiable unit's call in a trace."""


class AutogradExecutor(Executor):
    """Runs the differentiable units made of one fusion executor's calls (it claims nothing
    itself: `differentiate` places them); named `<executor>+autograd`."""

    def __init__(self, fusion_executor):
        self.name = f"{fusion_executor.name}+autograd"
        self.fusion_executor = fusion_executor

    def render(self, eqn):
        args = ", ".join(render(a) for a in eqn.args)
        body = [line for e in eqn.params["body"] for line in render_eqn(e)]
        info = eqn.params["backward_info"]
        return f"{eqn.prim.name}({args})", body + [info]

    def namespace(self, eqn):
        return {eqn.prim.name: eqn.params["unit"]}


_autograd_executors: dict = {}


def autograd_executor(fusion_executor) -> AutogradExecutor:
    if fusion_executor not in _autograd_executors:
        _autograd_executors[fusion_executor] = AutogradExecutor(fusion_executor)
    return _autograd_executors[fusion_executor]


def differentiate(trace: Trace, tctx: TraceContext, cctx: CompileContext, lower):
    """Replaces the fusion calls whose inputs need grad by differentiable units: one per call,
    or one for consecutive calls (only host work between them) that share an input needing grad
    or read each other's outputs, so that their backward is one trace (the two gradients of a
    fused qkv tensor, from q's and k's kernels, are summed in one backward kernel).

    lower(trace, cctx) -> the traces of the passes and executors (the last is what runs).
    Returns (trace, {unit name: backward traces}, host equations the backward traces added,
    which guards may need)."""
    backward_traces, host = {}, []
    eqns, run = [], []

    def flush():
        if run:
            eqn, traces, added = _unit(*_joined(run), tctx, cctx, lower)
            backward_traces[eqn.prim.name] = traces
            host.extend(added)
            eqns.append(eqn)
            run.clear()

    for eqn in trace.eqns:
        if _differentiable(eqn):
            if run and not _related(run, eqn):
                flush()
            run.append(eqn)
        elif run and eqn.prim.kind == "host" and not _reads_outputs(eqn, run):
            eqns.append(eqn)        # host work between joined calls goes before the unit
        else:
            flush()
            eqns.append(eqn)
    flush()
    if not backward_traces:
        return trace, {}, []
    return (trace.replace(eqns=tuple(eqns), provenance="Differentiable units"),
            backward_traces, host)


def _differentiable(eqn) -> bool:
    return (eqn.prim.kind == "fusion" and any(needs_grad(a) for a in eqn.args)
            and any(o is not None and o.requires_grad for o in eqn.outs))


def _reads_outputs(eqn, run) -> bool:
    produced = {id(o) for e in run for o in e.outs if o is not None}
    return any(id(v) in produced for v in eqn.input_vars())


def _related(run, eqn) -> bool:
    """Whether eqn shares an input that needs grad with the calls of run, or reads their
    outputs."""
    shared = {id(a) for e in run for a in e.args if needs_grad(a)}
    return _reads_outputs(eqn, run) or any(id(a) in shared for a in eqn.args)


def _joined(run):
    """(a fusion call standing for the calls of run, the function that launches them)."""
    if len(run) == 1:
        return run[0], run[0].executor.namespace(run[0])[run[0].prim.name]
    produced = {id(o) for e in run for o in e.outs if o is not None}
    args, seen = [], set()
    for e in run:
        for a in e.args:
            if id(a) not in produced and id(a) not in seen:
                seen.add(id(a))
                args.append(a)
    name = f"{run[0].prim.name}_to_{run[-1].prim.name.rsplit('_', 1)[-1]}"
    eqn = Eqn(Prim(name, "fusion", None, None), tuple(args),
              {"body": _distinct(b for e in run for b in e.params["body"]),
               "kernel": ", ".join(str(e.params.get("kernel")) for e in run)},
              tuple(o for e in run for o in e.outs), executor=run[0].executor)
    return eqn, _sequence(run, args)


def _distinct(eqns) -> tuple:
    """The equations once each: a view both groups recompute (`t0 = reshape(x0)` in each) is
    one equation of the joint backward, so its input's gradient is not counted twice."""
    seen, kept = set(), []
    for e in eqns:
        key = tuple(id(o) for o in e.outs)
        if key not in seen:
            seen.add(key)
            kept.append(e)
    return tuple(kept)


def _sequence(run, args):
    """A function of the joined call's arguments that launches each call of run in order and
    returns all their outputs."""
    position = {id(a): i for i, a in enumerate(args)}
    produced, calls, count = {}, [], 0
    for e in run:
        sources = [(True, position[id(a)]) if id(a) in position else (False, produced[id(a)])
                   for a in e.args]
        for j, o in enumerate(e.outs):
            produced[id(o)] = count + j
        count += len(e.outs)
        calls.append((e.executor.namespace(e)[e.prim.name], sources, len(e.outs)))

    def launch(*values):
        results = []
        for fn, sources, n in calls:
            out = fn(*[values[i] if is_arg else results[i] for is_arg, i in sources])
            results.extend(out if n > 1 else (out,))
        return tuple(results)
    return launch


def _unit(eqn, launch, tctx, cctx, lower):
    name = eqn.prim.name
    built, grads, grad_inputs, added = _backward_trace(eqn, tctx, f"{name}_backward")
    bctx = dataclasses.replace(cctx, name=f"{cctx.name}_backward", direction="backward")
    traces = lower(built, bctx)
    executed = traces[-1]
    free = free_vars(executed)
    primals = {id(a): i for i, a in enumerate(eqn.args) if isinstance(a, TensorProxy)}
    results = {id(o): k for k, o in enumerate(eqn.outs) if o is not None}
    grad_of = {id(g): k for k, g in grads.items()}
    saved = [v for v in free if id(v) in primals]
    saved_outputs = [v for v in free if id(v) in results and id(v) not in primals]
    read = [v for v in free if id(v) in grad_of]
    sizes = [v for v in free if isinstance(v, ScalarProxy)]    # sizes and float arguments
    unknown = [v for v in free if id(v) not in primals and id(v) not in results
               and id(v) not in grad_of and not isinstance(v, ScalarProxy)]
    assert not unknown, f"backward of {name} reads {unknown}"
    inputs = tuple((v.name, v) for v in saved + saved_outputs + read + sizes)
    traces = [t.replace(inputs=inputs) for t in [built] + traces]
    backward = autocast.disabled(compile_trace(traces[-1]))     # its casts are in the trace
    args = tuple(eqn.args) + tuple(v for v in sizes if all(v is not a for a in eqn.args))
    unit = DifferentiableUnit(
        name, launch, len(eqn.args), tuple(next(i for i, a in enumerate(args) if a is v)
                                           for v in sizes), backward,
        tuple(primals[id(v)] for v in saved), tuple(results[id(v)] for v in saved_outputs),
        tuple(grad_of[id(v)] for v in read),
        tuple(grad_inputs), tuple(_reaches(eqn, i) for i in grad_inputs),
        tuple(k for k, o in enumerate(eqn.outs) if o is not None and not o.requires_grad),
        len(args))
    wrt = ", ".join(eqn.args[i].name for i in grad_inputs)
    info = (f"backward: {traces[-1].name}({', '.join(n for n, _ in inputs)}) -> grads of {wrt}; "
            f"saves {', '.join(v.name for v in saved + saved_outputs) or 'nothing'}")
    new = Eqn(UnitPrim(name, "unit", None, None), args,
              {"body": eqn.params["body"], "unit": unit, "backward_info": info,
               "kernel": eqn.params.get("kernel")}, eqn.outs,
              executor=autograd_executor(eqn.executor))
    return new, traces, added


def _backward_trace(eqn, tctx, name):
    """The group's prims that compute intermediates (recomputed) followed by their gradients
    from the rules: a trace from (group inputs, group outputs, output gradients) to the gradients
    of the inputs that need grad. A group output the rules read is read as the forward made it,
    as eager's formulas read a saved result (a sigmoid's, tanh's, exp's), not recomputed."""
    body = list(eqn.params["body"])
    results = {id(o) for o in eqn.outs if o is not None}
    recomputed = [e for e in body if not all(o is None or id(o) in results for o in e.outs)]
    start = len(tctx.eqns)
    memo = dict(tctx.scalar_results), dict(tctx.definitions)
    try:
        with tracing(tctx):
            grads, cts = {}, {}
            for k, o in enumerate(eqn.outs):
                if o is not None and o.requires_grad:
                    g = TensorProxy(tctx.new_name("t"), o.shape, o.dtype, o.device)
                    grads[k] = cts[id(o)] = g
            for e in reversed(body):
                out_cts = [None if o is None else cts.get(id(o)) for o in e.outs]
                if all(c is None for c in out_cts) or not any(
                        needs_grad(v) for v in e.input_vars()):
                    continue
                rule = GRAD_RULES.get(e.prim)
                if rule is None:
                    raise NotImplementedError(f"no grad rule for {e.prim.name}")
                for v, ct in rule(e, out_cts):
                    if needs_grad(v):
                        ct = ct if ct.dtype == v.dtype else emit(convert_element_type, ct,
                                                                 dtype=v.dtype)
                        prev = cts.get(id(v))
                        cts[id(v)] = ct if prev is None else emit(PRIMS["add"], prev, ct, like=v)
            grad_inputs = [i for i, a in enumerate(eqn.args) if needs_grad(a)]
            outputs = tuple(cts.get(id(eqn.args[i])) for i in grad_inputs)
        added = tctx.eqns[start:]
    finally:
        del tctx.eqns[start:]
        tctx.scalar_results, tctx.definitions = memo
    trace = Trace(name, (), tuple(recomputed + added), outputs,
                  "Backward constructed from the grad rules")
    return trace, grads, grad_inputs, [e for e in added if e.prim.kind == "host"]


def _reaches(eqn, position) -> frozenset:
    """The output positions of a fusion call that its argument at `position` is differentiable
    into: paths through values that need grad (a comparison or an int cast cuts them)."""
    reached = {id(eqn.args[position])}
    for e in eqn.params["body"]:
        if any(id(v) in reached for v in e.input_vars() if needs_grad(v)):
            reached.update(id(o) for o in e.outs if o is not None and o.requires_grad)
    return frozenset(k for k, o in enumerate(eqn.outs) if o is not None and id(o) in reached)


__all__ = ["differentiate", "DifferentiableUnit", "DoubleBackwardError"]
