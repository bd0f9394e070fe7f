"""Triton code generation for one fusion group.

Every value of the group is an expression of the output index. The domain (the outputs' shape) is
tiled [ROWS, COLS]: COLS walks the innermost dim, ROWS the flattened outer dims. `KernelWriter`
walks from each output back to the loads, turning each prim into index arithmetic (slice: add the
start; pad: subtract the low width and mask; cat: select a piece by comparing the index with the
piece offsets; broadcast: drop the index; permute: reorder it) and collecting:

- the kernel's parameters (pointers, strides, runtime sizes) and how the launcher fills them;
- one `Access` per load and store, with the vector width the analysis allows;
- the guards those widths rest on.

Kernels call Triton builtins only, never `@triton.jit` library functions (`tl.cdiv`, `tl.zeros`):
under the interpreter those leave the language patched, which breaks offline compilation.

Boundaries are literals in "constant values" mode; in "symbolic values" mode they are runtime
integers passed divided by their guarded power-of-two divisor and multiplied back in the kernel, so
Triton can prove what the analysis proved. Masks use only `idx < c` and `idx >= c`.
"""
from __future__ import annotations

import dataclasses
import math
import re

import torch

from ir import IntProxy, TensorProxy
from ir.proxies import same_size
from ir.trace import render
from triton_exec import vectorize
from triton_exec.merge import merge_inner_dims
from triton_exec.vectorize import Path

TL_DTYPE = {torch.float32: "tl.float32", torch.float16: "tl.float16",
            torch.bfloat16: "tl.bfloat16", torch.int32: "tl.int32", torch.int64: "tl.int64",
            torch.int16: "tl.int16", torch.int8: "tl.int8", torch.uint8: "tl.uint8",
            torch.bool: "tl.int1"}
INT32_LIMIT = 2 ** 31
COMPUTE_DTYPE = {torch.float16: torch.float32, torch.bfloat16: torch.float32}

# Transcendental ops go through libdevice (`triton_exec.kernel_math`): `tl.exp`, `tl.sin`, ...
# lower to approximate instructions, and formulas such as 2 / (1 + exp(-2x)) - 1 for tanh lose
# all relative accuracy near 0. Square root and the division in sigmoid round correctly.
UNARY_SRC = {"neg": "-{0}", "abs": "tl.abs({0})", "exp": "libdevice.exp({0})",
             "log": "libdevice.log({0})", "sin": "libdevice.sin({0})", "cos": "libdevice.cos({0})",
             "sqrt": "tl.sqrt_rn({0})", "rsqrt": "libdevice.rsqrt({0})",
             "sigmoid": "tl.div_rn(1.0, 1.0 + libdevice.exp(-{0}))",
             "tanh": "libdevice.tanh({0})"}
# Float neg is `x * -1.0` (Triton's -x is 0 - x, which gives +0.0 for x = +0.0).
# maximum/minimum as eager computes them: NaN wins, and of two equal values (+0.0 and -0.0)
# the first operand is the result.
BINARY_SRC = {"add": "{0} + {1}", "sub": "{0} - {1}", "mul": "{0} * {1}", "div": "{0} / {1}",
              "maximum": "tl.where(({0} < {1}){nan}, {1}, {0})",
              "minimum": "tl.where(({1} < {0}){nan}, {1}, {0})",
              "gt": "{0} > {1}", "lt": "{0} < {1}", "ge": "{0} >= {1}", "le": "{0} <= {1}",
              "eq": "{0} == {1}", "ne": "{0} != {1}"}
COMPARE = frozenset({"gt", "lt", "ge", "le", "eq", "ne"})


@dataclasses.dataclass
class Access:
    """One global load or store of the kernel and its vector width (elements per access)."""

    kind: str           # "load" or "store"
    tensor: str         # the trace name of the tensor
    what: str           # which part: "plain", "pad", "slice", "cat piece 1 of 2", ...
    width: int

    number: int = 0     # position among the kernel's accesses

    @property
    def label(self) -> str:
        return f"{self.kind} {self.number} {self.tensor} ({self.what})"


@dataclasses.dataclass
class Param:
    """A kernel parameter and the launcher expression that fills it."""

    name: str
    launch: str         # Python source in the launcher's scope
    kind: str           # "pointer", "int"
    tensor: object = None


@dataclasses.dataclass
class Lowered:
    """What the code generator produced for one group."""

    name: str
    source: str                 # the @triton.jit function
    params: list                # Param, in kernel order (constexprs follow: ROWS, COLS)
    accesses: list              # Access
    guards: list                # (op, a, b) for the prologue
    rows: object                # flattened outer extent (int or launcher expression)
    cols: object                # innermost extent
    outputs: list               # TensorProxy outputs, in store order
    itemsizes: list             # itemsize of every access, for the launch heuristic
    size_vars: list             # IntProxies of the trace that the kernel receives
    contiguous_inputs: list     # names of inputs the launcher makes contiguous first
    aligned_pointers: bool      # whether launches specialize pointers on 16-byte alignment
    allocated: tuple            # the outputs' shape (ints and IntProxies): () for a 0-d output

    @property
    def domain(self) -> tuple:
        """The shape the kernel tiles: the outputs' shape, (1,) for a 0-d output."""
        return self.allocated or (1,)

    @property
    def vector_width(self) -> dict:
        return {a.label: a.width for a in self.accesses}

    @property
    def min_width(self) -> int:
        return min((a.width for a in self.accesses), default=1)

    @property
    def max_width(self) -> int:
        return max((a.width for a in self.accesses), default=1)


def _compute_dtype(dtype):
    return COMPUTE_DTYPE.get(dtype, dtype)


NEGATIVE_ZERO = "tl.full([ROWS, COLS], -2147483648, tl.int32).to(tl.float32, bitcast=True)"


def _is_negative_zero(value) -> bool:
    return isinstance(value, float) and value == 0 and math.copysign(1.0, value) < 0


def _literal(value) -> str:
    """Kernel source of a Python number. Triton makes every constant equal to 0 a +0.0, so -0.0
    is built from its bits."""
    if isinstance(value, bool):
        return str(int(value))
    if _is_negative_zero(value):
        return NEGATIVE_ZERO
    return render(value)


class KernelWriter:
    """Builds one kernel: lines of its body, its parameters, its accesses and guards."""

    def __init__(self, values, producers, vectorize_enabled: bool, max_vector: int):
        self.values = values                  # id(input Var) -> example runtime value
        self.producers = producers            # id(Var) -> the group equation defining it
        self.max_vector = max_vector          # 16 bytes of the group's narrowest dtype
        self.stride_dims: dict = {}           # id(input) -> its original dim per dim (merges)
        self.contiguous_inputs: list = []     # inputs the launcher makes contiguous
        self.originals: dict = {}             # id(merged input) -> its unmerged proxy
        self.vectorize = vectorize_enabled
        self.lines: list[str] = []
        self.prelude: list[str] = []        # runtime sizes and strides multiplied back
        self.size_objects: list = []        # the IntProxies the kernel receives
        self.params: list[Param] = []
        self.accesses: list[Access] = []
        self.guards: list = []
        self.itemsizes: list = []
        self.memo: dict = {}
        self.counter = 0
        self.size_params: dict[int, int] = {}     # id(IntProxy) -> its position in params

    # ---- names -------------------------------------------------------------------------
    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def let(self, prefix: str, expr: str, comment: str = "") -> str:
        name = self.fresh(prefix)
        self.lines.append(f"{name} = {expr}" + (f"  # {comment}" if comment else ""))
        return name

    def size(self, x, inner: bool = False) -> str:
        """Kernel source for an integer of the trace: a literal, or a runtime parameter. A
        runtime size used along the innermost dim (`inner`) arrives divided by its guarded
        power-of-two divisor, so Triton can prove what the vectorization analysis proved."""
        if not isinstance(x, IntProxy):
            return str(int(x))
        if id(x) not in self.size_params:
            self.size_params[id(x)] = len(self.params)
            self.params.append(Param(x.name, x.name, "int"))
            self.size_objects.append(x)
        scale = vectorize.divisor_of(x, self.max_vector)
        at = self.size_params[id(x)]
        if inner and self.vectorize and scale > 1 and self.params[at].name == x.name:
            self.guards.append(("divisible", x, scale))
            self.params[at] = Param(f"{x.name}_div{scale}", f"{x.name} // {scale}", "int")
            self.prelude.append(f"{x.name} = {x.name}_div{scale} * {scale}")
        return x.name

    # ---- loads and values ----------------------------------------------------------------
    def load(self, t: TensorProxy, idx, mask: str, path: Path, what: str) -> str:
        example = self.values.get(id(t))
        if example is None:     # made by torch in this computation: the launcher makes it
            self.contiguous_inputs.append(t.name)       # contiguous, so its layout is known
            if all(not isinstance(s, IntProxy) for s in t.shape):
                return self.load_constant_layout(t, _contiguous_example(t), idx, mask, path,
                                                 what)
            example = _contiguous_example(self.originals.get(id(t), t))
        self.add_pointer(t)
        terms, outer_strides = [], []
        inner = t.ndim - 1
        original_dims = self.stride_dims.get(id(t), range(t.ndim))
        argument = t.name not in self.contiguous_inputs     # the prologue can guard it
        if argument:    # the kernel reads raw storage: a view with the negative bit must not come
            self.guards.append(("not_neg", t, None))
        for d, (i, s) in enumerate(zip(idx, t.shape)):
            if not isinstance(s, IntProxy) and s == 1:
                continue
            stride = example.stride(original_dims[d])
            if d == inner and stride == 1:
                if argument:
                    self.guards.append(("stride_eq", t, (original_dims[d], 1)))
                terms.append(i)
                continue
            outer_strides.append(stride if argument else 1)
            scale = (vectorize.pow2_divisor(stride, self.max_vector)
                     if self.vectorize and argument else 1)
            od = original_dims[d]
            pname = f"{t.name}_stride{od}"
            if not any(p.name.startswith(pname) for p in self.params):
                if scale > 1:
                    self.guards.append(("stride_divisible", t, (od, scale)))
                    self.params.append(Param(f"{pname}_div{scale}",
                                             f"{t.name}_strides[{od}] // {scale}", "int", t))
                    self.prelude.append(f"{pname} = {pname}_div{scale} * {scale}")
                else:
                    self.params.append(Param(pname, f"{t.name}_strides[{od}]", "int", t))
            # int64 products: an index of the tile times a large stride can pass 2**31
            terms.append(_scaled(i, pname, int64=True))
        inner_stride = example.stride(original_dims[inner]) if t.ndim else 0
        return self.emit_load(t, example, idx, terms, mask, path, what, inner_stride,
                              outer_strides)

    def load_constant_layout(self, t, example, idx, mask, path, what) -> str:
        """A load from a contiguous tensor of constant shape: strides are literals."""
        self.add_pointer(t)
        wide = example.numel() >= INT32_LIMIT
        terms = [i if example.stride(d) == 1 else _scaled(i, example.stride(d), int64=wide)
                 for d, (i, s) in enumerate(zip(idx, t.shape)) if s != 1]
        outer = [example.stride(d) for d in range(t.ndim - 1) if t.shape[d] != 1]
        return self.emit_load(t, example, idx, terms, mask, path, what,
                              example.stride(t.ndim - 1) if t.ndim else 0, outer)

    def add_pointer(self, t) -> str:
        ptr = f"{t.name}_ptr"
        if not any(p.name == ptr for p in self.params):
            self.params.append(Param(ptr, t.name, "pointer", t))
        return ptr

    def emit_load(self, t, example, idx, terms, mask, path, what, inner_stride,
                  outer_strides) -> str:
        ptr = self.add_pointer(t)
        inner_path = path if (idx and t.ndim and _is_inner_index(idx[-1])) else path.broken()
        def width_at(data_ptr):
            return vectorize.load_width(inner_path, example.element_size(),
                                        t.shape[-1] if t.ndim else 1, inner_stride,
                                        outer_strides, data_ptr, self.vectorize)
        width = width_at(_data_ptr(example))
        if t.name not in self.contiguous_inputs:
            # the alignment class is guarded both ways: an aligned input never hits an entry
            # built on a misaligned one and narrowed by it
            if width > 1:
                self.guards.append(("aligned", t, vectorize.ACCESS_BYTES))
            elif width_at(0) > 1:
                self.guards.append(("misaligned", t, vectorize.ACCESS_BYTES))
        self.accesses.append(Access("load", t.name, what, width, len(self.accesses)))
        self.itemsizes.append(example.element_size())
        offset = " + ".join(terms) or "0"
        if not _TILE_INDEX.search(offset):      # one element for the whole tile
            offset = f"tl.full([ROWS, COLS], 0, tl.int32) + {offset}"
        value = self.let("v", f"tl.load({ptr} + {offset}, mask={mask}, other=0)",
                         f"{t.name}: {what}, {width} per access")
        if t.dtype in COMPUTE_DTYPE:
            value = self.let("v", f"{value}.to(tl.float32)")
        return value

    def value(self, v, idx, mask: str, path: Path, what: str = "plain") -> str:
        """Kernel name of the tile holding v at index idx (one index string per dim of v)."""
        if not isinstance(v, TensorProxy):
            return _literal(v) if not isinstance(v, IntProxy) else self.size(v)
        key = (id(v), tuple(idx), mask)
        if key in self.memo:
            return self.memo[key]
        eqn = self.producers.get(id(v))
        result = (self.load(v, idx, mask, path, what) if eqn is None
                  else LOWERING[eqn.prim.name](self, eqn, idx, mask, path))
        self.memo[key] = result
        return result


_TILE_INDEX = re.compile(r"\b(rows|cols|o\d+|r\d+)\b")


def _contiguous_example(t):
    return torch.empty([vectorize.hint_of(s) for s in t.shape], dtype=t.dtype, device="meta")


def _data_ptr(example) -> int:
    """Base address of an example input; 0 (aligned) for a tensor torch allocates at run time."""
    return 0 if example.device.type == "meta" else example.data_ptr()


def _scaled(i: str, stride, int64: bool) -> str:
    """Source of index `i` times `stride`, in int64 when asked and `i` is an index of the tile
    (a constant index stays a Python int, which has no `.to`)."""
    if int64 and _TILE_INDEX.search(i):
        return f"({i}).to(tl.int64) * {stride}"
    return f"({i}) * {stride}"


def _is_inner_index(i: str) -> bool:
    """Whether an index expression walks the domain's columns one element at a time."""
    return i.startswith("cols")


# ---- per-prim lowering rules: (writer, eqn, idx, mask, path) -> value name --------------------

def round_to(w, src: str, dtype) -> str:
    """The fp32 tile `src` rounded to nearest even in the narrow float `dtype`, held in fp32: where
    eager's rounding decides a result outright (comparisons, casts), the value must be the one
    eager holds. bf16 rounds on the bits (Triton's interpreter truncates `.to(tl.bfloat16)`)."""
    if dtype == torch.float16:
        return w.let("v", f"{src}.to(tl.float16).to(tl.float32)", "rounded to fp16")
    if dtype != torch.bfloat16:
        return src
    bits = w.let("b", f"{src}.to(tl.uint32, bitcast=True)")
    rounded = f"(({bits} + 0x7FFF + (({bits} >> 16) & 1)) & 0xFFFF0000).to(tl.float32, bitcast=True)"
    return w.let("v", f"tl.where({src} != {src}, {src}, {rounded})", "rounded to bf16")


def _operand(w, a, idx, mask, path, exact: bool) -> str:
    """Kernel source of an operand; with `exact`, a narrow float tensor is rounded to its dtype."""
    src = w.value(a, idx, mask, path)
    if exact and isinstance(a, TensorProxy) and a.dtype in COMPUTE_DTYPE:
        return round_to(w, src, a.dtype)
    return src


def _elementwise(w, eqn, idx, mask, path):
    name = eqn.prim.name
    args = [_operand(w, a, idx, mask, path, exact=name in COMPARE) for a in eqn.args]
    if name == "neg" and eqn.args[0].dtype.is_floating_point:
        return w.let("v", f"{args[0]} * -1.0")
    if name in UNARY_SRC:
        return w.let("v", UNARY_SRC[name].format(*args))
    if name == "pow":
        return w.let("v", " * ".join([args[0]] * int(eqn.args[1])) if eqn.args[1] else "1")
    b = eqn.args[-1]
    nan = (f" | ({args[1]} != {args[1]})" if isinstance(b, TensorProxy) and b.dtype.is_floating_point
           else " | True" if isinstance(b, float) and math.isnan(b) else "")
    return w.let("v", BINARY_SRC[name].format(*args, nan=nan))


def _convert(w, eqn, idx, mask, path):
    """A cast sees its source as eager holds it (rounded to a narrow float dtype) and rounds to
    a narrow float target exactly, so casts to int or bool and later comparisons agree."""
    src = _operand(w, eqn.args[0], idx, mask, path, exact=True)
    to = eqn.params["dtype"]
    if to == torch.bool:
        return w.let("v", f"{src} != 0")
    if to in COMPUTE_DTYPE:     # round to the narrow type as eager does, compute in fp32
        if not eqn.args[0].dtype.is_floating_point:     # ints reach bf16/fp16 through fp32
            src = w.let("v", f"{src}.to(tl.float32)")
        return round_to(w, src, to)
    return w.let("v", f"{src}.to({TL_DTYPE[to]})")


def _where(w, eqn, idx, mask, path):
    c, a, b = (w.value(x, idx, mask, path) for x in eqn.args)
    return w.let("v", f"tl.where({c}, {a}, {b})")


def _full(w, eqn, idx, mask, path):
    dtype, value = _compute_dtype(eqn.params["dtype"]), eqn.params["value"]
    if _is_negative_zero(value):
        return w.let("v", NEGATIVE_ZERO)
    return w.let("v", f"tl.full([ROWS, COLS], {w.value(value, [], '', path)}, {TL_DTYPE[dtype]})")


def _offset(i: str, sign: str, by: str) -> str:
    """`i + by` or `i - by` (sign "+" or "-"), folding an `i` of the form `j - by` or `j + by`
    back to `j` (index expressions are sums, so the last term is top-level)."""
    if by == "0":
        return i
    undo = f" {'-' if sign == '+' else '+'} {by}"
    if i.endswith(undo):
        return i[:-len(undo)]
    return f"{i} {sign} {by}"


def _slice(w, eqn, idx, mask, path):
    t, starts, stops, steps = eqn.args
    new, inner = [], len(idx) - 1
    for d, (i, start, step) in enumerate(zip(idx, starts, steps)):
        s = w.size(start, inner=d == inner)
        expr = i if step == 1 else f"({i}) * {step}"
        expr = _offset(expr, "+", s)
        new.append(expr)
        if d == inner:
            path = path.through(start, t.shape[d]) if step == 1 else path.broken()
    return w.value(t, new, mask, path, "slice")


def _pad(w, eqn, idx, mask, path):
    t, config = eqn.args
    new, conds, inner = [], [], len(idx) - 1
    for d, (i, (lo, hi)) in enumerate(zip(idx, config)):
        if not isinstance(lo, IntProxy) and not isinstance(hi, IntProxy) and lo == hi == 0:
            new.append(i)
            continue
        lo_s, size_s = w.size(lo, inner=d == inner), w.size(t.shape[d], inner=d == inner)
        conds.append(f"({i} >= {lo_s})")
        conds.append(f"({i} < {lo_s} + {size_s})")
        new.append(_offset(i, "-", lo_s))
        if d == inner:
            path = path.through(lo, hi, t.shape[d])
    valid = w.let("m", " & ".join(conds), "inside the unpadded input")
    inner_value = w.value(t, new, f"{mask} & {valid}", path, "pad")
    pad_value = w.value(eqn.params["value"], [], "", path)
    return w.let("v", f"tl.where({valid}, {inner_value}, {pad_value})")


def _cat(w, eqn, idx, mask, path):
    pieces, d = eqn.args[0], eqn.params["dim"]
    i = idx[d]
    offset_names = _offsets(w, pieces, d, inner=d == len(idx) - 1)
    values = []
    for k, p in enumerate(pieces):
        lo, hi = offset_names[k], offset_names[k + 1]
        lower = "" if lo == "0" else f" & ({i} >= {lo})"
        cond = w.let("m", f"{mask}{lower} & ({i} < {hi})", f"cat piece {k} of {len(pieces)}")
        piece_idx = list(idx)
        piece_idx[d] = _offset(i, "-", lo)
        piece_path = path.through(*_boundaries(pieces, d, k)) if d == len(idx) - 1 else path
        values.append(w.value(p, piece_idx, cond, piece_path,
                              f"cat piece {k} of {len(pieces)}"))
    result = values[-1]
    for k in range(len(pieces) - 2, -1, -1):
        result = w.let("v", f"tl.where({i} < {offset_names[k + 1]}, {values[k]}, {result})")
    return result


def _offsets(w, pieces, d, inner: bool):
    """Source for each piece's start offset along the cat dim, and the total at the end."""
    names = ["0"]
    for p in pieces:
        size, total = w.size(p.shape[d], inner), names[-1]
        if total.isdigit() and size.isdigit():
            names.append(str(int(total) + int(size)))
        else:
            names.append(size if total == "0" else w.let("c", f"{total} + {size}"))
    return names


def _boundaries(pieces, d, k):
    """The sizes whose sums are piece k's start and end offsets (gcd of the parts divides them)."""
    return [p.shape[d] for p in pieces[:k + 1]]


def _broadcast(w, eqn, idx, mask, path):
    t, shape = eqn.args
    dims = eqn.params["dims"]
    new = []
    for j, d in enumerate(dims):
        s = t.shape[j]
        broadcast = not isinstance(s, IntProxy) and s == 1 and not (
            not isinstance(shape[d], IntProxy) and shape[d] == 1)
        new.append("0" if broadcast else idx[d])
    if t.ndim and (len(idx) - 1 not in dims or new[-1] == "0"):
        path = path.broken()
    return w.value(t, new, mask, path)


def _permute(w, eqn, idx, mask, path):
    t = eqn.args[0]
    perm = eqn.params["perm"]
    new = [None] * len(perm)
    for i, p in enumerate(perm):
        new[p] = idx[i]
    if perm and perm[-1] != len(perm) - 1:
        path = path.broken()
    return w.value(t, new, mask, path)


def _linear(w, idx, shape) -> str:
    """Row-major linear index of idx in shape, innermost term first."""
    if not idx:
        return "0"
    linear, stride = idx[-1], w.size(shape[-1])
    for i, s in zip(reversed(idx[:-1]), reversed(shape[:-1])):
        linear = f"{linear} + ({i}) * {stride}"
        stride = f"{stride} * {w.size(s)}"
    return linear


def _delinear(w, flat: str, shape) -> list:
    """Index in shape of the row-major linear index `flat`."""
    new, inner = [], "1"
    for s in reversed(shape):
        new.append(f"({flat} // ({inner})) % {w.size(s)}" if inner != "1" else
                   f"{flat} % {w.size(s)}")
        inner = w.size(s) if inner == "1" else f"{inner} * {w.size(s)}"
    return list(reversed(new))


def _inner_split(shape, in_shape):
    """j such that shape[j:] splits the input's innermost dim (their product equals it), when the
    sizes involved are known; the innermost index then stays contiguous through the reshape."""
    if not shape or not in_shape:
        return None
    if same_size(shape[-1], in_shape[-1]):
        return len(shape) - 1
    product = 1
    for j in range(len(shape) - 1, -1, -1):
        if isinstance(shape[j], IntProxy) or isinstance(in_shape[-1], IntProxy):
            return None
        product *= shape[j]
        if product == in_shape[-1]:
            return j
        if product > in_shape[-1]:
            return None
    return None


def _reshape(w, eqn, idx, mask, path):
    t, shape = eqn.args
    kept_out = [i for i, s in zip(idx, shape) if isinstance(s, IntProxy) or s != 1]
    kept_in = [s for s in t.shape if isinstance(s, IntProxy) or s != 1]
    if len(kept_out) == len(kept_in) and all(
            same_size(a, b) for a, b in
            zip(kept_in, [s for s in shape if isinstance(s, IntProxy) or s != 1])):
        it = iter(kept_out)
        new = [next(it) if isinstance(s, IntProxy) or s != 1 else "0" for s in t.shape]
        return w.value(t, new, mask, path)
    j = _inner_split(shape, t.shape)
    if j is not None:       # the innermost input index stays cols + (split dims) * extents
        inner = _linear(w, idx[j:], shape[j:])
        if j:
            outer = w.let("r", _linear(w, idx[:j], shape[:j]), "outer index through a reshape")
            new = _delinear(w, outer, t.shape[:-1]) + [inner]
        else:
            new = ["0"] * (t.ndim - 1) + [inner]
        inner_path = path.through(shape[-1]) if _is_inner_index(idx[-1]) else path.broken()
        return w.value(t, new, mask, inner_path)
    flat = w.let("r", _linear(w, idx, shape), "linear index through a reshape")
    return w.value(t, _delinear(w, flat, t.shape), mask, path.broken())


def _copy(w, eqn, idx, mask, path):
    """A copy is the value itself: the kernel's store is the new memory."""
    return w.value(eqn.args[0], idx, mask, path)


LOWERING = {"copy": _copy, "convert_element_type": _convert, "where": _where, "full": _full, "slice": _slice,
            "pad": _pad, "cat": _cat, "broadcast_in_dim": _broadcast, "permute": _permute,
            "reshape": _reshape}
for _name in list(UNARY_SRC) + list(BINARY_SRC) + ["pow"]:
    LOWERING[_name] = _elementwise


# ---- the kernel: domain tiling, values, stores ---------------------------------------------

def _narrow_indices(eqns, outputs, guards: list) -> bool:
    """Whether int32 logical indices are safe: the flat indices the kernel forms (the output's
    row index, a reshape's flat index) and every index into an input stay below 2**31 when the
    output, the group's inputs and the reshaped tensors have fewer than 2**31 elements (true in
    this call; a guard per shape with runtime sizes keeps it true for the cache entry).
    Indices of pad, cat and slice intermediates are shifts of these."""
    produced = {id(o) for e in eqns for o in e.outs}
    tensors = [outputs[0]] + [t for e in eqns for t in e.input_vars()
                              if isinstance(t, TensorProxy) and id(t) not in produced]
    tensors += [t for e in eqns if e.prim.name == "reshape" for t in (e.args[0], *e.outs)]
    shapes = {}
    for t in tensors:
        shapes[tuple(id(s) if isinstance(s, IntProxy) else s for s in t.shape)] = t.shape
    if any(math.prod(vectorize.hint_of(s) for s in shape) >= INT32_LIMIT
           for shape in shapes.values()):
        return False
    guards += [("numel_lt", tuple(s for s in shape if isinstance(s, IntProxy) or s != 1),
                INT32_LIMIT) for shape in shapes.values()
               if any(isinstance(s, IntProxy) for s in shape)]
    return True


def product(terms) -> str:
    """Source of the product of size expressions, leaving out factors of 1."""
    return " * ".join(t for t in terms if t != "1") or "1"


def lower_group(name, eqns, outputs, inputs, values, vectorize_enabled: bool) -> Lowered:
    """Lowers one fusion group (equations in trace order; `outputs` of one shape) to a kernel."""
    allocated = tuple(outputs[0].shape)
    merged = merge_inner_dims(eqns, outputs, inputs, values)
    if merged is not None:
        eqns, outputs, values = merged.eqns, merged.outputs, merged.values
    domain = tuple(outputs[0].shape) or (1,)
    itemsizes = [t.dtype.itemsize for e in eqns for t in (*e.input_vars(), *e.outs)
                 if isinstance(t, TensorProxy)]
    w = KernelWriter(values, {id(o): e for e in eqns for o in e.outs}, vectorize_enabled,
                     vectorize.ACCESS_BYTES // min(itemsizes))
    if merged is not None:
        w.stride_dims, w.originals = merged.stride_dims, merged.originals
        w.guards += [("strides_compose", t, dims) for t, dims in merged.contiguity]
    sizes = [w.size(s, inner=d == len(domain) - 1) for d, s in enumerate(domain)]
    cols_extent = sizes[-1]
    # Column indices are int32 unless the innermost extent may reach 2**31.
    wide_cols = vectorize.hint_of(domain[-1]) >= INT32_LIMIT // 2
    if isinstance(domain[-1], IntProxy) and not wide_cols:
        w.guards.append(("lt", domain[-1], INT32_LIMIT // 2))
    rows_extent = product(sizes[:-1])
    # Logical indices (rows, outer indices, reshaped flat indices) are int32 when every tensor
    # of the group has fewer than 2**31 elements (guarded for runtime shapes); offsets into
    # inputs are int64 products either way.
    narrow = _narrow_indices(eqns, outputs, w.guards)
    outer = [f"o{d}" for d in range(len(domain) - 1)]
    header = [f"# Tile [ROWS, COLS] of the output domain [{', '.join(sizes)}]; COLS walks the "
              "innermost dim",
              "pid = tl.program_id(0)",
              f"col_blocks = ({cols_extent} + COLS - 1) // COLS",
              "rows = (pid // col_blocks)" + ("" if narrow else ".to(tl.int64)")
              + " * ROWS + tl.arange(0, ROWS)[:, None]",
              "# VEC caps the contiguity Triton may assume along COLS, so the access width",
              "cols = (pid % col_blocks)" + (".to(tl.int64)" if wide_cols else "")
              + " * COLS + tl.max_contiguous(tl.arange(0, COLS), VEC)[None, :]",
              f"in_domain = (rows < {rows_extent}) & (cols < {cols_extent})"]
    if outer:
        header.append("# Outer indices of the output, from the row index")
        inner = None
        for d in range(len(outer) - 1, -1, -1):
            base = "rows" if inner is None else f"(rows // ({inner}))"
            header.append(f"{outer[d]} = {base} % {sizes[d]}" if d else f"o0 = {base}")
            inner = sizes[d] if inner is None else f"{inner} * {sizes[d]}"
    w.lines.append("# Values, as functions of the output index")
    index = outer + ["cols"] if outputs[0].shape else ["cols"]
    start = Path().through(domain[-1])
    stores = []
    for k, out in enumerate(outputs):
        val = w.value(out, index if out.shape else [], "in_domain", start)
        width = vectorize.store_width(out.dtype.itemsize, domain[-1], vectorize_enabled)
        w.accesses.append(Access("store", out.name, "output", width, len(w.accesses)))
        w.itemsizes.append(out.dtype.itemsize)
        w.params.append(Param(f"out{k}_ptr", f"out{k}", "pointer"))
        stores.append(f"tl.store(out{k}_ptr + rows * {cols_extent} + cols, "
                      f"{val}.to({TL_DTYPE[out.dtype]}), mask=in_domain)  "
                      f"# {out.name}, {width} per access")
    signature = ", ".join([p.name for p in w.params]
                          + ["ROWS: tl.constexpr", "COLS: tl.constexpr", "VEC: tl.constexpr"])
    prelude = ["# Runtime sizes and strides arrive divided by their guarded power-of-two divisor"
               ] + w.prelude if w.prelude else []
    body = prelude + header + w.lines + ["# Stores"] + stores
    pointers = [p.name for p in w.params if p.kind == "pointer"]
    decorator = "@triton.jit" if vectorize_enabled else (
        "# The vectorization analysis is off: pointer alignment stays unknown to Triton\n"
        f"@triton.jit(do_not_specialize_on_alignment={pointers})")
    source = "{}\ndef {}({}):\n{}\n".format(
        decorator, name, signature, "\n".join("    " + line for line in body))
    return Lowered(name, source, w.params, w.accesses, w.guards,
                   rows_extent, cols_extent, list(outputs), w.itemsizes, w.size_objects,
                   sorted(set(w.contiguous_inputs)), vectorize_enabled, allocated)
