"""Recording into the active trace: the primitives the tracer and every op family's torch
mapping build traces with.

`bind` records a prim and makes its output proxies (their metadata from the prim's meta);
`opaque` records a torch call the tracer does not model (its outputs' metadata from a run on
meta tensors, symbolic shapes from its rule in `ir.ops.opaque`); the arithmetic and comparisons
of sizes and numbers (`scalar_op`, `compare`) fold what they can, record host prims
(`ir.ops.host`) for the rest and guard what tracing decided. The active trace is the
`TraceContext` of `ir.tracing`, reached through `ir.proxies.active_trace`.
"""
from __future__ import annotations

import contextlib
import logging
import linecache
import os
import sys

import torch
from torch.utils import _pytree as pytree

from ir.grad_regions import output_requires_grad
from ir.ops.host import SCALAR_OPS, SCALAR_UNARY
from ir.ops.opaque import opaque_p
from ir.ops.registry import PRIMS, output_shapes
from ir.proxies import (ACTIVE_TRACE, COMPARISONS, NEGATED, FloatProxy, IntProxy, ScalarProxy,
                        TensorProxy, Var, active_trace, hint)
from ir.trace import Eqn

current = active_trace
_IR_DIR = os.path.dirname(os.path.abspath(__file__))
_SKIPPED = (_IR_DIR, os.path.dirname(os.path.abspath(torch.__file__)),
            os.path.dirname(os.path.abspath(contextlib.__file__)) + os.sep + "contextlib")


def user_line() -> str:
    """`file:line: source` of the innermost frame outside ir, torch and the standard library's
    contextlib: the user's code being traced."""
    frame = sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_SKIPPED):
        frame = frame.f_back
    if frame is None:
        return "unknown"
    path, line = frame.f_code.co_filename, frame.f_lineno
    source = linecache.getline(path, line).strip()
    return f"{os.path.basename(path)}:{line}" + (f": {source}" if source else "")


def new_tensor(shape, dtype, device, requires_grad=False) -> TensorProxy:
    """A traced tensor of `shape`; a runtime size of 0 or 1 in it (an int argument that a view
    or a factory makes a size) is specialized, guarded, as an input's is: broadcasting depends
    on it."""
    shape = [s.__index__() if isinstance(s, IntProxy) and s.hint < 2 else canonical(s)
             for s in shape]
    return TensorProxy(current().new_name("t"), shape, dtype, device,
                       requires_grad and dtype.is_floating_point)


def _needs_grad(args) -> bool:
    """Whether an output computed from `args` now requires grad, as autograd would say (for a
    float output): grad mode is on (`ir.grad_regions`) and an input requires grad."""
    return output_requires_grad(pytree.tree_flatten(args)[0])


def canonical(x):
    """The representative of x among the sizes that guards made equal (an int where one is)."""
    ctx = ACTIVE_TRACE.get()
    return x if ctx is None else ctx.canonical(x)


def new_int(value: int) -> IntProxy:
    return IntProxy(current().new_name("i"), value)


def new_scalar(value) -> ScalarProxy:
    """An IntProxy or a FloatProxy holding `value` as its hint."""
    if isinstance(value, int):
        return new_int(int(value))
    if isinstance(value, float):
        return FloatProxy(current().new_name("f"), value)
    raise TypeError(f"ir.jit: a traced size computation gave {type(value).__name__} {value!r}; "
                    "only int and float results are supported")


def bind(prim, *args, **params):
    """Records `prim(*args, **params)` and returns its output proxy (or proxies)."""
    metas = prim.meta(*args, **params)
    grad = _needs_grad(args)
    outs = tuple(new_tensor(*m, requires_grad=grad) for m in metas)
    current().eqns.append(Eqn(prim, args, params, outs))
    return outs[0] if len(outs) == 1 else outs


def record(prim, args, params, outs):
    current().eqns.append(Eqn(prim, tuple(args), params, tuple(outs)))


# ---- integer arithmetic and specialization ---------------------------------------------------

_IDENTITIES = {"add": (0, 0), "sub": (None, 0), "mul": (1, 1), "floordiv": (None, 1)}


def _identity(x):
    return ("var", id(x)) if isinstance(x, ScalarProxy) else (type(x).__name__, x)


def _undo(op: str, a, b, definitions):
    """(x - y) + y -> x, y + (x - y) -> x, (x + y) - y -> x, (x + y) - x -> y; else None."""
    if op == "add":
        for x, y in ((a, b), (b, a)):
            d = definitions.get(id(x))
            if d is not None and d[0] == "sub" and d[2] is y:
                return d[1]
    if op == "sub":
        d = definitions.get(id(a))
        if d is not None and d[0] == "add":
            if d[2] is b:
                return d[1]
            if d[1] is b:
                return d[2]
    return None


def scalar_op(op: str, a, b):
    """a <op> b on numbers or ScalarProxies, as Python computes it: folds constants, integer
    identities and repeats, else records a host prim whose output is an IntProxy or a FloatProxy
    as the result on the hints is an int or a float (`i0 * 0.5`, `i0 ** -1` are floats)."""
    if not isinstance(a, _NUMBERS) or not isinstance(b, _NUMBERS):
        return NotImplemented
    a, b = canonical(a), canonical(b)
    fn = SCALAR_OPS[op][1]
    if op in ("truediv", "floordiv", "mod") and isinstance(b, ScalarProxy):
        compare("ne", b, 0)     # the value is defined: the prologue checks this before it
    if op == "pow" and isinstance(b, IntProxy):
        compare("ge", b, 0)     # int ** int is an int exactly when the exponent is >= 0
    if not isinstance(a, ScalarProxy) and not isinstance(b, ScalarProxy):
        return fn(a, b)
    ctx = current()
    if all(isinstance(x, (int, IntProxy)) for x in (a, b)):
        folded = _fold_int(op, a, b, ctx)
        if folded is not None:
            return folded
    key = (op, _identity(a), _identity(b))
    if key in ctx.scalar_results:
        return ctx.scalar_results[key]
    out = new_scalar(fn(hint(a), hint(b)))
    record(PRIMS["scalar_" + op], (a, b), {}, (out,))
    if isinstance(out, IntProxy):
        ctx.definitions[id(out)] = (op, a, b)
    ctx.scalar_results[key] = out
    return out


_NUMBERS = (int, float, ScalarProxy)


def _fold_int(op: str, a, b, ctx):
    """a <op> b on ints and IntProxies without a new prim (x + 0, x * 1, x - x, (x - y) + y,
    ...), or None."""
    left_id, right_id = _IDENTITIES.get(op, (None, None))
    if right_id is not None and not isinstance(b, IntProxy) and b == right_id:
        return a
    if left_id is not None and not isinstance(a, IntProxy) and a == left_id:
        return b
    if op == "mul" and any(not isinstance(x, IntProxy) and x == 0 for x in (a, b)):
        return 0
    if op == "sub" and a is b:
        return 0
    return _undo(op, a, b, ctx.definitions)


def scalar_unary(op: str, a):
    """<op> a (neg, abs, invert, floor, ceil, trunc, round) on a ScalarProxy: a host prim."""
    a = canonical(a)
    if not isinstance(a, ScalarProxy):
        return SCALAR_UNARY[op][1](a)
    if op == "neg" and isinstance(a, IntProxy):
        return scalar_op("sub", 0, a)       # so that (0 - x) folds as subtractions do
    ctx = current()
    key = (op, _identity(a))
    if key not in ctx.scalar_results:
        out = new_scalar(SCALAR_UNARY[op][1](a.hint))
        record(PRIMS["scalar_" + op], (a,), {}, (out,))
        ctx.scalar_results[key] = out
    return ctx.scalar_results[key]


def compare(op: str, a, b) -> bool:
    """Answers a comparison from the hints and guards the answer, so the trace stays valid."""
    a, b = canonical(a), canonical(b)
    result = COMPARISONS[op](hint(a), hint(b))
    if a is b or not (isinstance(a, ScalarProxy) or isinstance(b, ScalarProxy)):
        return result
    ctx = current()
    nan = next((x for x in (a, b) if isinstance(x, FloatProxy) and x.hint != x.hint), None)
    if nan is not None:     # NaN compares false, so no guard can spell the negation: pin it
        ctx.add_guard(("ne", nan, nan))
        ctx.specialized(nan, nan.hint)
        return result
    guard = op if result else NEGATED[op]
    if guard == "eq" and any(isinstance(x, FloatProxy) for x in (a, b)):
        pinned = [x for x in (a, b) if not isinstance(x, ScalarProxy)]
        if pinned:          # a float forced to its value
            ctx.specialized(a if isinstance(a, FloatProxy) else b, pinned[0])
    if guard == "eq" and all(type(x) is int or isinstance(x, IntProxy) for x in (a, b)):
        # from now on the two are one size: the int, or the one the trace defines first (so
        # every use of the pair comes after its definition); else the right one
        if isinstance(a, IntProxy) and (not isinstance(b, IntProxy)
                                        or _definition(ctx, b) <= _definition(ctx, a)):
            ctx.aliases[id(a)] = b
        else:
            ctx.aliases[id(b)] = a
        if not isinstance(a, IntProxy) or not isinstance(b, IntProxy):
            ctx.specialized(*((a, b) if isinstance(a, IntProxy) else (b, a)))
    if not isinstance(a, ScalarProxy) or (isinstance(b, ScalarProxy) and b.name < a.name):
        a, b, guard = b, a, FLIPPED[guard]      # one spelling per guard: a proxy on the left
    if _implied(ctx, guard, a, b):
        return result
    ctx.add_guard((guard, a, b))
    if guard in ("ge", "gt") and isinstance(a, IntProxy) and type(b) is int:
        ctx.lower_bounds[id(a)] = max(ctx.lower_bounds.get(id(a), b), b + (guard == "gt"))
    return result


def _definition(ctx, size: IntProxy) -> int:
    """The position in the trace of the equation defining size (-1: an input, defined first)."""
    return next((i for i, eqn in enumerate(ctx.eqns) if any(o is size for o in eqn.outs)), -1)


def guard_key(guard) -> tuple:
    """A hashable key of an (op, a, b) guard by the identity of its values: a guard holding
    proxies must never be compared with ==, which would record a new guard."""
    op, a, b = guard
    return (op,) + tuple(("var", id(x)) if isinstance(x, Var) else ("value", repr(x))
                         for x in (a, b))


FLIPPED = {"lt": "gt", "gt": "lt", "le": "ge", "ge": "le", "eq": "eq", "ne": "ne"}


def _lower_bound(ctx, x):
    """A lower bound of x that the recorded guards imply, or None: an int is its own; a proxy has
    its guarded bound, or one derived through its definition (sums, products and floor divisions
    of non-negative values)."""
    if not isinstance(x, ScalarProxy):
        return x
    if id(x) in ctx.lower_bounds:
        return ctx.lower_bounds[id(x)]
    op, a, b = ctx.definitions.get(id(x), (None, None, None))
    if op not in ("add", "mul", "floordiv"):
        return None
    low_a, low_b = _lower_bound(ctx, a), _lower_bound(ctx, b)
    if low_a is None or low_b is None or low_a < 0 or low_b < 0:
        return None
    if op == "floordiv":    # a // b >= low_a // b for a constant b; only >= 0 for a runtime b
        if low_b <= 0:
            return None
        return 0 if isinstance(b, IntProxy) else low_a // b
    return low_a + low_b if op == "add" else low_a * low_b


def _implied(ctx, op, a, b) -> bool:
    """Whether the guards already recorded imply `a op b`: the same guard, a lower bound of a,
    or a = b // c with b >= 0 and c >= 1 (then a <= b)."""
    if guard_key((op, a, b)) in ctx.guards:
        return True
    if op == "le" and isinstance(b, IntProxy):
        definition = ctx.definitions.get(id(a))
        if (definition and definition[0] == "floordiv" and definition[1] is b
                and not isinstance(definition[2], IntProxy) and definition[2] >= 1):
            low = _lower_bound(ctx, b)
            return low is not None and low >= 0
    if isinstance(b, ScalarProxy):
        return False
    low = _lower_bound(ctx, a)
    if low is None:
        return False
    return (op == "ge" and low >= b) or (op == "gt" and low > b) or (op == "ne" and low > b)


def specialize(x):
    """The concrete value of x, guarded: IntProxies become ints, FloatProxies floats."""
    if isinstance(x, IntProxy):
        return x.__index__()
    return x.__float__() if isinstance(x, FloatProxy) else x


def _stand_in(x, device: str):
    """x with empty tensors on `device` for proxies and hints for sizes, inside tuples, lists and
    slices."""
    if isinstance(x, TensorProxy):
        return torch.empty([hint(s) for s in x.shape], dtype=x.dtype, device=device)
    if isinstance(x, ScalarProxy):
        return x.hint
    if isinstance(x, (tuple, list)):
        return type(x)(_stand_in(i, device) for i in x)
    if isinstance(x, slice):
        return slice(*(_stand_in(i, device) for i in (x.start, x.stop, x.step)))
    return x


# ---- opaque symbols ----------------------------------------------------------------------

def _to_meta(x):
    """x for a run on meta tensors: sizes and numbers at their values in this call, unguarded;
    a tensor requiring grad requires it, so the result's `requires_grad` is autograd's."""
    if isinstance(x, TensorProxy):
        meta = torch.empty([hint(s) for s in x.shape], dtype=x.dtype, device="meta")
        return meta.requires_grad_() if x.requires_grad else meta
    if isinstance(x, ScalarProxy):
        return x.hint
    if isinstance(x, torch.device):
        return torch.device("meta")
    return x


def _opaque_name(fn) -> str:
    name = getattr(fn, "__name__", "fn")
    for prefix, space in (("torch", torch), ("torch.Tensor", torch.Tensor),
                          ("torch.nn.functional", torch.nn.functional)):
        if getattr(space, name, None) is fn:
            return f"{prefix}.{name}"
    return f"opaque_{name}"


NO_RULE = "no symbolic shape rule"


def opaque(fn, args, kwargs):
    """Records a torch function the tracer does not model; torch runs it at call time. It runs
    on meta tensors here (the sizes at their values in this call), which raises eager's errors
    and gives the outputs' dtypes. In symbolic mode the outputs' shapes come from the op's shape
    rule (`ir.ops.opaque`), as size expressions; an op without one specializes every size of its
    tensor arguments, each recorded as caused by the op having no rule. Where meta refuses the
    call, it is repeated on empty CPU tensors, which raises eager's own exception."""
    name = getattr(fn, "__name__", repr(fn))
    if name.endswith("_") and not name.endswith("__"):
        raise NotImplementedError(f"in-place torch function {name} is not supported by ir.jit")
    flat, spec = pytree.tree_flatten((args, kwargs))
    devices = [x.device for x in flat if isinstance(x, TensorProxy)]
    devices += [torch.device(x) for x in flat if isinstance(x, torch.device)]
    meta_args, meta_kwargs = pytree.tree_unflatten([_to_meta(x) for x in flat], spec)
    try:
        result = fn(*meta_args, **meta_kwargs)
    except Exception as e:      # noqa: BLE001  (eager decides what is raised)
        if not isinstance(e, NotImplementedError):
            fn(*_stand_in(args, "cpu"), **{k: _stand_in(v, "cpu") for k, v in kwargs.items()})
        raise NotImplementedError(        # meta refuses what eager accepts
            f"ir.jit cannot trace {name}: running it on meta tensors failed ({e})") from e
    results = list(result) if isinstance(result, (tuple, list)) else [result]
    if not all(isinstance(r, torch.Tensor) for r in results):
        raise NotImplementedError(
            f"ir.jit cannot trace {name}: it returns {type(result).__name__}, not tensors")
    shapes = _symbolic_shapes(fn, args, kwargs, results) if current().symbolic else None
    if shapes is None:
        shapes = [r.shape for r in results]
        with current().op(f"{_opaque_name(fn)} ({NO_RULE})"):
            for x in flat:
                if isinstance(x, TensorProxy):
                    for s in x.shape:
                        specialize(s)
                elif isinstance(x, IntProxy):
                    specialize(x)
    device = devices[0] if devices else torch.device("cpu")
    grad = _needs_grad(flat)
    # each output as autograd marks it: not where the op is not tracked (`detach`, `zeros_like`)
    outs = [new_tensor(shape, r.dtype, device, grad and r.requires_grad)
            for r, shape in zip(results, shapes)]
    # ints the rule left symbolic (a size in `normalized_shape`, `roll`'s shifts) are passed at
    # run time; floats are specialized (eager's kernels may round them by value)
    args = pytree.tree_unflatten([canonical(x) if isinstance(x, IntProxy) else specialize(x)
                                  for x in flat], spec)
    record(opaque_p, args[0], {"fn": fn, "fn_name": _opaque_name(fn), "kwargs": args[1],
                                   "sequence": isinstance(result, (tuple, list))}, outs)
    if isinstance(result, (tuple, list)):
        return list(outs) if isinstance(result, list) else type(result)(outs)
    return outs[0]


def _symbolic_shapes(fn, args, kwargs, results):
    """The outputs' shapes by fn's shape rule, or None where it has none (or one that disagrees
    with the meta run, a defect in the rule: logged, and the sizes are specialized)."""
    shapes = output_shapes(fn, args, kwargs)
    if shapes is None:
        return None
    shapes = [tuple(canonical(s) for s in shape) for shape in shapes]
    if [[hint(s) for s in shape] for shape in shapes] != [list(r.shape) for r in results]:
        logging.getLogger("ir.recompiles").warning(
            "the shape rule of %s gave %s where torch gives %s; its sizes are specialized",
            _opaque_name(fn), [tuple(hint(s) for s in shape) for shape in shapes],
            [tuple(r.shape) for r in results])
        return None
    return shapes
