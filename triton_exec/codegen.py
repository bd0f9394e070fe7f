"""Triton code generation for one fusion group.

Every value of the group is an expression of the output index. The domain (the outputs' shape) is
tiled [ROWS, COLS]: COLS walks the innermost dim, ROWS the flattened outer dims. A constant
innermost extent with cat/pad/slice boundaries inside is computed piece-wise: one program covers
it in column chunks (`plan_chunks`), each a tile [ROWS, width] whose column index has the chunk's
bounds, so that the index folding decides every piece's mask over it. An outer dim along which
an input is broadcast can be walked by a loop inside each program (`plan_loop`, `Loop`): the body
is generated once, and the lines that do not depend on the loop's index run before it.
`KernelWriter` walks from each output back to the loads, turning each prim into index arithmetic (slice: add the
start; pad: subtract the low width and mask; cat: select a piece by comparing the index with the
piece offsets; broadcast: drop the index; permute: reorder it) and collecting:

- the kernel's parameters (pointers, strides, runtime sizes) and how the launcher fills them;
- one `Access` per load and store, with the vector width the analysis allows;
- the guards those widths rest on.

Kernels call Triton builtins only, never `@triton.jit` library functions (`tl.cdiv`, `tl.zeros`):
under the interpreter those leave the language patched, which breaks offline compilation.

Index and mask math is built as `triton_exec.index` nodes, never as strings: what an index
depends on (tile, runtime integers), its width and its bounds decide per-tile scalars, int64 use,
mask pieces dropped and values hoisted to the launcher. Names the kernel and launcher share with
the program (pointers, sizes) come from a `Namespace`, so no program name can collide with ours.

Boundaries are literals in "constant values" mode; in "symbolic values" mode they are runtime
integers passed divided by their guarded power-of-two divisor and multiplied back in the kernel, so
Triton can prove what the analysis proved. Masks use only `idx < c` and `idx >= c`.
"""
from __future__ import annotations

import collections
import dataclasses
import keyword
import math
import re

import torch

from ir import IntProxy, TensorProxy, prims
from ir.proxies import FloatProxy, hint, same_shape, same_size
from ir.trace import render
from triton_exec import index, vectorize
from triton_exec.merge import Merged, merge_inner_dims
from triton_exec.rules import register, rule_of
from triton_exec.vectorize import Path

TL_DTYPE = {torch.float32: "tl.float32", torch.float16: "tl.float16",
            torch.bfloat16: "tl.bfloat16", torch.int32: "tl.int32", torch.int64: "tl.int64",
            torch.int16: "tl.int16", torch.int8: "tl.int8", torch.uint8: "tl.uint8",
            torch.bool: "tl.int1"}
INT32_LIMIT = 2 ** 31
ARANGES = frozenset({"row_arange", "col_arange", "fcol_arange"})   # what varies within a tile
COMPUTE_DTYPE = {torch.float16: torch.float32, torch.bfloat16: torch.float32}

# Transcendental ops go through libdevice (`triton_exec.kernel_math`): `tl.exp`, `tl.sin`, ...
# lower to approximate instructions, and formulas such as 2 / (1 + exp(-2x)) - 1 for tanh lose
# all relative accuracy near 0. Square root and the division in sigmoid round correctly.
UNARY_SRC = {"neg": "-{0}", "abs": "tl.abs({0})", "exp": "libdevice.exp({0})",
             "log": "libdevice.log({0})", "sin": "libdevice.sin({0})", "cos": "libdevice.cos({0})",
             "sqrt": "tl.sqrt_rn({0})", "rsqrt": "libdevice.rsqrt({0})",
             "sigmoid": "tl.div_rn(1.0, 1.0 + libdevice.exp(-{0}))",
             "tanh": "libdevice.tanh({0})", "erf": "libdevice.erf({0})",
             "silu": "tl.div_rn({0}, 1.0 + libdevice.exp(-{0}))",
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
COMPARE = frozenset({"gt", "lt", "ge", "le", "eq", "ne"})


@dataclasses.dataclass
class Access:
    """One global load or store of the kernel and its vector width (elements per access)."""

    kind: str           # "load" or "store"
    tensor: str         # the trace name of the tensor
    what: str           # which part: "plain", "pad", "slice", "cat piece 1 of 2", ...
    width: int

    number: int = 0     # position among the kernel's accesses
    along_cols: bool = True     # its address walks the tile's columns one element at a time

    @property
    def label(self) -> str:
        return f"{self.kind} {self.number} {self.tensor} ({self.what})"


@dataclasses.dataclass(frozen=True)
class Stride:
    """The host value `tensor.stride(dim)` (a runtime integer the launcher reads)."""

    tensor: object
    dim: int


@dataclasses.dataclass
class Param:
    """A kernel parameter and what the launcher passes for it: a tensor's pointer (`tensor`, an
    input TensorProxy), output `output`'s pointer, or an integer (`value`: an expression of
    runtime integers whose leaves have an IntProxy or a `Stride` as `source`)."""

    name: str
    kind: str                   # "pointer", "int" or "float" (an fp32 scalar)
    tensor: object = None
    output: int | None = None
    value: index.Expr | None = None

    @property
    def strided(self):
        """The tensor whose strides this integer reads, if any."""
        leaves = index.leaves(self.value) if self.value is not None else []
        return next((l.source.tensor for l in leaves if isinstance(l.source, Stride)), None)

    def evaluate(self, tensors: dict, outputs: list):
        """Its value for example arguments: `tensors` by trace name, `outputs` by position."""
        if self.kind == "pointer":
            return outputs[self.output] if self.output is not None else tensors[self.tensor.name]
        return index.evaluate(self.value, lambda leaf: _host_value(leaf.source, tensors))

    def source(self, name_of) -> str:
        """Python source in the launcher: `name_of(x)` names a TensorProxy, an IntProxy, the
        strides of a TensorProxy (`Stride(t, None)`) or an output position."""
        if self.kind == "pointer":
            return name_of(self.output if self.output is not None else self.tensor)
        return index.render_host(self.value, lambda leaf: _host_source(leaf.source, name_of),
                                 top=True)


def _host_value(source, tensors):
    if isinstance(source, Stride):
        return tensors[source.tensor.name].stride(source.dim)
    return hint(source)


def _host_source(source, name_of) -> str:
    if isinstance(source, Stride):
        return f"{name_of(Stride(source.tensor, None))}[{source.dim}]"
    return name_of(source)


class Namespace:
    """Names of one generated function: each name handed out once, never a reserved one, so
    names taken from the user's program (arguments, trace values) cannot collide with ours."""

    def __init__(self, reserved=()):
        self.taken = set(reserved) | set(keyword.kwlist) | {"True", "False", "None"}
        self.counter = 0

    def take(self, name: str) -> str:
        """`name`, or `name_2`, `name_3`, ... when it is taken."""
        candidate, k = name, 1
        while candidate in self.taken:
            k += 1
            candidate = f"{name}_{k}"
        self.taken.add(candidate)
        return candidate

    def fresh(self, prefix: str) -> str:
        """A new numbered name: `v1`, `m2`, ... (one counter for all prefixes)."""
        while True:
            self.counter += 1
            if f"{prefix}{self.counter}" not in self.taken:
                return self.take(f"{prefix}{self.counter}")


KERNEL_RESERVED = {"tl", "triton", "libdevice", "narrow", "ROWS", "COLS", "VEC", "LOOP", "j",
                   "pid", "col_blocks", "rows", "cols", "in_domain", "float", "int"}
# How generated kernels are compiled: no `a * b + c` contracted into one fma (eager rounds the
# product), so fp32 chains and fp16/bf16 ops round as eager's (`triton_exec.narrow_math`).
KERNEL_OPTIONS = {"enable_fp_fusion": False}


@dataclasses.dataclass
class Lowered:
    """What the code generator produced for one group."""

    name: str
    source: str                 # the @triton.jit function
    params: list                # Param, in kernel order (constexprs follow: ROWS, COLS, VEC)
    accesses: list              # Access
    guards: list                # (op, a, b) for the prologue
    rows: index.Expr            # flattened outer extent (host-known)
    cols: index.Expr            # innermost extent (host-known)
    outputs: list               # TensorProxy outputs, in store order
    itemsizes: list             # itemsize of every access, for the launch heuristic
    size_vars: list             # Int/FloatProxies of the trace the kernel's parameters read
    contiguous_inputs: list     # names of inputs the launcher makes contiguous first
    aligned_pointers: bool      # whether launches specialize pointers on 16-byte alignment
    allocated: tuple            # the outputs' shape (ints and IntProxies): () for a 0-d output
    tiled: tuple                # the shape the kernel tiles: after the inner-dim merge
    chunks: tuple = ()          # Chunk: column chunks computed one by one (the launch covers
                                # the columns with one block: COLS >= the extent); () when whole
    loop: "LoopDim | None" = None   # the outer dim a loop in each program walks (LOOP indices
                                    # per program, the grid's second axis); `rows` excludes it

    @property
    def domain(self) -> tuple:
        """The outputs' shape, (1,) for a 0-d output."""
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


@dataclasses.dataclass(frozen=True)
class LoopDim:
    """The dim of the tiled domain that a loop inside each program walks, and its extent."""

    dim: int
    extent: int                 # in the building call (a runtime size's value then)
    size: index.Expr            # the extent: a constant, or runtime integers the host knows


def _compute_dtype(dtype):
    return COMPUTE_DTYPE.get(dtype, dtype)


def negative_zero(shape: str) -> str:
    """A tile of -0.0 of `shape` ("[ROWS, COLS]")."""
    return f"tl.full({shape}, -2147483648, tl.int32).to(tl.float32, bitcast=True)"


def _is_negative_zero(value) -> bool:
    return isinstance(value, float) and value == 0 and math.copysign(1.0, value) < 0


def _literal(value, shape: str) -> str:
    """Kernel source of a Python number. Triton makes every constant equal to 0 a +0.0, so -0.0
    is built from its bits (a tile of `shape`)."""
    if isinstance(value, bool):
        return str(int(value))
    if _is_negative_zero(value):
        return negative_zero(shape)
    return render(value)


def _known(x) -> bool:
    return not isinstance(x, IntProxy)


@dataclasses.dataclass
class Pairs:
    """Pair tiling, for groups that interleave pairs along the innermost dim (`unflatten(-1,
    (-1, 2))`, `x[..., ::2]`, `torch.stack((a, b), -1).flatten(-2)`: the interleaved RoPE).

    Each lane of the [ROWS, COLS] tile computes both elements of one pair of the innermost
    output dim: `cols` walks the pairs, and the group's values are computed twice, for the
    element index 2 * cols + 0 and 2 * cols + 1 (`trailing`: the domain's innermost dim is the
    pair itself, indexed 0 and 1). The two results are interleaved in registers (`tl.join`) and
    stored as one contiguous tile [ROWS, 2 * COLS] walked by `full_cols`. A load at `2 * cols +
    c` is one contiguous load of the full tile split in registers (`tl.split`), so both elements
    come from one vector access; a load at `cols + c` (per pair: a RoPE's cos and sin) is a
    contiguous load of the pair tile. Widths are read from the index and the mask, as Triton
    proves them: contiguous along the column leaf, V dividing the offset's remainder and every
    mask boundary along it."""

    trailing: bool
    extent: index.Expr          # pairs along the innermost dim
    full_cols: index.Leaf       # index along the innermost dim of the full tile
    full_extent: index.Expr

    def gcd(self, inner, mask, leaf) -> int:
        """The largest power of two (up to the analysis' cap) that divides the innermost index
        less its column leaf and each mask boundary along that leaf."""
        g = index.add(inner, index.mul(leaf, -1)).divisor
        for atom in mask.atoms:
            if not atom.a.deps & leaf.deps - {"pid"} and not atom.b.deps & leaf.deps - {"pid"}:
                continue
            if index.coefficient(atom.a, leaf) != 1 or atom.b.tiled:
                return 1
            g = math.gcd(g, index.add(atom.b, index.mul(index.add(atom.a, index.mul(leaf, -1)),
                                                           -1)).divisor)
        return min(g, vectorize.DIVISOR_CAP)

    def to_full(self, mask, cols):
        """The mask of a pair lane as a mask of both its elements on the full tile: an atom
        `cols + e < b` holds for the pair exactly when `full_cols + 2e < 2b` holds for each
        element (also for `>=`); None when an atom has another form."""
        atoms = []
        for atom in mask.atoms:
            if not (atom.a.deps | atom.b.deps) & {"col_arange"}:
                atoms.append(atom)
                continue
            if index.coefficient(atom.a, cols) != 1 or atom.b.tiled:
                return None
            e = index.add(atom.a, index.mul(cols, -1))
            atoms.append(index.Less(index.add(self.full_cols, index.mul(e, 2)),
                                    index.mul(atom.b, 2), atom.negated))
        return index.Mask(tuple(atoms))


class KernelWriter:
    """Builds one kernel: lines of its body, its parameters, its accesses and guards. Index and
    mask math is built as `index` nodes; values are named tiles (`v1`, `v2`, ...)."""

    def __init__(self, values, producers, vectorize_enabled: bool, max_vector: int):
        self.values = values                  # id(input Var) -> example runtime value
        self.producers = producers            # id(Var) -> the group equation defining it
        self.max_vector = max_vector          # 16 bytes of the group's narrowest dtype
        self.stride_dims: dict = {}           # id(input) -> its original dim per dim (merges)
        self.contiguous_inputs: list = []     # inputs the launcher makes contiguous
        self.originals: dict = {}             # id(merged input) -> its unmerged proxy
        self.vectorize = vectorize_enabled
        self.names = Namespace(KERNEL_RESERVED)
        self.lines: list[str] = []
        self.prelude: list[str] = []        # runtime values multiplied back by their divisor
        self.params: list[Param] = []
        self.accesses: list[Access] = []
        self.guards: list = []
        self.itemsizes: list = []
        self.memo: dict = {}
        self.leaves: dict = {}              # IntProxy id / Stride -> its kernel Leaf
        self.hoisted: dict = {}             # host-known Expr -> kernel name of its parameter
        self.pointers: dict = {}            # id(TensorProxy) -> kernel name of its pointer
        self.narrow = True                  # int32 logical indices (see _narrow_indices)
        self.used: set = set()              # runtime integers the kernel reads
        self.render = index.Renderer(self.lines, self.names.fresh, self.hoist, self.use)
        self.rows = self.cols = None
        self.zeros: dict = {}               # tile shape -> its int32 zero tile
        self.shape = "[ROWS, COLS]"         # the tile's shape: a column chunk's, when chunked
        self.narrow_tiles: dict = {}        # fp32 name of an fp16/bf16 value -> its NarrowTile
        self.column_leaves: list = []       # the column index leaves: the tile's or its chunks'
        self.pairs: Pairs | None = None     # pair tiling (see `Pairs`), or None
        self.loop: Loop | None = None       # the loop over an outer dim (see `Loop`), or None
        self.pair_loads: dict = {}          # (tensor, full offset, full mask) -> its two halves
        self.views: dict = {}               # (id(input), first merged dim) -> its merged view
        self.int32_offsets: dict = {}       # id(input) -> whether its offsets fit int32
        self.loads: dict = {}               # (pointer, offset, mask, shape) -> the loaded value

    # ---- names -------------------------------------------------------------------------
    def let(self, prefix: str, expr: str, comment: str = "") -> str:
        name = self.names.fresh(prefix)
        self.lines.append(f"{name} = {expr}" + (f"  # {comment}" if comment else ""))
        return name

    def mask_name(self, mask, comment: str = "", full: bool = False) -> str:
        """The kernel name of a (not always false) mask, bound once; `full`: of the full tile
        [ROWS, 2 * COLS] of pair tiling."""
        mask = index.Mask(tuple(self.tiled_atom(a, full) for a in mask.atoms))
        if mask in self.render.names:
            return self.render.names[mask]
        return self.render.bind(mask, self.names.fresh("m"), comment)

    def tiled_atom(self, atom, full: bool = False):
        """An atom computed per lane: one that no arange reaches (`0 < i1`, or `o1 < 3` on a loop
        dim's index) compares the zero tile instead (a scalar in a mask is refused by Triton
        3.9's interpreter)."""
        if (atom.a.deps | atom.b.deps) & ARANGES:
            return atom
        return index.Less(index.add(self.zero_tile(full), atom.a), atom.b, atom.negated)

    def constant_tile(self, value, dtype) -> str:
        """A tile holding `value` (a number or a runtime integer) in dtype's compute type."""
        if _is_negative_zero(value):
            return self.let("v", negative_zero(self.shape))
        return self.let("v", f"tl.full({self.shape}, {self.value(value, [], index.TRUE, None)}, "
                             f"{TL_DTYPE[_compute_dtype(dtype)]})")

    # ---- runtime integers ------------------------------------------------------------------
    def runtime_int(self, source, name: str, divisor: int, bounded: bool) -> index.Leaf:
        """The kernel leaf of a runtime integer (an IntProxy or a Stride). With `divisor` > 1 it
        arrives divided (`name_div4`) and is multiplied back in the prelude, in int64 unless
        `bounded` (a guard keeps it below 2**31). Its parameter is added when it is first used."""
        key = id(source) if isinstance(source, IntProxy) else source
        leaf = self.leaves.get(key)
        if leaf is not None and (divisor == 1 or leaf.divisor > 1):
            return leaf
        name = leaf.name if leaf is not None else self.names.take(name)
        wide = divisor > 1 and not bounded
        new = index.Leaf(name, frozenset({name}), 64 if wide else 32, divisor, source=source)
        self.leaves[key] = new
        if leaf is not None and name in self.used:      # passed undivided so far: divide it
            self.params = [p for p in self.params if p.name != name]
            self.used.discard(name)
            self.use(new)
        return new

    def use(self, leaf: index.Leaf) -> None:
        """Called by the renderer for each leaf it writes: adds a runtime integer's parameter."""
        if leaf.source is None or leaf.name in self.used:
            return
        self.used.add(leaf.name)
        leaf = self.leaves[id(leaf.source) if isinstance(leaf.source, IntProxy) else leaf.source]
        host = index.Leaf(leaf.name, leaf.deps, source=leaf.source)
        if leaf.divisor == 1:
            self.params.append(Param(leaf.name, "int", value=host))
            return
        divided = self.names.take(f"{leaf.name}_div{leaf.divisor}")
        self.params.append(Param(divided, "int", value=index.floordiv(host, leaf.divisor)))
        self.prelude.append(f"{leaf.name} = {_int64(divided) if leaf.bits == 64 else divided}"
                            f" * {leaf.divisor}")

    def bound(self, e, comment: str):
        """e, bound to a name (`r1`) when it is a compound value of the tile."""
        if e.tiled and not isinstance(e, index.Leaf):
            self.render.bind(e, self.names.fresh("r"), comment)
        return e

    def size(self, x, inner: bool = False):
        """The index node of an integer of the trace: a constant, or a runtime parameter. A
        runtime size used along the innermost dim (`inner`) arrives divided by its guarded
        power-of-two divisor, so Triton can prove what the vectorization analysis proved."""
        if _known(x):
            return index.Const(int(x))
        scale = vectorize.divisor_of(x, self.max_vector) if inner and self.vectorize else 1
        leaf = self.leaves.get(id(x))
        if scale > 1 and (leaf is None or leaf.divisor == 1):
            self.guards.append(("divisible", x, scale))
        return self.runtime_int(x, x.name, scale, bounded=self.narrow)

    def hoist(self, e: index.Expr) -> str:
        """The kernel name of a compound value the host knows: a parameter the launcher
        computes (divided by its known divisor, multiplied back in the prelude)."""
        if e in self.hoisted:
            return self.hoisted[e]
        divisor = min(e.divisor, vectorize.DIVISOR_CAP) if self.vectorize else 1
        name = self.names.fresh("h")
        wide = divisor > 1 and not self.narrow
        if divisor > 1:
            param = self.names.take(f"{name}_div{divisor}")
            self.prelude.append(f"{name} = {_int64(param) if wide else param} * {divisor}"
                                f"  # {self.describe(e)}")
        else:
            param = name
            self.prelude.append(f"# {name} = {self.describe(e)}")
        self.params.append(Param(param, "int", value=index.floordiv(e, divisor)))
        self.hoisted[e] = name
        return name

    def describe(self, e) -> str:
        """e as a comment: Python over the kernel's names."""
        return index.render_host(e, lambda leaf: leaf.name, top=True)

    # ---- loads and values ----------------------------------------------------------------
    def load(self, t: TensorProxy, idx, mask, path: Path, what: str) -> str:
        example = self.values.get(id(t))
        argument = example is not None       # the prologue can guard its layout
        if not argument:    # made by torch in this computation: the launcher makes it
            self.contiguous_inputs.append(t.name)       # contiguous, so its layout is known
            constant = all(_known(s) for s in t.shape)
            example = _contiguous_example(t if constant else self.originals.get(id(t), t))
        else:
            constant = False
        inner = t.ndim - 1
        original_dims = self.stride_dims.get(id(t), range(t.ndim))
        if argument:    # the kernel reads raw storage: a view with the negative bit must not come
            self.guards.append(("not_neg", t, None))
        self.offsets_fit_int32(t, example, argument)
        layout = (example, constant, argument, original_dims)
        halves = self.pair_dim_load(t, idx, mask, what, layout)
        if halves is not None:
            return halves
        terms, outer_strides, outer_dims = [], [], []
        for d, (i, s) in enumerate(zip(idx, t.shape)):
            if _known(s) and s == 1:
                continue
            od = d if constant else original_dims[d]
            if d == inner and example.stride(od) == 1:
                if argument:
                    self.guards.append(("stride_eq", t, (od, 1)))
                terms.append(i)
                continue
            if d != inner:
                outer_strides.append(example.stride(od) if argument or constant else 1)
                outer_dims.append(od)
            terms.append(self.stride_term(t, i, od, layout))
        inner_stride = (example.stride(inner if constant else original_dims[inner])
                        if t.ndim else 0)
        walks = bool(idx) and t.ndim and index.coefficient(idx[-1], self.cols) == 1
        inner_path = path if walks else path.broken()
        dims = (original_dims[inner] if t.ndim else 0, outer_dims) if argument else None
        if self.pairs is not None and t.ndim and inner_stride == 1:
            if index.coefficient(idx[-1], self.cols) == 2 and not _is(t.shape[-1], 1):
                halves = self.pair_load(t, example, terms[:-1], idx[-1], t.shape[-1], mask,
                                        what, outer_strides, dims)
                if halves is not None:
                    return halves
            # pair tiling: the width is what the index and the mask show Triton
            inner_path = Path(self.pairs.gcd(idx[-1], mask, self.cols)) if walks else path.broken()
        return self.emit_load(t, example, index.add(*terms), mask, inner_path, what,
                              inner_stride, outer_strides, dims)

    def offsets_fit_int32(self, t, example, argument: bool) -> bool:
        """Whether every offset into t fits int32 (its products with runtime strides are then
        int32): with int32 logical indices, a tensor torch makes (fewer than 2**31 elements,
        see `_narrow_indices`), or an argument whose span (its farthest element from its first,
        `sum((size - 1) * |stride|)`) is below 2**31, a guard of the entry."""
        key = id(self.originals.get(id(t), t))
        if key not in self.int32_offsets:
            fits = self.narrow and (not argument or sum(
                (n - 1) * abs(st) for n, st in zip(example.shape, example.stride())) < INT32_LIMIT)
            if fits and argument:
                self.guards.append(("stride_span_lt", t, INT32_LIMIT))
            self.int32_offsets[key] = fits
        return self.int32_offsets[key]

    def stride_term(self, t, i, od, layout):
        """Index i times the stride of t's (original) dim od: a literal for a tensor torch
        makes with constant sizes, else a runtime stride passed divided by its guarded
        power-of-two divisor (int64 products where an index times a stride can pass 2**31,
        int32 where `offsets_fit_int32`)."""
        example, constant, argument, _ = layout
        stride = example.stride(od)
        if constant:
            return index.mul(i, stride)
        scale = (vectorize.pow2_divisor(stride, self.max_vector)
                 if self.vectorize and argument else 1)
        if scale > 1 and Stride(self.originals.get(id(t), t), od) not in self.leaves:
            self.guards.append(("stride_divisible", t, (od, scale)))
        fits = self.offsets_fit_int32(t, example, argument)
        leaf = self.runtime_int(Stride(self.originals.get(id(t), t), od),
                                f"{t.name}_stride{od}", scale, bounded=fits)
        return index.mul(i if fits else index.widen(i), leaf)

    def pair_dim_load(self, t, idx, mask, what, layout):
        """Under pair tiling, a tensor whose innermost dim holds the pairs ([..., n, 2], dim -2
        walked by `cols`): its last two dims are one dim of 2n where they compose (strides 2 and
        1; guarded for an argument), read as interleaved pairs (`pair_load`); None otherwise."""
        example, constant, argument, original_dims = layout
        if (self.pairs is None or t.ndim < 2 or not _is(t.shape[-1], 2)
                or not isinstance(idx[-1], index.Const)
                or index.coefficient(idx[-2], self.cols) != 1):
            return None
        d2, d1 = (t.ndim - 2, t.ndim - 1) if constant else tuple(original_dims[-2:])
        if example.stride(d1) != 1 or example.stride(d2) != 2:
            return None
        terms, outer_strides, outer_dims = [], [], []
        for d, (i, s) in enumerate(zip(idx[:-2], t.shape[:-2])):
            if _known(s) and s == 1:
                continue
            od = d if constant else original_dims[d]
            outer_strides.append(example.stride(od) if argument or constant else 1)
            outer_dims.append(od)
            terms.append(self.stride_term(t, i, od, layout))
        inner = index.add(index.mul(idx[-2], 2), idx[-1])
        n = t.shape[-2]     # the extent of the two dims as one: 2n (a runtime n: the mask's)
        extent = 2 * n if _known(n) else vectorize.DIVISOR_CAP
        halves = self.pair_load(t, example, terms, inner, extent, mask, what, outer_strides,
                                (d1, outer_dims) if argument else None)
        if halves is not None and argument:
            self.guards += [("stride_eq", t, (d1, 1)), ("strides_compose", t, (d2, d1, 2))]
        return halves

    def pair_load(self, t, example, outer_terms, inner, extent, mask, what, outer_strides,
                  dims):
        """Under pair tiling, a load at `2 * cols + c` (the pairs' elements, interleaved): one
        contiguous load of both elements of each pair on the full tile, split in registers
        (`tl.split`); the half `c % 2` is the value. None where the mask or the tensor's extent
        cannot be carried to the full tile (the strided load then serves)."""
        if mask.false:
            return None
        rest = index.add(inner, index.mul(self.cols, -2))
        parity = index._terms(rest)[1] % 2
        base = index.add(rest, -parity)
        if base.divisor % 2 or (_known(extent) and extent % 2) or (
                not _known(extent) and vectorize.hint_of(extent) % 2):
            return None
        full_mask = self.pairs.to_full(mask, self.cols)
        if full_mask is None:
            return None
        if not _known(extent):      # both elements of a pair lie inside the tensor
            self.guards.append(("divisible", extent, 2))
        offset = index.add(*outer_terms, self.pairs.full_cols, base)
        key = (id(t), offset, full_mask)
        if key not in self.pair_loads:
            g = self.pairs.gcd(index.add(self.pairs.full_cols, base), full_mask,
                               self.pairs.full_cols)
            value = self.emit_load(t, example, offset, full_mask, Path(g), f"{what}, pairs",
                                   1, outer_strides, dims, full=True, inner_extent=extent)
            halves = (self.names.fresh("v"), self.names.fresh("v"))
            self.lines.append(f"{halves[0]}, {halves[1]} = "
                              f"tl.split(tl.reshape({value}, [ROWS, COLS, 2]))")
            self.pair_loads[key] = halves
        return self.pair_loads[key][parity]

    def merged_view(self, t, i):
        """t, an input of the group, with its dims i.. read as one: where their strides compose
        (guarded for an argument; true of a contiguous tensor torch made) and their sizes are
        constants; None otherwise, and for a value the group computes."""
        if id(t) in self.producers or not all(_known(s) for s in t.shape[i:]):
            return None
        key = (id(t), i)
        if key not in self.views:
            example = self.values.get(id(t))
            dims = list(self.stride_dims.get(id(t), range(t.ndim)))
            original = self.originals.get(id(t), t)
            composed = [(dims[d], dims[-1], math.prod(t.shape[d + 1:]))
                        for d in range(i, t.ndim - 1) if t.shape[d] != 1]
            if example is not None and any(example.stride(a) != example.stride(b) * p
                                           for a, b, p in composed):
                return None
            view = TensorProxy(t.name, tuple(t.shape[:i]) + (math.prod(t.shape[i:]),), t.dtype,
                               t.device, t.requires_grad)
            self.stride_dims[id(view)] = dims[:i] + [dims[-1]]
            self.originals[id(view)] = original
            if example is not None:
                self.values[id(view)] = example
                self.guards += [("strides_compose", original, c) for c in composed]
            self.views[key] = view
        return self.views[key]

    def pointer(self, t) -> str:
        if id(t) not in self.pointers:
            self.pointers[id(t)] = self.names.take(f"{t.name}_ptr")
            self.params.append(Param(self.pointers[id(t)], "pointer",
                                     tensor=self.originals.get(id(t), t)))
        return self.pointers[id(t)]

    def emit_load(self, t, example, offset, mask, path, what, inner_stride, outer_strides,
                  dims, full: bool = False, inner_extent=None) -> str:
        """dims: for an argument (whose layout the prologue guards), the original dim of its
        innermost dim and those of `outer_strides`; None for a tensor made by torch. `full`:
        a load of the full tile [ROWS, 2 * COLS] of pair tiling, whose innermost extent is
        `inner_extent` (t's last two dims viewed as one)."""
        if inner_extent is None:
            inner_extent = t.shape[-1] if t.ndim else 1
        if mask.false:      # no lane of the domain reads it: the value is `other`
            return self.constant_tile(0, t.dtype)
        ptr = self.pointer(t)
        key = (ptr, offset, mask, "[ROWS, 2 * COLS]" if full else self.shape)
        if key in self.loads:       # the same load reached on another path (a view of t)
            return self.loads[key]

        def width_at(data_ptr, inner=inner_stride, outer=tuple(outer_strides)):
            return vectorize.load_width(path, example.element_size(), inner_extent, inner, outer,
                                        data_ptr, self.vectorize)
        width = width_at(_data_ptr(example))
        if dims is not None:
            if width > 1:
                self.guards.append(("aligned", t, vectorize.ACCESS_BYTES))
            self.guard_narrowing(t, example, width, width_at, dims)
        leaf = self.pairs.full_cols if full else self.cols
        self.accesses.append(Access("load", t.name, what, width, len(self.accesses),
                                    index.coefficient(offset, leaf) == 1))
        self.itemsizes.append(example.element_size())
        offset = self.tile_shaped(offset, full)
        value = self.let("v", f"tl.load({ptr} + {self.render.expr(offset, top=True)}, "
                              f"mask={self.mask_name(mask, full=full)}, other=0)",
                         f"{t.name}: {what}, {width} per access")
        if t.dtype in COMPUTE_DTYPE:
            value = _held(self, value, t.dtype)
        self.loads[key] = value
        return value

    def guard_narrowing(self, t, example, width, width_at, dims):
        """Guards the class of each layout fact of argument t that alone narrows this access: a
        misaligned base, an innermost stride other than 1, an outer stride divisible by less
        (`x_strides[0] % 8 != 0` beside `% 4 == 0`). An input without that narrowing then misses
        this entry and compiles its own, wider one instead of reusing it."""
        data_ptr = _data_ptr(example)
        if width_at(0) > width:
            self.guards.append(("misaligned", t, vectorize.ACCESS_BYTES))
        inner_dim, outer_dims = dims
        if t.ndim and example.stride(inner_dim) != 1 and width_at(data_ptr, inner=1) > width:
            self.guards.append(("stride_ne", t, (inner_dim, 1)))
        strides = [example.stride(d) for d in outer_dims]
        for k, (d, s) in enumerate(zip(outer_dims, strides)):
            divisor = vectorize.pow2_divisor(s, self.max_vector)
            wider = width_at(data_ptr, outer=tuple(strides[:k] + [0] + strides[k + 1:]))
            if divisor < self.max_vector and wider > width:
                self.guards.append(("stride_indivisible", t, (d, 2 * divisor)))

    def tile_shaped(self, offset, full: bool = False):
        """An offset of the tile's shape [ROWS, COLS] ([ROWS, 2 * COLS]: `full`) (a pointer of
        another shape than its mask is refused by Triton, and by Triton 3.9's interpreter even
        where it broadcasts)."""
        if {"row_arange", "fcol_arange" if full else "col_arange"} <= offset.deps:
            return offset
        return index.add(self.zero_tile(full), offset)

    def output_pointer(self, k: int) -> str:
        """The kernel name of output k's pointer (a parameter added when first used)."""
        key = ("output", k)
        if key not in self.pointers:
            self.pointers[key] = self.names.take(f"out{k}_ptr")
            self.params.append(Param(self.pointers[key], "pointer", output=k))
        return self.pointers[key]

    def zero_tile(self, full: bool = False) -> index.Leaf:
        """The int32 zero tile of the tile's shape (`full`: pair tiling's [ROWS, 2 * COLS])."""
        shape = "[ROWS, 2 * COLS]" if full else self.shape
        if shape not in self.zeros:
            name = self.names.take("zeros")
            self.lines.append(f"{name} = tl.full({shape}, 0, tl.int32)")
            self.zeros[shape] = index.Leaf(name, index.TILE, 32, index.DIVISOR_LIMIT, 0, 1)
        return self.zeros[shape]

    def float_param(self, x: FloatProxy) -> str:
        """The kernel name of a runtime float of the trace: an fp32 scalar parameter."""
        leaf = self.leaves.get(id(x))
        if leaf is None:
            name = self.names.take(x.name)
            leaf = self.leaves[id(x)] = index.Leaf(name, frozenset(), source=x)
            self.params.append(Param(name, "float", value=leaf))
        return leaf.name

    def value(self, v, idx, mask, path: Path, what: str = "plain") -> str:
        """Kernel name of the tile holding v at index idx (one index node per dim of v), under
        `mask`: every lane the mask keeps has 0 <= idx[d] < v.shape[d]."""
        if isinstance(v, FloatProxy):
            return self.float_param(v)
        if not isinstance(v, TensorProxy):
            if _known(v):
                return _literal(v, self.shape)
            return self.render.expr(self.size(v), top=True)
        key = (id(v), tuple(idx), mask, self.shape)       # chunks of one width share values
        if key in self.memo:
            return self.memo[key]
        eqn = self.producers.get(id(v))
        result = (self.load(v, idx, mask, path, what) if eqn is None
                  else rule_of(eqn).lower(self, eqn, idx, mask, path))
        self.memo[key] = result
        return result


def _int64(name: str) -> str:
    """A scalar parameter in int64 (`tl.cast`: Triton passes an integer equal to 1 as a Python
    int, which has no `.to`)."""
    return f"tl.cast({name}, tl.int64)"


def _contiguous_example(t):
    return torch.empty([vectorize.hint_of(s) for s in t.shape], dtype=t.dtype, device="meta")


def _data_ptr(example) -> int:
    """Base address of an example input; 0 (aligned) for a tensor torch allocates at run time."""
    return 0 if example.device.type == "meta" else example.data_ptr()


# ---- per-prim lowering rules: (writer, eqn, idx, mask, path) -> value name --------------------

@dataclasses.dataclass(frozen=True)
class NarrowTile:
    """A value of an fp16/bf16 tensor as a tile of that dtype: `name`, or minus it (`negated`:
    a negation is folded into the ops that use it, as `a - b` for `a + (-b)`). Every such value
    the kernel computes is held rounded to its dtype, as eager holds it; its fp32 tile, which
    the other ops use, is the same number."""

    name: str
    dtype: torch.dtype
    negated: bool = False


def _held(w, narrow: str, dtype, negated: bool = False) -> str:
    """The fp32 tile of the narrow tile `narrow` (exact), recorded as held in `dtype`."""
    wide = w.let("v", f"{narrow}.to(tl.float32)" + (" * -1.0" if negated else ""))
    w.narrow_tiles[wide] = NarrowTile(narrow, dtype, negated)
    return wide


def _rounded(w, src: str, dtype) -> str:
    """The fp32 tile `src` rounded to nearest even in the narrow float `dtype`, as eager rounds
    every fp16/bf16 result (an fp32 tile of the rounded values; `narrow.round`: Triton's
    interpreter truncates `.to(tl.bfloat16)`)."""
    narrow = w.let("v", f"narrow.round({src}, {TL_DTYPE[dtype]})",
                   f"rounded to {str(dtype).removeprefix('torch.')}")
    return _held(w, narrow, dtype)


def _narrow_operand(w, wide: str, dtype) -> NarrowTile:
    """The narrow tile of a value held in `dtype` (rounding its fp32 tile, exactly, where the
    kernel has none)."""
    tile = w.narrow_tiles.get(wide)
    if tile is None or tile.dtype != dtype:
        tile = NarrowTile(w.let("v", f"narrow.round({wide}, {TL_DTYPE[dtype]})"), dtype)
        w.narrow_tiles[wide] = tile
    return tile


def _representable(x, dtype) -> bool:
    """Whether a Python number is exactly a value of the float `dtype` (NaN and infinities are)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return False
    return math.isnan(x) or torch.tensor(float(x), dtype=torch.float64).to(dtype).item() == x


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
        return _held(w, w.let("v", f"narrow.mul({a.name}, {b.name})"), dtype,
                     a.negated != b.negated)
    if name == "sub":
        b = dataclasses.replace(b, negated=not b.negated)
    if a.negated and b.negated:             # -a + -b: materialize a
        a = NarrowTile(w.let("v", f"narrow.round({a.name}.to(tl.float32) * -1.0, "
                                  f"{TL_DTYPE[dtype]})"), dtype)
    if a.negated:
        a, b = b, a
    op = "sub" if b.negated else "add"
    return _held(w, w.let("v", f"narrow.{op}({a.name}, {b.name})"), dtype)


def _elementwise(w, eqn, idx, mask, path):
    """An elementwise op; an fp16/bf16 result is rounded to its dtype, as eager rounds it (add,
    sub and mul of two such tensors computed on narrow tiles, see `narrow_math`)."""
    name, dtype = eqn.prim.name, eqn.out.dtype
    args = [w.value(a, idx, mask, path) for a in eqn.args]
    narrow = dtype in COMPUTE_DTYPE
    if narrow and name in ROUNDED_NUMBERS:  # a runtime float, converted to the dtype as eager does
        args = [_rounded(w, s, dtype) if isinstance(a, FloatProxy) else s
                for a, s in zip(eqn.args, args)]
    held = [a is None or isinstance(a, TensorProxy) and a.dtype == dtype
            or _representable(a, dtype) for a in eqn.args]
    if narrow and name in NATIVE_NARROW and all(isinstance(a, TensorProxy) for a in eqn.args) \
            and all(held):
        return _native(w, name, *(_narrow_operand(w, a, dtype) for a in args), dtype)
    result = _fp32_elementwise(w, eqn, args)
    if not narrow or (name in EXACT_ON_HELD and all(held)):
        if narrow and name == "neg" and args[0] in w.narrow_tiles:      # fold the sign into users
            tile = w.narrow_tiles[args[0]]
            w.narrow_tiles[result] = dataclasses.replace(tile, negated=not tile.negated)
        return result
    return _rounded(w, result, dtype)


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
    return w.let("v", BINARY_SRC[name].format(a, b_src, nan=nan))


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
        return _rounded(w, src, to)
    return w.let("v", f"{src}.to({TL_DTYPE[to]})")


def _where(w, eqn, idx, mask, path):
    c, a, b = (w.value(x, idx, mask, path) for x in eqn.args)
    return w.let("v", f"tl.where({c}, {a}, {b})")


def _full(w, eqn, idx, mask, path):
    dtype, value = _compute_dtype(eqn.params["dtype"]), eqn.params["value"]
    if _is_negative_zero(value):
        return w.let("v", negative_zero(w.shape))
    return w.let("v", f"tl.full({w.shape}, {w.value(value, [], index.TRUE, path)}, {TL_DTYPE[dtype]})")


def _slice(w, eqn, idx, mask, path):
    t, starts, stops, steps = eqn.args
    new, inner = [], len(idx) - 1
    for d, (i, start, step) in enumerate(zip(idx, starts, steps)):
        new.append(index.add(index.mul(i, step), w.size(start, inner=d == inner)))
        if d == inner:
            path = path.through(start, t.shape[d]) if step == 1 else path.broken()
    return w.value(t, new, mask, path, "slice")


def _pad(w, eqn, idx, mask, path):
    t, config = eqn.args
    new, valid, inner = [], index.TRUE, len(idx) - 1
    for d, (i, (lo, hi)) in enumerate(zip(idx, config)):
        if _known(lo) and _known(hi) and lo == hi == 0:
            new.append(i)
            continue
        lo_i, size_i = w.size(lo, inner=d == inner), w.size(t.shape[d], inner=d == inner)
        valid = valid & index.at_least(i, lo_i) & index.less(i, index.add(lo_i, size_i))
        new.append(index.add(i, index.mul(lo_i, -1)))
        if d == inner:
            path = path.through(lo, hi, t.shape[d])
    pad_value = eqn.params["value"]
    if valid.false:
        return w.constant_tile(pad_value, eqn.out.dtype)
    cond = w.mask_name(valid, "inside the unpadded input") if valid.atoms else None
    inner_value = w.value(t, new, mask & valid, path, "pad")
    if cond is None:
        return inner_value
    return w.let("v", f"tl.where({cond}, {inner_value}, "
                      f"{w.value(pad_value, [], index.TRUE, path)})")


def _cat(w, eqn, idx, mask, path):
    pieces, d = eqn.args[0], eqn.params["dim"]
    i, inner = idx[d], d == len(idx) - 1
    offsets = [index.Const(0)]
    for p in pieces:
        offsets.append(index.add(offsets[-1], w.size(p.shape[d], inner)))
    values, live = [], []
    for k, p in enumerate(pieces):
        # lanes the mask keeps have 0 <= i < the cat's extent: the outer bounds go unsaid
        piece = (index.at_least(i, offsets[k]) if k else index.TRUE) & (
            index.less(i, offsets[k + 1]) if k < len(pieces) - 1 else index.TRUE)
        if piece.false:
            continue
        what = f"cat piece {k} of {len(pieces)}"
        piece_mask = mask & piece
        if piece.atoms:
            w.mask_name(piece_mask, what)
        piece_idx = list(idx)
        piece_idx[d] = index.add(i, index.mul(offsets[k], -1))
        piece_path = path.through(*_boundaries(pieces, d, k)) if inner else path
        values.append(w.value(p, piece_idx, piece_mask, piece_path, what))
        live.append(k)
    result = values[-1]
    for value, k in zip(reversed(values[:-1]), reversed(live[:-1])):
        cond = index.less(i, offsets[k + 1])
        if cond.false:
            continue
        if not cond.atoms:
            result = value
            continue
        cond = w.render.atom(w.tiled_atom(cond.atoms[0]))
        result = w.let("v", f"tl.where({cond}, {value}, {result})")
    return result


def _boundaries(pieces, d, k):
    """Values whose gcd divides piece k's start and end offsets: the offsets themselves where
    the sizes are known, else their known parts summed and each runtime size."""
    start, runtime = 0, []
    for p in pieces[:k]:
        if _known(p.shape[d]):
            start += p.shape[d]
        else:
            runtime.append(p.shape[d])
    size = pieces[k].shape[d]
    end = start + size if _known(size) else start
    return [start, end] + runtime + ([] if _known(size) else [size])


def _broadcast(w, eqn, idx, mask, path):
    t, shape = eqn.args
    dims = eqn.params["dims"]
    new = []
    for j, d in enumerate(dims):
        s = t.shape[j]
        broadcast = _known(s) and s == 1 and not (_known(shape[d]) and shape[d] == 1)
        new.append(index.Const(0) if broadcast else idx[d])
    if t.ndim and (len(idx) - 1 not in dims or new[-1] == index.Const(0)):
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


def _linear(w, idx, shape):
    """Row-major linear index of idx in shape."""
    linear, stride = index.Const(0), index.Const(1)
    for i, s in zip(reversed(idx), reversed(shape)):
        linear = index.add(linear, index.mul(i, stride))
        stride = index.mul(stride, w.size(s))
    return linear


def _delinear(w, flat, shape, comment: str = "") -> list:
    """Index in shape of the row-major linear index `flat`; `flat` is bound to a name (with
    `comment`) when its divisions do not all fold away (`(cols + rows * 32) // 32` is `rows`)."""
    new, inner = [], index.Const(1)
    for k, s in enumerate(reversed(shape)):   # flat >= 0 wherever the mask keeps a lane
        size = w.size(s)
        quotient = index.floordiv(flat, inner, live_nonneg=True)
        # the outermost index needs no remainder: flat < the product of the sizes
        new.append(quotient if k == len(shape) - 1 else index.mod(quotient, size,
                                                                   live_nonneg=True))
        inner = index.mul(inner, size)
    if comment and any(_divides(e, flat) for e in new):
        w.bound(flat, comment)
    return list(reversed(new))


def _divides(e, flat) -> bool:
    """Whether e divides or takes the remainder of `flat` itself (an unfolded division)."""
    if isinstance(e, (index.FloorDiv, index.Mod)):
        return e.a == flat or _divides(e.a, flat)
    if isinstance(e, index.Sum):
        return any(_divides(t, flat) for t, _ in e.terms)
    return False


def _suffixes(shape, in_shape):
    """(j, i): the shortest suffixes shape[j:] and in_shape[i:] (a dim at least each) whose
    products are equal, by the sizes in this call (a guard keeps runtime ones equal); None
    when there are none."""
    if not shape or not in_shape:
        return None
    if same_size(shape[-1], in_shape[-1]):
        return len(shape) - 1, len(in_shape) - 1
    j, i = len(shape) - 1, len(in_shape) - 1
    p, q = vectorize.hint_of(shape[j]), vectorize.hint_of(in_shape[i])
    while p != q:
        if p < q:
            j -= 1
            if j < 0:
                return None
            p *= vectorize.hint_of(shape[j])
        else:
            i -= 1
            if i < 0:
                return None
            q *= vectorize.hint_of(in_shape[i])
    return j, i


def _reshape(w, eqn, idx, mask, path):
    """A reshape moves indices only. Where the output's and the input's innermost dims pair up
    (suffixes with one product: the output splits the input's innermost dim, or merges inner
    dims of an input of the group whose strides compose), the input's innermost index is the
    output's inner index, linear: contiguous along the columns, with the gcd rule's width over
    both innermost extents. Otherwise the index goes through the flat index (V = 1)."""
    t, shape = eqn.args
    kept_out = [i for i, s in zip(idx, shape) if not _known(s) or s != 1]
    kept_in = [s for s in t.shape if not _known(s) or s != 1]
    if len(kept_out) == len(kept_in) and all(
            same_size(a, b) for a, b in
            zip(kept_in, [s for s in shape if not _known(s) or s != 1])):
        it = iter(kept_out)
        new = [next(it) if not _known(s) or s != 1 else index.Const(0) for s in t.shape]
        return w.value(t, new, mask, path)
    found = _suffixes(shape, t.shape)
    if found is not None:
        j, i = found
        if not all(_known(s) for s in (*shape[j:], *t.shape[i:])) and not (
                i == t.ndim - 1 and j == len(shape) - 1):
            w.guards.append(("numel_eq", tuple(shape[j:]), tuple(t.shape[i:])))
        for extent in (shape[-1], t.shape[-1]):     # runtime extents the width rests on
            w.size(extent, inner=True)
        inner = _linear(w, idx[j:], shape[j:])
        outer = _delinear(w, _linear(w, idx[:j], shape[:j]), t.shape[:i],
                          "outer index through a reshape")
        view = t if i == t.ndim - 1 else w.merged_view(t, i)
        if view is not None:
            new = outer + [inner]
        else:   # inner dims of a value the group computes: the inner index taken apart
            view, new = t, outer + _delinear(w, inner, t.shape[i:], "inner index through a reshape")
        walks = index.coefficient(new[-1], w.cols) == 1
        return w.value(view, new, mask,
                       path.through(shape[-1], t.shape[-1]) if walks else path.broken())
    flat = _linear(w, idx, shape)
    new = _delinear(w, flat, t.shape, "linear index through a reshape")
    # contiguous where the innermost index still walks the columns one by one (the divisions
    # fold over a column chunk that no multiple of the inner sizes crosses); the rest of it
    # (a multiple of its divisor) shifts the vectors' alignment
    if t.ndim and index.coefficient(new[-1], w.cols) == 1:
        shift = index.add(new[-1], index.mul(w.cols, -1))
        return w.value(t, new, mask, path.through(shift.divisor))
    return w.value(t, new, mask, path.broken())


def _copy(w, eqn, idx, mask, path):
    """A copy is the value itself: the kernel's store is the new memory."""
    return w.value(eqn.args[0], idx, mask, path)


# ---- the rule table: what each fusible prim means to this executor -----------------------

def _constant(shape, dims) -> bool:
    return all(not isinstance(shape[d], IntProxy) for d in dims)


def _is(x, value: int) -> bool:
    """x is the constant `value` (an IntProxy is not: comparing it would specialize it)."""
    return not isinstance(x, IntProxy) and x == value


def _slice_merges(eqn, k) -> bool:
    t, starts, stops, steps = eqn.args
    r = t.ndim
    return (steps[k] == 1 and _constant(starts, [k]) and _constant(stops, [k])
            and all(_is(starts[d], 0) and same_size(stops[d], t.shape[d]) and steps[d] == 1
                    for d in range(k + 1, r)))


def _slice_merged(eqn, args, params, k, inner):
    t, starts, stops, _ = args
    return (t, starts[:k] + (starts[k] * inner,), stops[:k] + (stops[k] * inner,),
            eqn.args[3][:k + 1]), params


def _pad_merges(eqn, k) -> bool:
    config = eqn.args[1]
    return _constant(config[k], [0, 1]) and all(_is(lo, 0) and _is(hi, 0)
                                                for lo, hi in config[k + 1:])


def _pad_merged(eqn, args, params, k, inner):
    config = args[1]
    return (args[0], config[:k] + ((config[k][0] * inner, config[k][1] * inner),)), params


def _broadcast_merges(eqn, k) -> bool:
    t, shape = eqn.args
    dims, r = eqn.params["dims"], len(shape)
    return (len(dims) == t.ndim and dims[-(r - k):] == tuple(range(k, r))
            and same_shape(t.shape[-(r - k):], shape[k:]))


def _broadcast_merged(eqn, args, params, k, inner):
    t, shape = args
    return (t, tuple(shape[:k]) + (shape[k] * inner,)), dict(params, dims=params["dims"][:t.ndim])


def _full_merged(eqn, args, params, k, inner):
    return (tuple(args[0][:k]) + (args[0][k] * inner,),), params


def _pow_refusal(eqn):
    base, exponent = eqn.args
    if not isinstance(base, TensorProxy) or isinstance(exponent, TensorProxy):
        return "pow is fused with a tensor base and a number exponent only"
    if math.isfinite(exponent) and (base.dtype.is_floating_point or exponent == int(exponent)):
        return None
    return f"pow is not fused with the exponent {exponent!r}"


def _never(eqn, k) -> bool:
    return False


register(prims.copy, lower=_copy)
register(prims.convert_element_type, lower=_convert)
register(prims.where, lower=_where)
register(prims.full, lower=_full, merged=_full_merged)
register(prims.slice_, lower=_slice, view=True, merges=_slice_merges, merged=_slice_merged)
register(prims.pad, lower=_pad, merges=_pad_merges, merged=_pad_merged)
register(prims.cat, lower=_cat, merges=lambda eqn, k: eqn.params["dim"] <= k)
register(prims.broadcast_in_dim, lower=_broadcast, view=True, merges=_broadcast_merges,
         merged=_broadcast_merged)
register(prims.permute, lower=_permute, view=True, merges=_never)
register(prims.reshape, lower=_reshape, view=True, merges=_never)
_FLOAT_ONLY = {"exp", "log", "sin", "cos", "sqrt", "rsqrt", "sigmoid", "tanh", "div", "erf",
               "silu", "gelu", "relu"}
_ARITHMETIC = {"add", "sub", "mul", "div", "maximum", "minimum", "clamp", "neg", "abs", "pow"}
for _name in list(UNARY_SRC) + list(BINARY_SRC) + ["pow", "gelu", "clamp"]:
    register(prims.PRIMS[_name], lower=_elementwise, float_only=_name in _FLOAT_ONLY,
             no_bool=_name in _ARITHMETIC, refuse=_pow_refusal if _name == "pow" else None)


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


@dataclasses.dataclass
class Group:
    """Step 1's result: a fusion group as plain data, ready to tile."""

    eqns: list                  # after the inner-dim merge
    outputs: list
    values: dict                # id(input Var) -> example value
    allocated: tuple            # the outputs' shape before the merge ((): a 0-d output)
    domain: tuple               # the shape the kernel tiles (after the merge; (1,) for 0-d)
    max_vector: int             # 16 bytes of the group's narrowest dtype, in elements
    merged: Merged | None
    narrow: bool                # int32 logical indices (see _narrow_indices)
    wide_cols: bool             # int64 column indices
    guards: list                # what the facts above rest on


@dataclasses.dataclass
class Tile:
    """Step 2's result: the domain as index nodes and its [ROWS, COLS] tiling."""

    sizes: list                 # one index node per domain dim
    rows: index.Leaf            # flattened outer index of each lane
    cols: index.Leaf            # innermost index of each lane
    rows_extent: index.Expr
    cols_extent: index.Expr
    in_domain: index.Mask
    outer: list                 # index node of each outer dim, from `rows`
    points: list                # the output index of each lane: one, or one per pair element
    pairs: Pairs | None = None  # pair tiling
    tiled: tuple = ()           # the sizes the tile walks (pairs: the pairs' count innermost)
    loop: "Loop | None" = None  # the outer dim a loop inside each program walks, if any

    @property
    def flat_rows(self):
        """The row-major index of each lane's outer indices in the domain: `rows` itself, or
        with a loop over dim L, `rows` with the loop's index put back in: the dims after L
        (A indices in all) stay where they are, those before L move by (E - 1) * A per step
        (E: L's extent); none when no dim before L is larger than 1."""
        if self.loop is None:
            return self.rows
        before, after = index.Const(1), index.Const(1)
        for s in self.sizes[:self.loop.dim]:
            before = index.mul(before, s)
        for s in self.sizes[self.loop.dim + 1:-1]:
            after = index.mul(after, s)
        flat = index.add(self.rows, index.mul(self.loop.leaf, after))
        if before == index.Const(1):
            return flat
        return index.add(flat, index.mul(index.mul(index.floordiv(self.rows, after),
                                                   index.add(self.loop.extent, -1)), after))


@dataclasses.dataclass(frozen=True)
class Loop:
    """An outer dim of the domain walked by a loop inside each program (`for j in
    tl.static_range(LOOP)`): each program covers a block of LOOP consecutive indices of it, and
    ROWS walks the other outer dims. Code that does not depend on the loop's index (loads of
    inputs broadcast along that dim, their conversions, per-row index math) runs once per
    program, before the loop."""

    dim: int                    # in the tiled domain
    extent: index.Expr          # >= 2: a constant, or a runtime size (guarded below 2**16)
    leaf: index.Leaf            # the dim's index inside the loop (`o1 = o1_start + j`)
    start: str                  # the kernel name of the block's first index
    last: str | None = None     # a runtime extent's last index (the kernel name of E - 1)

    @property
    def index_line(self) -> str:
        """The line that sets the loop dim's index, the first of the loop's body: past a runtime
        extent, the last block repeats its last index."""
        if self.last is None:
            return f"{self.leaf.name} = {self.start} + j"
        return f"{self.leaf.name} = tl.minimum({self.start} + j, {self.last})"


def analyze(eqns, outputs, inputs, values) -> Group:
    """Step 1: merge contiguous inner dims, find the domain, the index widths and their guards."""
    allocated = tuple(outputs[0].shape)
    guards = []
    merged = merge_inner_dims(eqns, outputs, inputs, values)
    if merged is not None:
        eqns, outputs, values = merged.eqns, merged.outputs, merged.values
        guards += [("strides_compose", t, dims) for t, dims in merged.contiguity]
    domain = tuple(outputs[0].shape) or (1,)
    itemsizes = [t.dtype.itemsize for e in eqns for t in (*e.input_vars(), *e.outs)
                 if isinstance(t, TensorProxy)]
    # Logical indices (rows, outer indices, reshaped flat indices) are int32 when every tensor
    # of the group has fewer than 2**31 elements (guarded for runtime shapes); offsets into
    # inputs are int64 products either way.
    narrow = _narrow_indices(eqns, outputs, guards)
    # Column indices are int32 unless the innermost extent may reach 2**31.
    wide_cols = vectorize.hint_of(domain[-1]) >= INT32_LIMIT // 2
    if isinstance(domain[-1], IntProxy) and not wide_cols:
        guards.append(("lt", domain[-1], INT32_LIMIT // 2))
    return Group(list(eqns), list(outputs), values, allocated, domain,
                 vectorize.ACCESS_BYTES // min(itemsizes), merged, narrow, wide_cols, guards)


def _pair_tiling(group: Group, enabled: bool) -> str | None:
    """Whether the group is tiled by pairs (see `Pairs`): "trailing" when the domain ends in a
    dim of 2 (`torch.stack((a, b), -1)`), "interleaved" when its innermost dim is even and the
    group splits it into pairs or merges pairs into it (a reshape from or to an innermost dim of
    2, a step-2 slice of the innermost dim); None otherwise."""
    domain = group.domain
    if not enabled:
        return None
    if len(domain) >= 2 and _is(domain[-1], 2) and not _is(domain[-2], 1):
        return "trailing"
    if vectorize.hint_of(domain[-1]) % 2 or vectorize.hint_of(domain[-1]) < 4:
        return None
    for e in group.eqns:
        if e.prim is prims.reshape and e.args[0].ndim and e.out.ndim and (
                _is(e.args[0].shape[-1], 2) != _is(e.out.shape[-1], 2)):
            return "interleaved"
        if e.prim is prims.slice_ and e.args[0].ndim and e.args[3][-1] == 2:
            return "interleaved"
    return None


def plan_tile(group: Group, w: "KernelWriter", loop_dim: int | None = None) -> Tile:
    """Step 2: the domain's sizes as index nodes (runtime ones become parameters of `w`), the
    tile indices with their widths and bounds (over the lanes inside the domain: masks keep no
    other), the domain mask and the outer indices. With `loop_dim` (an outer dim), that dim is
    walked by a loop inside each program (see `Loop`) and `rows` by the other outer dims."""
    domain = group.domain
    pairing = _pair_tiling(group, w.vectorize)
    inner = len(domain) - (2 if pairing == "trailing" else 1)
    sizes = [w.size(s, inner=d == inner) for d, s in enumerate(domain)]
    tiled = [vectorize.hint_of(s) for s in domain]
    if pairing == "trailing":
        sizes, tiled = sizes[:-1], tiled[:-1]
        full_extent = index.mul(sizes[-1], 2)
    elif pairing == "interleaved":
        full_extent = sizes[-1]
        sizes = sizes[:-1] + [index.floordiv(full_extent, 2)]
        tiled[-1] //= 2
    # dims of size 1 have index 0: rows walks the others
    row_dims = [d for d in range(len(sizes) - 1) if d != loop_dim and sizes[d] != index.Const(1)]
    rows_extent = index.Const(1)
    for d in row_dims:
        rows_extent = index.mul(rows_extent, sizes[d])
    cols_extent = sizes[-1]
    rows = index.Leaf("rows", frozenset({"pid", "row_arange"}), 32 if group.narrow else 64, 1,
                      0, rows_extent.value if isinstance(rows_extent, index.Const) else None)
    cols = index.Leaf("cols", frozenset({"pid", "col_arange"}), 64 if group.wide_cols else 32,
                      1, 0, cols_extent.value if isinstance(cols_extent, index.Const)
                      else INT32_LIMIT // 2)
    outer, inner = [index.Const(0)] * (len(sizes) - 1), index.Const(1)
    for k in range(len(row_dims) - 1, -1, -1):
        d = row_dims[k]
        outer[d] = (index.mod(index.floordiv(rows, inner), sizes[d]) if k
                    else index.floordiv(rows, inner))
        inner = index.mul(inner, sizes[d])
    loop = None
    if loop_dim is not None:
        extent = sizes[loop_dim]
        if not _known(domain[loop_dim]):    # the blocks along the grid's second axis
            w.guards.append(("lt", domain[loop_dim], LOOP_MAX_EXTENT + 1))
        name = w.names.take(f"o{loop_dim}")
        leaf = index.Leaf(name, frozenset({"pid", "loop"}), 32 if group.narrow else 64, 1, 0,
                          extent.hi - 1 if extent.hi is not None else None)
        last = (None if isinstance(extent, index.Const)
                else w.render.expr(index.add(extent, -1), top=True))
        loop = Loop(loop_dim, extent, leaf, w.names.take(f"{name}_start"), last)
        outer[loop_dim] = leaf
    in_domain = index.Mask((index.Less(rows, rows_extent), index.Less(cols, cols_extent)))
    if pairing is None:
        return Tile(sizes, rows, cols, rows_extent, cols_extent, in_domain, outer,
                    [outer + [cols]], tiled=tuple(domain), loop=loop)
    full_cols = index.Leaf("full_cols", frozenset({"pid", "fcol_arange"}), cols.bits, 1, 0,
                           cols.hi and 2 * cols.hi)
    pairs = Pairs(pairing == "trailing", cols_extent, full_cols, full_extent)
    points = ([outer + [cols, index.Const(j)] for j in (0, 1)] if pairs.trailing
              else [outer + [index.add(index.mul(cols, 2), j)] for j in (0, 1)])
    return Tile(sizes, rows, cols, rows_extent, cols_extent, in_domain, outer, points, pairs,
                tuple(tiled), loop)


@dataclasses.dataclass(frozen=True)
class Chunk:
    """Columns [start, stop) of the domain, computed as a tile [ROWS, width] starting at `start`
    (width a power of two; lanes at or past `stop` masked off)."""

    start: int
    width: int
    stop: int

    @property
    def masked(self) -> bool:
        return self.start + self.width > self.stop


PIECEWISE_MAX_COLS = 1024       # a static innermost extent up to this is computed piece-wise
CHUNKS_PER_SEGMENT = 4          # exact power-of-two chunks per segment before a masked one


def plan_chunks(group: Group, boundaries) -> list | None:
    """Column chunks over which every cat/pad/slice boundary is decided: the domain's static
    innermost extent split where a boundary `c` (a column at which some mask of the kernel
    changes, found by building it whole) meets a multiple of the group's vector (at `c` when
    aligned, else at the multiples around it: the chunk between keeps its selects). Each
    segment is cut into power-of-two chunks. None when nothing splits (the kernel is built
    whole) or the extent is runtime or large."""
    extent = group.domain[-1]
    if not _known(extent) or not 1 < extent <= PIECEWISE_MAX_COLS:
        return None
    v = group.max_vector
    points = {0, extent}
    for c in boundaries:
        if 0 < c < extent:
            points |= {min(c // v * v, extent), min(-(-c // v) * v, extent)}
    points = sorted(points)
    if len(points) == 2:
        return None
    chunks = []
    for start, stop in zip(points, points[1:]):
        s = start
        for _ in range(CHUNKS_PER_SEGMENT - 1):
            width = 1 << ((stop - s).bit_length() - 1) if stop > s else 0
            if width < v:
                break
            chunks.append(Chunk(s, width, s + width))
            s += width
        if s < stop:
            chunks.append(Chunk(s, 1 << (stop - s - 1).bit_length(), stop))
    return chunks


MAX_CHUNKS = 32                 # column chunks of one kernel at most
MAX_PERIODS = 16                # a column period split at most this many times per extent


def column_boundaries(group: Group, vectorize_enabled: bool, chunks=None) -> set:
    """The static columns at which a mask or an index of the kernel changes: the kernel is built
    in a scratch writer (whole, or in `chunks`) and each mask atom on a column index alone
    (`cols < 8`, `cols + 4 >= 8`) gives its threshold, each division of a column index by a
    constant (`(cols + o1 * 128) % 32`, through a reshape) the multiples it steps at."""
    w = kernel_writer(group, vectorize_enabled)
    tile = plan_tile(group, w)
    build(group, tile, w, chunks, share=False)
    extent = group.domain[-1]
    found = set()
    for cols in w.column_leaves:
        found |= {c for a in w.render.atoms if (c := index.threshold(a, cols)) is not None}
        for division in w.render.divisions:
            step = index.period(division, cols)
            if step is not None and _known(extent) and extent // step[0] <= MAX_PERIODS:
                d, k = step
                found |= {j * d - k for j in range(1, (extent + k) // d + 1)}
    return found


def plan_columns(group: Group, vectorize_enabled: bool) -> list | None:
    """The column chunks of the kernel (see `plan_chunks`): from the boundaries of the whole
    kernel, then once more with those of the chunked one (a boundary a chunk's bounds reveal:
    a pad inside a head once the reshape's division by the head size folds)."""
    boundaries = column_boundaries(group, vectorize_enabled)
    chunks = plan_chunks(group, boundaries)
    if chunks is None:
        return None
    finer = plan_chunks(group, boundaries | column_boundaries(group, vectorize_enabled, chunks))
    return finer if len(finer) <= MAX_CHUNKS else chunks if len(chunks) <= MAX_CHUNKS else None


LOOP_MAX_EXTENT = 65535         # the grid's second axis: one program per block at most


def plan_loop(group: Group, vectorize_enabled: bool, chunks=None) -> int | None:
    """The outer dim of the domain to walk by a loop inside each program (see `Loop`), or None:
    among the outer dims of extent >= 2 (a runtime one guarded below 2**16) along which the
    group broadcasts an input, and
    whose other outer dims leave rows enough for a tile that gives each thread of a warp a full
    vector (of the narrowest column chunk), the one whose loop reads the most inputs once per
    program, before it (found by building the kernel with each in a scratch writer); None when
    no loop reads any load once."""
    if not any(e.prim is prims.broadcast_in_dim for e in group.eqns):
        return None
    outer = len(group.domain) - (2 if _pair_tiling(group, vectorize_enabled) == "trailing"
                                 else 1)
    hints = [vectorize.hint_of(s) for s in group.domain]
    columns = (min(c.width for c in chunks) if chunks
               else min(hints[outer], PIECEWISE_MAX_COLS))
    rows_needed = -(-32 * group.max_vector // max(columns, 1))
    best, most = None, 0
    for d, s in enumerate(group.domain[:outer]):
        if not 2 <= hints[d] <= LOOP_MAX_EXTENT or (
                math.prod(hints[:outer]) // hints[d] < rows_needed):
            continue
        w = kernel_writer(group, vectorize_enabled)
        tile = plan_tile(group, w, d)
        stores = build(group, tile, w, chunks)
        lines = _live(w.lines + stores)
        once = sum("tl.load(" in line for line in _loop_body(lines, tile.loop)
                   if not line.startswith("    "))
        if once > most:
            best, most = d, once
    return best


def kernel_writer(group: Group, vectorize_enabled: bool) -> "KernelWriter":
    """The writer that builds `group`'s kernel: its values, defining equations, guards and merge."""
    w = KernelWriter(group.values, {id(o): e for e in group.eqns for o in e.outs},
                     vectorize_enabled, group.max_vector)
    w.guards += group.guards
    w.narrow = group.narrow
    if group.merged is not None:
        w.stride_dims, w.originals = group.merged.stride_dims, group.merged.originals
    return w


def build(group: Group, tile: Tile, w: "KernelWriter", chunks=None, share=True) -> list:
    """Step 3: the tile's header, every value as a function of the output index, and the store
    lines (returned; with `chunks`, each chunk's values and stores in turn, in the body);
    accesses, parameters and guards collect in `w`. With `share`, an unmasked chunk's columns
    are those of the first unmasked chunk of its width shifted (`cols_0 + 64`), so a value one
    chunk reads at another's columns (a RoPE's partner half) is the value that chunk read."""
    w.rows, w.cols, w.pairs, w.loop = tile.rows, tile.cols, tile.pairs, tile.loop
    w.column_leaves.append(tile.cols)
    body = w.lines
    pairs, loop = tile.pairs, tile.loop
    rows_walk = ("ROWS walks the other outer dims" if loop is None or len(tile.sizes) > 2
                 else "no other outer dim: one row")
    if pairs is None:
        body.append(f"# Tile [ROWS, COLS] of the output domain "
                    f"[{', '.join(w.describe(s) for s in tile.sizes)}]; COLS walks the innermost "
                    f"dim" + (" (whole, in column chunks: over each every cat/pad/slice boundary "
                              "is decided)" if chunks else "")
                    + (f"; dim {loop.dim} is walked by a loop in each program, {rows_walk}"
                       if loop else ""))
    else:
        body.append(f"# Tile [ROWS, COLS] of the pairs of the output domain "
                    f"[{', '.join(w.describe(s) for s in tile.sizes)}{', 2' * pairs.trailing}]: "
                    f"COLS walks pairs of the innermost dim, each lane computes both elements"
                    + (f"; dim {loop.dim} is walked by a loop in each program, {rows_walk}"
                       if loop else ""))
    body.append("pid = tl.program_id(0)")
    if chunks:
        body.append("rows = pid" + ("" if group.narrow else ".to(tl.int64)")
                    + " * ROWS + tl.arange(0, ROWS)[:, None]")
    else:
        body.append(f"col_blocks = ({w.render.expr(tile.cols_extent)} + COLS - 1) // COLS")
        body.append("rows = (pid // col_blocks)" + ("" if group.narrow else ".to(tl.int64)")
                    + " * ROWS + tl.arange(0, ROWS)[:, None]")
        body.append("# VEC caps the contiguity Triton may assume along COLS, so the access width")
        body.append("cols = (pid % col_blocks)" + (".to(tl.int64)" if group.wide_cols else "")
                    + " * COLS + tl.max_contiguous(tl.arange(0, COLS), VEC)[None, :]")
        if pairs is not None:
            body.append("# both elements of the pairs: the full tile [ROWS, 2 * COLS]")
            body.append("full_cols = (pid % col_blocks)"
                        + (".to(tl.int64)" if group.wide_cols else "")
                        + " * (2 * COLS) + tl.max_contiguous(tl.arange(0, 2 * COLS), VEC)"
                          "[None, :]")
        _bind_domain(w, tile.in_domain, "in_domain", {tile.rows: "ROWS", tile.cols: "COLS"})
    if loop is not None:
        body.append(f"# Dim {loop.dim} in blocks of LOOP indices, one block per program along the "
                    f"grid's second axis; {loop.leaf.name}: the loop's index")
        if loop.last is None:
            extent = loop.extent.value
            body.append(f"# (the last block ends at the extent: it overlaps the one before where "
                        f"LOOP does not divide {extent})")
            body.append(f"{loop.start} = tl.minimum(tl.program_id(1) * LOOP, {extent} - LOOP)")
        else:
            body.append(f"# (the last block repeats the last index, {loop.last}, past the "
                        f"extent)")
            body.append(f"{loop.start} = tl.program_id(1) * LOOP")
        body.append(loop.index_line)
    if any(o.tiled and not isinstance(o, index.Leaf) for o in tile.outer):
        body.append("# Outer indices of the output, from the row index")
        for d in range(len(tile.outer) - 1, -1, -1):
            o = tile.outer[d]
            if o.tiled and not isinstance(o, index.Leaf):
                w.render.bind(o, w.names.take(f"o{d}"))
    if not chunks:
        body.append("# Values, as functions of the output index")
        return _values_and_stores(group, tile, w, tile.cols, tile.in_domain, Path())
    in_rows = index.Mask((index.Less(tile.rows, tile.rows_extent),))
    _bind_domain(w, in_rows, "in_rows", {tile.rows: "ROWS"})
    shared = {}                             # width -> the first unmasked chunk's leaf, start
    for chunk in chunks:
        w.shape = f"[ROWS, {chunk.width}]"
        body.append(f"# Columns [{chunk.start}, {chunk.stop})")
        if share and not chunk.masked and chunk.width in shared:
            w.cols, first = shared[chunk.width]
            cols = index.add(w.cols, chunk.start - first)
        else:
            cols = w.cols = index.Leaf(w.names.take(f"cols_{chunk.start}"),
                                       frozenset({"col_arange"}), 32, 1, chunk.start, chunk.stop)
            w.column_leaves.append(cols)
            if not chunk.masked:
                shared[chunk.width] = cols, chunk.start
            arange = ((f"{chunk.start} + " if chunk.start else "")
                      + f"tl.arange(0, {chunk.width})[None, :]")
            if chunk.width >= w.max_vector:
                # VEC caps the contiguity Triton may assume (on the 2-d index: a cap on a bare
                # or shifted arange is lost where Triton folds it)
                arange = f"tl.max_contiguous({arange}, [1, VEC])"
            body.append(f"{cols.name} = {arange}")
        # bounds hold for the lanes the masks keep: the chunk's own mask is not folded by them
        in_chunk = in_rows & (index.Mask((index.Less(cols, index.Const(chunk.stop)),))
                              if chunk.masked else index.TRUE)
        start = Path().through(chunk.start, chunk.width)
        body.extend(_values_and_stores(group, tile, w, cols, in_chunk, start))
    return []


def _bind_domain(w, mask: index.Mask, name: str, blocks: dict) -> None:
    """Binds the domain mask `name`; an atom `rows < R` with a constant R is always true when
    the block (ROWS) divides R, which Triton then knows at compile time (`| (R % ROWS == 0)`):
    a tile that covers whole blocks loads and stores unmasked."""
    parts = []
    for atom in mask.atoms:
        src = f"({w.render.atom(atom)})"
        if isinstance(atom.b, index.Const) and atom.a in blocks and not atom.negated:
            src = f"({src} | ({atom.b.value} % {blocks[atom.a]} == 0))"
        parts.append(src)
    w.lines.append(f"{name} = {' & '.join(parts)}"
                   + ("  # true where the blocks divide the extents" if "%" in "".join(parts)
                      else ""))
    w.render.names[mask] = name
    w.render.masks.append((mask, name))


def _values_and_stores(group, tile, w, cols, in_domain, start: Path) -> list:
    """The outputs' values at columns `cols` (under `in_domain`) and their store lines; under
    pair tiling, each output's two elements per lane interleaved and stored on the full tile."""
    points = [tile.outer + [cols]] if tile.pairs is None else tile.points
    if tile.pairs is None:     # pair tiling: the widths are read from the index (`Pairs.gcd`)
        start = start.through(group.domain[-1])
    mask = w.mask_name(in_domain) if in_domain.atoms else None
    pairs, store_cols, extent = tile.pairs, cols, tile.cols_extent
    if pairs is not None:
        full_domain = index.Mask((index.Less(tile.rows, tile.rows_extent),
                                  index.Less(pairs.full_cols, pairs.full_extent)))
        mask = w.mask_name(full_domain, "the full tile inside the domain", full=True)
        store_cols, extent = pairs.full_cols, pairs.full_extent
    stores = []
    for k, out in enumerate(group.outputs):
        values = [w.value(out, point if out.shape else [], in_domain, start) for point in points]
        if pairs is None:
            val = values[0]
            held = w.narrow_tiles.get(val)
            # a narrow value stored as the kernel holds it: no fp32 round trip
            val = (held.name if held is not None and held.dtype == out.dtype and not held.negated
                   else f"{val}.to({TL_DTYPE[out.dtype]})")
            inner_extent = group.domain[-1]
        else:
            val = w.let("v", f"tl.reshape(tl.join({values[0]}, {values[1]}), [ROWS, 2 * COLS])",
                        "the pairs' elements, interleaved") + f".to({TL_DTYPE[out.dtype]})"
            inner_extent = (group.domain[-1] if not pairs.trailing     # 2n: its divisor
                            else extent.value if isinstance(extent, index.Const)
                            else extent.divisor)
        width = math.gcd(vectorize.store_width(out.dtype.itemsize, inner_extent, w.vectorize),
                         start.gcd)
        w.accesses.append(Access("store", out.name, "output", width, len(w.accesses)))
        w.itemsizes.append(out.dtype.itemsize)
        ptr = w.output_pointer(k)
        offset = w.tile_shaped(index.add(index.mul(tile.flat_rows, extent), store_cols),
                               pairs is not None)
        stores.append(f"tl.store({ptr} + {w.render.expr(offset, top=True)}, "
                      f"{val}" + (f", mask={mask}" if mask else "")
                      + f")  # {out.name}, {width} per access")
    return stores


def render_kernel(name: str, w: "KernelWriter", stores: list) -> str:
    """Step 4: the @triton.jit function's source."""
    signature = ", ".join([p.name for p in w.params]
                          + ["ROWS: tl.constexpr", "COLS: tl.constexpr", "VEC: tl.constexpr"]
                          + (["LOOP: tl.constexpr"] if w.loop else []))
    prelude = ["# Runtime sizes and strides arrive divided by their guarded power-of-two "
               "divisor; h*: values the launcher computes"] + w.prelude if w.prelude else []
    body = _live(prelude + w.lines + (["# Stores"] + stores if stores else []))
    if w.loop is not None:
        body = _loop_body(body, w.loop)
    pointers = [p.name for p in w.params if p.kind == "pointer"]
    decorator = "@triton.jit" if w.vectorize else (
        "# The vectorization analysis is off: pointer alignment stays unknown to Triton\n"
        f"@triton.jit(do_not_specialize_on_alignment={pointers})")
    return "{}\ndef {}({}):\n{}\n".format(
        decorator, name, signature, "\n".join("    " + line for line in body))


_ASSIGNED = re.compile(r"^(\w+) = ")
_TARGETS = re.compile(r"^(\w+(?:, \w+)*) = ")
_NAME = re.compile(r"[A-Za-z_]\w*")


def _loop_body(lines: list, loop: Loop) -> list:
    """The body generated once, split around the loop over `loop`'s dim: each line that reads
    the loop's index, or a name assigned inside the loop, goes inside it (indented, in order);
    every other line runs once, before it. A full-line comment heads the lines after it, on the
    side or sides where they land."""
    before, inside = [], []
    dependent = {"j"}
    header, comments, headed = (), False, {id(before): (), id(inside): ()}
    for line in lines:
        if line == loop.index_line:
            inside.append(line)
            dependent.add(loop.leaf.name)
            continue
        code = line.split("#", 1)[0]
        if not code.strip():        # consecutive comment lines head what follows together
            header, comments = (header if comments else ()) + (line,), True
            continue
        comments = False
        targets = _TARGETS.match(code)
        read = set(_NAME.findall(code[targets.end():] if targets else code))
        side = inside if read & dependent else before
        if side is inside and targets:
            dependent |= set(targets[1].split(", "))
        if headed[id(side)] != header:
            side.extend(header)
            headed[id(side)] = header
        side.append(line)
    return before + [f"# The loop over the LOOP indices of dim {loop.dim} in this program's "
                     f"block: the lines above depend on none of them (values of inputs broadcast "
                     f"along dim {loop.dim} are read once per program)",
                     "for j in tl.static_range(LOOP):"] + ["    " + line for line in inside]


def _live(lines: list) -> list:
    """The kernel's lines without assignments nothing reads (a conversion a plain copy made
    unneeded), until none is left."""
    while True:
        words = collections.Counter(w for line in lines for w in re.findall(r"\w+", line))
        live = [line for line in lines
                if (m := _ASSIGNED.match(line)) is None or words[m[1]] > 1]
        if len(live) == len(lines):
            return lines
        lines = live


def lower_group(name, eqns, outputs, inputs, values, vectorize_enabled: bool) -> Lowered:
    """Lowers one fusion group (equations in trace order; `outputs` of one shape) to a kernel:
    analyze -> plan the tile -> build the expressions -> render."""
    group = analyze(eqns, outputs, inputs, values)
    # pair tiling computes whole tiles; column chunks are for the other groups
    chunks = (None if _pair_tiling(group, vectorize_enabled)
              else plan_columns(group, vectorize_enabled))
    loop_dim = plan_loop(group, vectorize_enabled, chunks)
    w = kernel_writer(group, vectorize_enabled)
    tile = plan_tile(group, w, loop_dim)
    stores = build(group, tile, w, chunks)
    source = render_kernel(name, w, stores)
    size_vars = []
    read = list(group.allocated) + [leaf.source for p in w.params if p.value is not None
                                    for leaf in index.leaves(p.value)]
    for s in read:
        if isinstance(s, (IntProxy, FloatProxy)) and all(s is not v for v in size_vars):
            size_vars.append(s)
    return Lowered(name, source, w.params, w.accesses, w.guards, tile.rows_extent,
                   tile.cols_extent, group.outputs, w.itemsizes, size_vars,
                   sorted(set(w.contiguous_inputs)), vectorize_enabled, group.allocated,
                   tile.tiled, tuple(chunks or ()),
                   None if tile.loop is None else LoopDim(
                       tile.loop.dim, vectorize.hint_of(group.domain[tile.loop.dim]),
                       tile.loop.extent))
