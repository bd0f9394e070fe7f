"""Random small PyTorch programs and their inputs, for testing executors against eager PyTorch.

`programs()` is a hypothesis strategy. Each example is a `Program`: a real Python function
(generated source, so tracing through `__torch_function__` sees ordinary torch calls), the
example inputs it was built on (some non-contiguous, with storage offsets, surrounded by NaN
or sentinel padding so that an out-of-bounds read shows), and `describe()` for `hypothesis.note`.

The program is built step by step on a pool of values. Each op is one entry of `OPS`: a builder
that picks operands where shapes and dtypes make it valid and renders one Python expression.
Every step is run eagerly while generating, so the pool always knows real shapes and dtypes.
Two static facts travel with each value, independent of the concrete inputs:
  - `mag`, a bound on |value|, kept <= MAX_MAG so that nothing overflows to inf or NaN and
    low-precision rounding stays within `assert_close`'s tolerances;
  - `exact`, whether every correct executor must produce it bit for bit (data movement, casts,
    integer ops, and float `+ - * /`, each rounded to its dtype as eager rounds it; not `sqrt`
    (eager's CPU fp32 sqrt is not correctly rounded) nor the transcendental functions); only
    exact floats may be cast to int or bool or compared into a bool.
"""

from __future__ import annotations

import contextlib
import itertools
import linecache
import math
from collections.abc import Callable, Collection
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from hypothesis import strategies as st

MAX_MAG = 8.0  # bound on |value| of every generated value
MAX_NUMEL = 2048  # bound on the element count of every generated value
MAX_RANK = 4
FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
INPUT_DTYPES = FLOAT_DTYPES + (torch.int32, torch.bool)
NARROW_INTS = (torch.int8, torch.uint8, torch.int16)
ALL_INPUT_DTYPES = INPUT_DTYPES + NARROW_INTS  # programs(input_dtypes=...) for integer programs
DTYPE_NAMES = {dtype: str(dtype) for dtype in ALL_INPUT_DTYPES}
# Constants that comparisons meet: not representable in fp16/bf16 (eager rounds them first),
# rounding ties of bf16 around 0.5, signed zero, ints.
COMPARE_CONSTANTS = (0.1, -0.3, 0.5 + 2**-9, 0.5 + 2**-8, 1 / 3, -0.0, 0.0, 1, -2, 3)
INPUT_MAG = {"float": 2.0, "int": 4.0, "bool": 1.0}
FLOAT_SCALARS = (0.5, 1.5, -0.75, 2.0, -2.5, 0.25)  # exact in fp16 and bf16
INT_SCALARS = (1, 2, 3, -1, -2)
SOURCE_GLOBALS = {"torch": torch, "F": F}


def kind(dtype: torch.dtype) -> str:
    if dtype == torch.bool:
        return "bool"
    return "float" if dtype.is_floating_point else "int"


@dataclass
class Value:
    """One tensor of the pool: its name in the source, its example value and static facts."""

    name: str
    tensor: torch.Tensor
    mag: float
    exact: bool
    rounding: torch.dtype  # the loosest float dtype that arithmetic on the way rounded to

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.tensor.shape)

    @property
    def rank(self) -> int:
        return self.tensor.dim()

    @property
    def kind(self) -> str:
        return kind(self.tensor.dtype)


class Pool(list):
    """The values a program has so far, the Python int arguments it takes, and the dtypes its
    casts may target."""

    def __init__(self, values, int_args_allowed: bool, dtypes=INPUT_DTYPES):
        super().__init__(values)
        self.int_args_allowed = int_args_allowed
        self.dtypes = tuple(dtypes)
        self.int_args: dict[str, int] = {}

    def literal(self, draw, value: int | None) -> str | None:
        """How the source writes an int: a literal, or where allowed, sometimes a new int
        argument that is passed that value."""
        if value is None or not self.int_args_allowed or draw(st.integers(0, 2)):
            return None if value is None else str(value)
        name = f"n{len(self.int_args)}"
        self.int_args[name] = value
        return name


@dataclass
class Step:
    """What a builder returns: a Python expression over the operands' names, the result's bound,
    and whether the op keeps exact operands exact (False for sqrt and transcendental functions)."""

    expr: str
    operands: list[Value]
    mag: float
    keeps_exact: bool = True


@dataclass
class Program:
    """A generated program: `fn(*inputs)` returns one tensor or a tuple of two.
    rounding: per result, the dtype whose tolerance applies to it (see `assert_close`)."""

    source: str
    fn: Callable
    inputs: list  # the tensors, then the int arguments
    rounding: torch.dtype | tuple[torch.dtype, ...]

    def describe(self) -> str:
        lines = [self.source.rstrip(), "# inputs:"]
        for t in self.inputs:
            lines.append(f"#   {t}" if isinstance(t, int) else
                         f"#   {tuple(t.shape)} {t.dtype} stride={t.stride()} "
                         f"offset={t.storage_offset()}")
        return "\n".join(lines)


def run_eager(program: Program):
    """The reference result: the program run by eager PyTorch."""
    return program.fn(*program.inputs)


def assert_matches_eager(program: Program, actual) -> None:
    """Check an executor's result for program.inputs against eager PyTorch's."""
    assert_close(actual, run_eager(program), program.rounding)


# ---------------------------------------------------------------------------------------------
# assert_close

TOLERANCES = {  # float dtype -> (rtol, atol), tightest first
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-5, 1e-5),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (2e-2, 4e-2),
}


def loosest(dtypes) -> torch.dtype:
    return max(dtypes, key=list(TOLERANCES).index)


def assert_close(actual, expected, rounding=None) -> None:
    """Compare results (tensors, or tuples/lists of them): same shape and dtype, values within
    tolerance, exact for int and bool, NaN exactly where expected has NaN.

    A float result's tolerance is its dtype's, or rounding's where that is looser: eager PyTorch
    rounds each op's result, so an fp32 result computed from bf16 intermediates carries bf16
    error, which an executor computing in fp32 does not reproduce. rounding is one dtype, or
    one per result."""
    if isinstance(expected, (tuple, list)):
        assert isinstance(actual, (tuple, list)), f"expected a sequence, got {type(actual)}"
        assert len(actual) == len(expected), f"{len(actual)} results, expected {len(expected)}"
        roundings = rounding if isinstance(rounding, (tuple, list)) else [rounding] * len(expected)
        for a, e, r in zip(actual, expected, roundings):
            assert_close(a, e, r)
        return
    assert isinstance(actual, torch.Tensor), f"expected a tensor, got {type(actual)}"
    assert actual.shape == expected.shape, f"shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    assert actual.dtype == expected.dtype, f"dtype {actual.dtype} != {expected.dtype}"
    rtol, atol = 0.0, 0.0
    if expected.dtype in TOLERANCES:
        rtol, atol = TOLERANCES[loosest([expected.dtype, rounding or expected.dtype])]
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=True)


# ---------------------------------------------------------------------------------------------
# Small drawing helpers


def choose(draw, values: list, predicate=lambda v: True):
    """Draw one of the values satisfying predicate, or None if there is none."""
    candidates = [v for v in values if predicate(v)]
    return draw(st.sampled_from(candidates)) if candidates else None


def broadcastable(*shapes) -> bool:
    try:
        torch.broadcast_shapes(*shapes)
    except RuntimeError:
        return False
    return True


def scalar_for(draw, k: str):
    return draw(st.sampled_from(INT_SCALARS if k == "int" else FLOAT_SCALARS + INT_SCALARS))


def render_slice(start, stop, step) -> str:
    text = ("" if start is None else str(start)) + ":" + ("" if stop is None else str(stop))
    return text if step is None else f"{text}:{step}"


def draw_slice(draw, pool: Pool, size: int) -> str:
    bound = st.none() | st.integers(-size - 2, size + 2)
    start, stop = pool.literal(draw, draw(bound)), pool.literal(draw, draw(bound))
    return render_slice(start, stop, draw(st.sampled_from([None, 1, 2, 3])))


def slice_along(name: str, dim: int, text: str) -> str:
    """`name[:, :, text]` with the slice at `dim`."""
    return f"{name}[{', '.join([':'] * dim + [text])}]"


def draw_dim(draw, rank: int) -> int:
    """A dim index for a tensor of `rank`, written positive or negative."""
    return draw(st.integers(-rank, rank - 1))


def draw_factorization(draw, numel: int, rank: int) -> list[int]:
    """Sizes of `rank` dims whose product is numel (> 0): its prime factors spread at random."""
    sizes = [1] * rank
    n, p = numel, 2
    while n > 1:
        while n % p == 0:
            sizes[draw(st.integers(0, rank - 1))] *= p
            n //= p
        p += 1
    return sizes


# ---------------------------------------------------------------------------------------------
# The op table: each builder returns a Step, or None where no operand fits.

def numeric(v: Value) -> bool:
    return v.kind != "bool"


def build_arith(draw, pool):
    a = choose(draw, pool, numeric)
    if a is None:
        return None
    op = draw(st.sampled_from("+-*"))
    b = choose(draw, pool, lambda v: numeric(v) and broadcastable(a.shape, v.shape))
    if b is None or draw(st.booleans()):
        s = scalar_for(draw, a.kind)
        operands, b_mag, b_kind = [a], abs(s), "int" if isinstance(s, int) else "float"
        expr = f"{a.name} {op} {s}" if draw(st.booleans()) else f"{s} {op} {a.name}"
    else:
        operands, b_mag, b_kind = [a, b], b.mag, b.kind
        expr = f"{a.name} {op} {b.name}"
    mag = a.mag * b_mag if op == "*" else a.mag + b_mag
    return Step(expr, operands, mag)      # every dtype: rounded per op as eager's


def build_div(draw, pool):
    a = choose(draw, pool, numeric)
    if a is None:
        return None
    b = choose(draw, pool, lambda v: numeric(v) and broadcastable(a.shape, v.shape))
    if b is None or draw(st.booleans()):
        s = draw(st.sampled_from(FLOAT_SCALARS + INT_SCALARS))
        return Step(f"{a.name} / {s}", [a], a.mag / abs(s))
    return Step(f"{a.name} / ({b.name}.abs() + 1)", [a, b], a.mag)


def build_max_min(draw, pool):
    a = choose(draw, pool, numeric)
    b = a and choose(draw, pool, lambda v: numeric(v) and broadcastable(a.shape, v.shape))
    if b is None:
        return None
    fn = draw(st.sampled_from(["torch.maximum", "torch.minimum"]))
    return Step(f"{fn}({a.name}, {b.name})", [a, b], max(a.mag, b.mag))


# name -> (template, result mag from operand mag, keeps exactness, operand kinds)
UNARY = {
    "neg": ("-{x}", lambda m: m, True, ("float", "int")),
    "abs": ("torch.abs({x})", lambda m: m, True, ("float", "int")),
    "relu": ("torch.relu({x})", lambda m: m, True, ("float", "int")),
    "F.relu": ("F.relu({x})", lambda m: m, True, ("float",)),
    "exp": ("torch.exp({x})", math.exp, False, ("float",)),
    "log": ("torch.log({x}.abs() + 1)", lambda m: math.log(m + 1), False, ("float",)),
    "sin": ("{x}.sin()", lambda m: 1.0, False, ("float",)),
    "cos": ("torch.cos({x})", lambda m: 1.0, False, ("float",)),
    "tanh": ("torch.tanh({x})", lambda m: 1.0, False, ("float",)),
    "sigmoid": ("torch.sigmoid({x})", lambda m: 1.0, False, ("float",)),
    "silu": ("F.silu({x})", lambda m: m, False, ("float",)),
    "gelu": ("F.gelu({x})", lambda m: m, False, ("float",)),
    "gelu_tanh": ("F.gelu({x}, approximate='tanh')", lambda m: m, False, ("float",)),
    "erf": ("torch.erf({x})", lambda m: 1.0, False, ("float",)),
    "sqrt": ("({x}.abs() + 1).sqrt()", lambda m: math.sqrt(m + 1), False, ("float",)),
    "rsqrt": ("torch.rsqrt({x}.abs() + 1)", lambda m: 1.0, False, ("float",)),
}


def build_unary(draw, pool):
    name = draw(st.sampled_from(sorted(UNARY)))
    template, mag, keeps_exact, kinds = UNARY[name]
    x = choose(draw, pool, lambda v: v.kind in kinds and mag(v.mag) <= MAX_MAG)
    if x is None:
        return None
    return Step(template.format(x=x.name), [x], mag(x.mag), keeps_exact)


# exponents of x ** e: eager special-cases 0, 1, 2, 3, -2, 0.5, -0.5 and -1; the others are
# its pow function. A fractional or negative one gets a base >= 1.
POW_EXPONENTS = (0, 1, 2, 3, 4, 5, 0.5, -0.5, -1, -2, 1.5, 2.5, -1.5, 1.0)


def build_pow(draw, pool):
    e = draw(st.sampled_from(POW_EXPONENTS))
    x = choose(draw, pool, numeric)
    if x is None:
        return None
    smooth = isinstance(e, int) and e >= 0
    base, mag = (x.name, x.mag) if smooth else (f"({x.name}.abs() + 1)", x.mag + 1)
    template = draw(st.sampled_from(["{b} ** {e}", "torch.pow({b}, {e})", "{b}.pow({e})"]))
    return Step(template.format(b=base, e=e), [x], mag ** e if e > 0 else 1.0,
                keeps_exact=x.kind == "int" and isinstance(e, int))


def build_clamp(draw, pool):
    """clamp/clip with number bounds (either None), crossed bounds (min > max: eager gives max),
    clamp_min, clamp_max; or with tensor bounds (see `clamp_tensor_bounds`)."""
    x = choose(draw, pool, numeric)
    if x is None:
        return None
    if draw(st.booleans()):
        return clamp_tensor_bounds(draw, pool, x)
    lo, hi = sorted(draw(st.lists(st.sampled_from(
        INT_SCALARS if x.kind == "int" else FLOAT_SCALARS), min_size=2, max_size=2, unique=True)))
    form = draw(st.sampled_from(["both", "crossed", "min", "max"]))
    if form in ("both", "crossed"):
        a, b = (lo, hi) if form == "both" else (hi, lo)
        expr = draw(st.sampled_from([f"{x.name}.clamp({a}, {b})", f"torch.clip({x.name}, {a}, {b})",
                                     f"torch.clamp({x.name}, min={a}, max={b})"]))
        mag = min(x.mag, max(abs(lo), abs(hi))) if form == "both" else abs(lo)
    elif form == "min":
        expr = draw(st.sampled_from([f"{x.name}.clamp(min={lo})", f"{x.name}.clamp({lo}, None)",
                                     f"torch.clamp_min({x.name}, {lo})"]))
        mag = max(x.mag, abs(lo))
    else:
        expr = draw(st.sampled_from([f"torch.clamp({x.name}, max={hi})",
                                     f"{x.name}.clamp(None, {hi})", f"{x.name}.clamp_max({hi})"]))
        mag = max(x.mag, abs(hi))
    return Step(expr, [x], mag)


def clamp_tensor_bounds(draw, pool, x):
    """clamp/clip/clamp_min/clamp_max with tensor bounds that broadcast with x (the result may
    be larger than x; int and float operands promote). Random bounds cross elementwise (eager
    gives max there, and its gradient to max); `x.detach()` as a bound ties it with x everywhere
    (eager gives x all of the gradient, maximum's rule would halve it), one tensor as both bounds
    ties them (eager gives no one the gradient below lo == hi)."""
    lo = choose(draw, pool, lambda v: numeric(v) and broadcastable(x.shape, v.shape))
    hi = choose(draw, pool, lambda v: numeric(v) and broadcastable(x.shape, lo.shape, v.shape))
    bounds = {"lo": (lo.name, [lo]), "hi": (hi.name, [hi])}
    tie = draw(st.sampled_from(["none", "x and lo", "x and hi", "lo and hi"]))
    if tie == "lo and hi":
        bounds["hi"] = bounds["lo"]
    elif tie != "none":
        bounds[tie[-2:]] = (f"{x.name}.detach()", [])
    used, templates = draw(st.sampled_from([
        (("lo", "hi"), ["{x}.clamp({lo}, {hi})", "torch.clip({x}, {lo}, {hi})",
                        "torch.clamp({x}, min={lo}, max={hi})"]),
        (("lo",), ["torch.clamp({x}, min={lo})", "{x}.clamp_min({lo})", "{x}.clamp({lo}, None)"]),
        (("hi",), ["{x}.clamp(max={hi})", "torch.clamp_max({x}, {hi})",
                   "torch.clip({x}, None, {hi})"])]))
    operands = [x] + [v for b in used for v in bounds[b][1]]
    expr = draw(st.sampled_from(templates)).format(x=x.name, lo=bounds["lo"][0], hi=bounds["hi"][0])
    return Step(expr, operands, max(v.mag for v in operands))


def build_masked_fill(draw, pool):
    """x.masked_fill(mask, number): the mask a bool value or a comparison of an exact one (so
    rounding cannot flip it), broadcast with x (the result may be larger than x)."""
    x = choose(draw, pool)
    if x is None:
        return None
    mask = choose(draw, pool, lambda v: v.kind == "bool" and broadcastable(x.shape, v.shape))
    if mask is None or draw(st.booleans()):
        c = choose(draw, pool, lambda v: numeric(v) and v.exact
                   and broadcastable(x.shape, v.shape))
        if c is None:
            return None
        mask_src, operands = f"({c.name} > {draw(st.sampled_from(COMPARE_CONSTANTS))!r})", [x, c]
    else:
        mask_src, operands = mask.name, [x, mask]
    value = draw(st.booleans()) if x.kind == "bool" else scalar_for(draw, x.kind)
    expr = draw(st.sampled_from([f"{x.name}.masked_fill({mask_src}, {value})",
                                 f"torch.masked_fill({x.name}, {mask_src}, {value})"]))
    return Step(expr, operands, max(x.mag, abs(value)))


def build_split(draw, pool):
    """One piece of chunk, split (by a size or by sections) or unbind, as a method or function;
    chunk counts and split sizes are sometimes int arguments."""
    x = choose(draw, pool, lambda v: v.rank >= 1)
    if x is None:
        return None
    dim = draw_dim(draw, x.rank)
    size = x.shape[dim]
    form = draw(st.sampled_from(["chunk", "split", "sections", "unbind"]))
    if form == "chunk":
        n = draw(st.integers(1, 4))
        pieces, args = x.tensor.chunk(n, dim), pool.literal(draw, n)
    elif form == "split":
        n = draw(st.integers(1, size + 1)) if size else draw(st.integers(0, 2))
        pieces, args = x.tensor.split(n, dim), pool.literal(draw, n)
    elif form == "sections":
        cuts = sorted(draw(st.lists(st.integers(0, size), max_size=3)))
        sections = [b - a for a, b in zip([0] + cuts, cuts + [size])]
        pieces, args = x.tensor.split(sections, dim), str(sections)
    else:
        if size == 0:
            return None
        pieces, args = x.tensor.unbind(dim), None
    name = "split" if form == "sections" else form
    call = draw(st.sampled_from([
        f"{x.name}.{name}({', '.join(a for a in (args, str(dim)) if a)})",
        f"torch.{name}({', '.join(a for a in (x.name, args, f'dim={dim}') if a)})"]))
    k = draw(st.integers(-len(pieces), len(pieces) - 1))
    return Step(f"{call}[{k}]", [x], x.mag)


def build_where(draw, pool):
    if draw(st.booleans()):  # a select on a comparison: continuous, so rounding cannot flip it
        a = choose(draw, pool, numeric)
        b = a and choose(draw, pool, lambda v: numeric(v) and broadcastable(a.shape, v.shape))
        if b is None:
            return None
        cmp = draw(st.sampled_from([">", "<", ">=", "<="]))
        expr = f"torch.where({a.name} {cmp} {b.name}, {a.name}, {b.name})"
        return Step(expr, [a, b], max(a.mag, b.mag))
    c = choose(draw, pool, lambda v: v.kind == "bool")
    a = c and choose(draw, pool, lambda v: broadcastable(c.shape, v.shape))
    if a is None:
        return None
    b = choose(draw, pool, lambda v: v.kind == a.kind and broadcastable(c.shape, a.shape, v.shape))
    if b is None or draw(st.booleans()):
        s = draw(st.sampled_from([True, False])) if a.kind == "bool" else scalar_for(draw, a.kind)
        return Step(f"torch.where({c.name}, {a.name}, {s})", [c, a], max(a.mag, abs(s)))
    return Step(f"torch.where({c.name}, {a.name}, {b.name})", [c, a, b], max(a.mag, b.mag))


def build_compare(draw, pool):
    a = choose(draw, pool, lambda v: numeric(v) and v.exact)
    b = a and choose(draw, pool, lambda v: numeric(v) and v.exact
                     and broadcastable(a.shape, v.shape))
    if b is None:
        return None
    cmp = draw(st.sampled_from([">", "<", ">=", "<=", "==", "!="]))
    return Step(f"{a.name} {cmp} {b.name}", [a, b], 1.0)


def build_cast(draw, pool):
    dtype = draw(st.sampled_from(pool.dtypes))
    # Truncation to int and the test against zero are discontinuous: only exact values go there.
    x = choose(draw, pool, lambda v: v.exact or kind(dtype) == "float")
    if x is None:
        return None
    methods = {torch.float32: ".float()", torch.float16: ".half()",
               torch.bfloat16: ".bfloat16()", torch.int32: ".int()", torch.bool: ".bool()"}
    call = draw(st.sampled_from([methods.get(dtype, f".to({DTYPE_NAMES[dtype]})"),
                                 f".to({DTYPE_NAMES[dtype]})"]))
    mag = 1.0 if dtype == torch.bool else x.mag
    # a cast rounds to nearest even as eager's does (`narrow.round`, under the interpreter too)
    return Step(f"{x.name}{call}", [x], mag)


def build_index(draw, pool):
    x = choose(draw, pool)
    items, kept = [], 0  # kept: dims the index keeps (all but those taken by an int)
    for size in x.shape:
        form = draw(st.sampled_from(["full", "int", "slice"] if size else ["full", "slice"]))
        if form == "int":
            items.append(str(draw(st.integers(-size, size - 1))))
        else:
            items.append(":" if form == "full" else draw_slice(draw, pool, size))
            kept += 1
    for _ in range(draw(st.integers(0, max(0, MAX_RANK - kept)))):
        items.insert(draw(st.integers(0, len(items))), "None")
    full_runs = [(p, q) for p in range(len(items) + 1) for q in range(p, len(items) + 1)
                 if all(item == ":" for item in items[p:q])]
    if draw(st.booleans()):
        p, q = draw(st.sampled_from(full_runs))
        items[p:q] = ["..."]
    elif draw(st.booleans()):
        while items and items[-1] == ":":
            items.pop()
    return Step(f"{x.name}[{', '.join(items) or '...'}]", [x], x.mag)


def build_cat(draw, pool):
    x = choose(draw, pool)
    if x is None or x.rank == 0:
        return None
    dim = draw_dim(draw, x.rank)
    d = dim % x.rank
    size = x.shape[d]

    def fits(v):
        return (v.rank == x.rank and v.kind == x.kind
                and all(a == b for i, (a, b) in enumerate(zip(v.shape, x.shape)) if i != d))

    pieces = []
    for _ in range(draw(st.integers(2, 5))):
        form = draw(st.sampled_from(["whole", "slice", "other"]))
        if form == "slice":
            start = draw(st.integers(0, size))
            stop = draw(st.integers(start, size))
            step = draw(st.sampled_from([None, 1, 2]))
            bounds = render_slice(pool.literal(draw, start), pool.literal(draw, stop), step)
            pieces.append((slice_along(x.name, d, bounds), x))
        else:
            v = x if form == "whole" else choose(draw, pool, fits)
            pieces.append((v.name, v))
    fn = draw(st.sampled_from(["torch.cat", "torch.concat"]))
    names = ", ".join(name for name, _ in pieces)
    operands = [v for _, v in pieces]
    return Step(f"{fn}(({names}), dim={dim})", operands, max(v.mag for v in operands))


def build_stack(draw, pool):
    x = choose(draw, pool, lambda v: v.rank < MAX_RANK)
    if x is None:
        return None
    same = [v for v in pool if v.shape == x.shape and v.kind == x.kind]
    pieces = [x] + draw(st.lists(st.sampled_from(same), min_size=1, max_size=2))
    dim = draw_dim(draw, x.rank + 1)
    names = ", ".join(v.name for v in pieces)
    return Step(f"torch.stack(({names}), dim={dim})", pieces, max(v.mag for v in pieces))


def build_pad(draw, pool):
    x = choose(draw, pool, numeric)
    if x is None:
        return None
    widths = []
    for size in reversed(x.shape[x.rank - draw(st.integers(1, x.rank)):]):  # last dim first
        lo = draw(st.integers(max(-2, -size), 3) | st.sampled_from([4, 8]))   # 4, 8: aligned
        hi = draw(st.integers(max(-2, -size, -size - lo), 3) | st.sampled_from([4, 8]))
        widths += [pool.literal(draw, lo), pool.literal(draw, hi)]
    value = scalar_for(draw, x.kind)
    form = draw(st.sampled_from(["value", "mode", "default"]))
    args = {"value": f", value={value}", "mode": f", mode='constant', value={value}",
            "default": ""}[form]
    value = 0 if form == "default" else value
    return Step(f"F.pad({x.name}, ({', '.join(widths)}){args})", [x], max(x.mag, abs(value)))


def build_reshape(draw, pool):
    x = choose(draw, pool)
    rank = draw(st.integers(1, MAX_RANK))
    if x.tensor.numel() == 0:
        sizes = [draw(st.integers(0, 3)) for _ in range(rank)]
        sizes[draw(st.integers(0, rank - 1))] = 0
    else:
        sizes = draw_factorization(draw, x.tensor.numel(), rank)
        if draw(st.booleans()):
            sizes[draw(st.integers(0, rank - 1))] = -1
    method = "view" if x.tensor.is_contiguous() and draw(st.booleans()) else "reshape"
    args = ", ".join(map(str, sizes)) if draw(st.booleans()) else str(tuple(sizes))
    return Step(f"{x.name}.{method}({args})", [x], x.mag)


def build_split_merge(draw, pool):
    """A reshape that splits one dim in two (`unflatten`, `view`, `reshape`) or merges two
    neighbours (`flatten(d, d + 1)`), or pairs along the innermost dim: interleaved
    (`torch.stack((a, b), -1).flatten(-2)`) or taken apart (`x.unflatten(-1, (-1, 2))[..., k]`)."""
    form = draw(st.sampled_from(["unflatten", "split", "merge", "interleave", "pair"]))
    if form == "interleave":
        a = choose(draw, pool, lambda v: 1 <= v.rank < MAX_RANK)
        b = a and choose(draw, pool, lambda v: v.shape == a.shape and v.kind == a.kind)
        if b is None:
            return None
        return Step(f"torch.stack(({a.name}, {b.name}), dim=-1).flatten(-2)", [a, b],
                    max(a.mag, b.mag))
    if form == "pair":
        x = choose(draw, pool, lambda v: v.rank >= 1 and v.shape[-1] % 2 == 0 and v.shape[-1])
        if x is None:
            return None
        k = draw(st.integers(0, 1))
        return Step(f"{x.name}.unflatten(-1, (-1, 2))[..., {k}]", [x], x.mag)
    if form == "merge":
        x = choose(draw, pool, lambda v: v.rank >= 2)
        if x is None:
            return None
        d = draw(st.integers(0, x.rank - 2))
        return Step(f"{x.name}.flatten({d}, {d + 1})", [x], x.mag)
    x = choose(draw, pool, lambda v: 1 <= v.rank < MAX_RANK and v.tensor.numel())
    if x is None:
        return None
    d = draw(st.integers(0, x.rank - 1))
    size = x.shape[d]
    a = draw(st.sampled_from([f for f in range(1, size + 1) if size % f == 0]))
    if form == "unflatten":
        sizes = draw(st.sampled_from([(a, -1), (-1, size // a), (a, size // a)]))
        fn = draw(st.sampled_from(["{x}.unflatten({d}, {sizes})",
                                   "torch.unflatten({x}, {d}, {sizes})"]))
        return Step(fn.format(x=x.name, d=d - x.rank if draw(st.booleans()) else d,
                              sizes=sizes), [x], x.mag)
    shape = list(x.shape[:d]) + [a, size // a] + list(x.shape[d + 1:])
    method = "view" if x.tensor.is_contiguous() and draw(st.booleans()) else "reshape"
    return Step(f"{x.name}.{method}({', '.join(map(str, shape))})", [x], x.mag)


def build_expand(draw, pool):
    x = choose(draw, pool)
    new = draw(st.integers(0, MAX_RANK - x.rank))
    sizes = [draw(st.integers(1, 4)) for _ in range(new)]
    for size in x.shape:
        if size == 1:
            sizes.append(draw(st.sampled_from([-1, 1, 2, 3, 5, 0])))
        else:
            sizes.append(draw(st.sampled_from([-1, size])))
    return Step(f"{x.name}.expand({', '.join(map(str, sizes))})", [x], x.mag)


def build_layout(draw, pool):
    """unsqueeze, squeeze, permute, transpose, flatten or contiguous, as a method or function."""
    x = choose(draw, pool)
    r = x.rank
    form = draw(st.sampled_from(["unsqueeze", "squeeze", "squeeze_dim", "permute", "transpose",
                                 "flatten", "contiguous"]))
    if form == "unsqueeze":
        name, args = "unsqueeze", [draw_dim(draw, r + 1)]
    elif form == "squeeze":
        name, args = "squeeze", []
    elif form == "squeeze_dim":
        name, args = "squeeze", [draw_dim(draw, r)]
    elif form == "permute":
        name, args = "permute", [tuple(draw(st.permutations(range(r))))]
    elif form == "transpose":
        name, args = "transpose", [draw_dim(draw, r), draw_dim(draw, r)]
    elif form == "flatten":
        start = draw(st.integers(0, r - 1))
        name, args = "flatten", [start, draw(st.integers(start, r - 1))][: draw(st.integers(0, 2))]
    else:
        name, args = "contiguous", []
    if name != "contiguous" and draw(st.booleans()):
        expr = f"torch.{name}({', '.join(map(str, [x.name, *args]))})"
    elif name == "permute" and draw(st.booleans()):
        expr = f"{x.name}.permute({', '.join(map(str, args[0]))})"
    else:
        expr = f"{x.name}.{name}({', '.join(map(str, args))})"
    return Step(expr, [x], x.mag)


def build_compare_const(draw, pool):
    """A comparison of an exact value with a Python constant: eager compares in the value's
    dtype (the constant rounded to fp16/bf16, wrapped to a narrow int), a boolean exactly."""
    x = choose(draw, pool, lambda v: numeric(v) and v.exact)
    if x is None:
        return None
    cmp = draw(st.sampled_from([">", "<", ">=", "<=", "==", "!="]))
    c = draw(st.sampled_from(COMPARE_CONSTANTS))
    expr = f"{x.name} {cmp} {c!r}" if draw(st.booleans()) else f"{c!r} {cmp} {x.name}"
    return Step(expr, [x], 1.0)


COPY_TEMPLATES = ("{x}.clone()", "{x}.contiguous()", "{x}.to({x}.dtype, copy=True)",
                  "torch.cat(({x},), dim=-1)", "torch.stack(({x},))", "F.pad({x}, (0, 0))",
                  "{x}.clone(memory_format=torch.contiguous_format)")


def build_copy(draw, pool):
    """An op that eager returns as new memory (or, `.contiguous()`, possibly its input)."""
    template = draw(st.sampled_from(COPY_TEMPLATES))
    x = choose(draw, pool, lambda v: v.rank >= 1 and ("stack" not in template or v.rank < MAX_RANK))
    if x is None:
        return None
    return Step(template.format(x=x.name), [x], x.mag)


# in-place calls on a copy (ir.jit traces them functionally)
IN_PLACE_TEMPLATES = {
    "relu": "F.relu({x}.clone(), inplace=True)", "add_": "{x}.clone().add_(1)",
    "mul_": "{x}.clone().mul_(2)", "relu_": "torch.relu_({x}.clone())",
    "clamp_": "{x}.clone().clamp_(min=0)"}


def build_in_place(draw, pool):
    """An in-place call on a copy, whose result is the copy."""
    x = choose(draw, pool, lambda v: v.kind == "float")
    if x is None:
        return None
    name = draw(st.sampled_from(sorted(IN_PLACE_TEMPLATES)))
    return Step(IN_PLACE_TEMPLATES[name].format(x=x.name), [x], 2 * x.mag + 1)


OPS: dict[str, Callable] = {
    "compare_const": build_compare_const,
    "copy": build_copy,
    "in_place": build_in_place,
    "arith": build_arith,
    "div": build_div,
    "max_min": build_max_min,
    "unary": build_unary,
    "pow": build_pow,
    "clamp": build_clamp,
    "masked_fill": build_masked_fill,
    "split": build_split,
    "where": build_where,
    "compare": build_compare,
    "cast": build_cast,
    "index": build_index,
    "cat": build_cat,
    "stack": build_stack,
    "pad": build_pad,
    "reshape": build_reshape,
    "split_merge": build_split_merge,
    "expand": build_expand,
    "layout": build_layout,
}


# ---------------------------------------------------------------------------------------------
# Inputs


@st.composite
def shapes(draw, rank: int | None = None) -> tuple[int, ...]:
    rank = rank or draw(st.integers(1, MAX_RANK))
    top = 6 if rank <= 3 else 4  # keeps inputs at 256 elements or fewer
    sizes = [draw(st.integers(1, top)) for _ in range(rank)]
    if rank <= 2 and draw(st.integers(0, 5)) == 0:
        # a last dim of whole vectors: cat/pad boundaries on it can be aligned (piece-wise code)
        sizes[-1] = draw(st.sampled_from([8, 12, 16]))
    if draw(st.integers(0, 7)) == 0:
        sizes[draw(st.integers(0, rank - 1))] = 0
    return tuple(sizes)


@st.composite
def related_shape(draw, base: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts with base (a suffix, some dims 1), or sometimes an unrelated one."""
    if draw(st.integers(0, 4)) == 0:
        return draw(shapes())
    suffix = base[len(base) - draw(st.integers(1, len(base))):]
    return tuple(1 if draw(st.integers(0, 3)) == 0 else s for s in suffix)


def example_values(shape, dtype, generator) -> torch.Tensor:
    if dtype == torch.bool:
        return torch.rand(shape, generator=generator) < 0.5
    if dtype == torch.uint8:
        return torch.randint(0, 5, shape, generator=generator, dtype=dtype)
    if not dtype.is_floating_point:
        return torch.randint(-4, 5, shape, generator=generator, dtype=dtype)
    return (torch.rand(shape, generator=generator) * 4 - 2).to(dtype)


def filler(dtype) -> float | int | bool:
    """What surrounds an input in its buffer: shows up in the result if an executor reads it."""
    if kind(dtype) == "int":
        return min(12345, torch.iinfo(dtype).max - 4)
    return {"float": math.nan, "bool": True}[kind(dtype)]


@st.composite
def layout_tensors(draw, shape, dtype, generator) -> torch.Tensor:
    """The example values of an input, laid out contiguous, at an offset, transposed or strided."""
    values = example_values(shape, dtype, generator)
    layout = draw(st.sampled_from(["contiguous", "offset", "permuted", "strided"]))
    numel = values.numel()
    if layout == "offset":
        offset = draw(st.integers(1, 9))
        buffer = torch.full((offset + numel + 3,), filler(dtype), dtype=dtype)
        tensor = buffer[offset: offset + numel].view(shape)
    elif layout == "permuted" and len(shape) >= 2:
        perm = draw(st.permutations(range(len(shape))))
        base = torch.full([shape[p] for p in perm], filler(dtype), dtype=dtype)
        tensor = base.permute([perm.index(i) for i in range(len(shape))])
    elif layout == "strided":
        steps = [draw(st.integers(1, 3)) for _ in shape]
        starts = [draw(st.integers(0, 2)) for _ in shape]
        base = torch.full([s * k + o for s, k, o in zip(shape, steps, starts)], filler(dtype),
                          dtype=dtype)
        tensor = base[tuple(slice(o, o + s * k, k) for s, k, o in zip(shape, steps, starts))]
    else:
        return values
    return tensor.copy_(values)


# ---------------------------------------------------------------------------------------------
# Programs

_program_ids = itertools.count()


def compile_source(source: str) -> Callable:
    """Exec the source as a module-level function; registered in linecache so that
    inspect.getsource and tracebacks show it."""
    filename = f"<generated program {next(_program_ids)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = dict(SOURCE_GLOBALS)
    exec(compile(source, filename, "exec"), namespace)
    return namespace["program"]


def acceptable(t: torch.Tensor) -> bool:
    return 1 <= t.dim() <= MAX_RANK and t.numel() <= MAX_NUMEL


@st.composite
def programs(draw, max_ops: int = 6, min_ops: int = 1,
             op_names: Collection[str] | None = None, int_args: bool = False,
             main_dtypes: Collection[torch.dtype] = FLOAT_DTYPES + (torch.int32,),
             input_dtypes: Collection[torch.dtype] = INPUT_DTYPES,
             base_shapes=None, regions: bool = False) -> Program:
    """A random program of min_ops..max_ops steps (fewer where no op of op_names applies) over
    1-3 input tensors, returning 1 or 2 tensors. op_names restricts the steps to those entries
    of OPS. With int_args, some slice bounds and pad widths become Python int arguments, passed
    after the tensors (for symbolic-values caching). main_dtypes: the dtype most inputs get is
    one of these, the others one of input_dtypes (also what casts target). The "in_place" op
    only where op_names asks for it. base_shapes: the strategy of the first input's shape
    (default `shapes()`). With regions, steps run inside autocast and grad-mode blocks
    (`REGIONS`) and matmuls join the ops (see `region_stacks`)."""
    builders = [OPS[name] for name in sorted(op_names or set(OPS) - {"in_place"})]
    builders += list(REGION_OPS.values()) * REGION_OP_WEIGHT if regions else []
    generator = torch.Generator().manual_seed(draw(st.integers(0, 2**32 - 1)))
    main_dtype = draw(st.sampled_from(list(main_dtypes)))
    base = draw(base_shapes if base_shapes is not None else shapes())
    pool = Pool([], int_args, input_dtypes)
    for i in range(draw(st.integers(1, 3))):
        shape = base if i == 0 else draw(related_shape(base))
        dtype = main_dtype if draw(st.integers(0, 2)) else draw(st.sampled_from(list(input_dtypes)))
        tensor = draw(layout_tensors(shape, dtype, generator))
        pool.append(Value(f"x{i}", tensor, INPUT_MAG[kind(dtype)], True, torch.float32))
    inputs = [v.tensor for v in pool]
    env = dict(SOURCE_GLOBALS, **{v.name: v.tensor for v in pool})

    lines = []
    stacks, stack = [], ()      # the regions open at each line
    n_ops = draw(st.integers(min_ops, max_ops))
    for _ in range(50 * n_ops):
        if len(lines) == n_ops:
            break
        int_args_before = dict(pool.int_args)
        step = draw(st.sampled_from(builders))(draw, pool)
        line_stack = draw(next_region_stack(stack)) if regions else stack
        if step is not None and step.mag <= MAX_MAG:
            env.update(pool.int_args)
            try:
                with contextlib.ExitStack() as blocks:
                    for region in line_stack:
                        blocks.enter_context(eval(region, env))
                    tensor = eval(step.expr, env)
            except RuntimeError:    # a scalar eager refuses for a narrow int (pad value -1, uint8)
                step = None         # or mixed fp16 and bf16 under autocast
        if step is not None and tensor.dtype == torch.uint8 and tensor.numel() and int(
                tensor.max()) > MAX_MAG:    # wrapped below 0: its static bound no longer holds
            step = None
        if step is None or step.mag > MAX_MAG or not acceptable(tensor):
            pool.int_args = int_args_before
            continue
        name = f"t{len(lines)}"
        env[name] = tensor
        exact = step.keeps_exact and all(v.exact for v in step.operands)
        roundings = [v.rounding for v in step.operands]
        if not exact:  # inline parts such as `b.abs() + 1` round in the operand's dtype
            dtypes = [tensor.dtype] + [v.tensor.dtype for v in step.operands]
            roundings += [d for d in dtypes if d in TOLERANCES]
        pool.append(Value(name, tensor, step.mag, exact, loosest(roundings)))
        lines.append(f"{name} = {step.expr}")
        stacks.append(stack := line_stack)

    results = [pool[-1]]
    if draw(st.booleans()):
        results.append(draw(st.sampled_from(pool)))
    args = ", ".join([f"x{i}" for i in range(len(inputs))] + list(pool.int_args))
    inputs += pool.int_args.values()
    returned = ", ".join(v.name for v in results)
    body = render_regions(lines, stacks)
    source = "\n".join([f"def program({args}):", *body, f"    return {returned}"]) + "\n"
    rounding = tuple(v.rounding for v in results)
    return Program(source, compile_source(source), inputs,
                   rounding[0] if len(results) == 1 else rounding)


# ---------------------------------------------------------------------------------------------
# Autocast and grad-mode regions (programs(regions=True))

REGIONS = ("torch.autocast('cpu', dtype=torch.bfloat16)",
           "torch.autocast('cpu', dtype=torch.float16)", "torch.autocast('cpu', enabled=False)",
           "torch.no_grad()", "torch.enable_grad()", "torch.set_grad_enabled(False)")
MAX_REGION_DEPTH = 2


@st.composite
def next_region_stack(draw, stack: tuple) -> tuple:
    """The regions open at the next line: the same, one more opened, or the innermost closed."""
    change = draw(st.sampled_from(["keep", "open", "close"]))
    if change == "open" and len(stack) < MAX_REGION_DEPTH:
        return stack + (draw(st.sampled_from(REGIONS)),)
    if change == "close" and stack:
        return stack[:-1]
    return stack


def render_regions(lines: list[str], stacks: list[tuple]) -> list[str]:
    """The body's lines, each inside the `with` blocks of its stack (a block opens where a stack
    grows; consecutive lines under the same stack share their blocks)."""
    body, previous = [], ()
    for line, stack in zip(lines, stacks):
        shared = 0
        while shared < min(len(previous), len(stack)) and previous[shared] == stack[shared]:
            shared += 1
        body += ["    " * (depth + 1) + f"with {stack[depth]}:"
                 for depth in range(shared, len(stack))]
        body.append("    " * (len(stack) + 1) + line)
        previous = stack
    return body


def build_matmul(draw, pool):
    """A matmul or linear (autocast runs them in its lower precision): `a @ b.mT`,
    `torch.matmul(a, b.mT)` or `F.linear(a, b)` with a 2-d b sharing a's last size, else a's
    first rows (`a.reshape(-1, k)[:4]`); divided by that size to keep the bound."""
    a = choose(draw, pool, lambda v: v.kind == "float" and v.rank >= 1)
    if a is None:
        return None
    size = a.shape[-1]
    b = choose(draw, pool, lambda v: v.kind == "float" and v.rank == 2 and v.shape[-1] == size)
    b_name = b.name if b is not None else f"{a.name}.reshape(-1, {size})[:4]"
    template = draw(st.sampled_from(["{a} @ {b}.mT", "torch.matmul({a}, {b}.mT)",
                                     "F.linear({a}, {b})"]))
    expr = f"{template.format(a=a.name, b=b_name)} / {size}"
    return Step(expr, [a, b or a], a.mag * (b or a).mag, keeps_exact=False)


REGION_OPS = {"matmul": build_matmul}
REGION_OP_WEIGHT = 3   # each is drawn as often as three other ops: autocast's main business


# ---- transposes (2-D tiles) ---------------------------------------------------------------

TRANSPOSE_SIZES = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32]


@st.composite
def transposes(draw):
    """(shape, perm, dtype, scaled, added): a permute of a rank 2-4 tensor whose innermost dim
    moves, optionally scaled by a tensor broadcast along all dims but the input's innermost
    before it (a ConvNeXt gamma) and added to a tensor of the output's shape after it."""
    rank = draw(st.integers(2, 4))
    shape = tuple(draw(st.sampled_from(TRANSPOSE_SIZES)) for _ in range(rank))
    perm = tuple(draw(st.permutations(range(rank)).filter(lambda p: p[-1] != rank - 1)))
    return (shape, perm, draw(st.sampled_from([torch.float32, torch.bfloat16])),
            draw(st.booleans()), draw(st.booleans()))


def transpose_program(perm, scaled: bool, added: bool):
    """The function of a `transposes` case: (x, gamma, other) -> its permute."""
    def program(x, gamma, other):
        y = (x * gamma if scaled else x * 2).permute(perm)
        return y + other if added else y.contiguous()
    return program
