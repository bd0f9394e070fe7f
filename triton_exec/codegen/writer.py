"""The kernel writer: one kernel's lines, its names (`Namespace`), its parameters and the
runtime integers they carry (passed divided by their guarded power-of-two divisor, multiplied
back in the prelude), host-known values hoisted to the launcher, masks and constant tiles, and
`value`, which walks from a value back to the loads through each prim's lowering (the rule
table, `triton_exec.rules`). Imports `kernel_types`, `lowered` and `loads` from this package;
the lowerings and plans import it, never the other way.
"""
from __future__ import annotations

from ir import IntProxy, TensorProxy
from ir.proxies import FloatProxy
from triton_exec import index, vectorize
from triton_exec.codegen import loads
from triton_exec.codegen.kernel_types import (
    ARANGES, TL_DTYPE, compute_dtype, is_negative_zero, known, literal, negative_zero)
from triton_exec.codegen.lowered import Access, Namespace, Param
from triton_exec.rules import rule_of
from triton_exec.vectorize import Path

# Names of the kernel's own: the module's imports, the constexprs, the tile's indices and masks
KERNEL_RESERVED = {"tl", "triton", "libdevice", "narrow", "loops", "ROWS", "COLS", "VEC", "LOOP", "j",
                   "pid", "col_blocks", "rows", "cols", "in_domain", "float", "int"}


class KernelWriter:
    """Builds one kernel: lines of its body, its parameters, its accesses and guards. Index and
    mask math is built as `index` nodes; values are named tiles (`v1`, `v2`, ...)."""

    def __init__(self, values, producers, vectorize_enabled: bool, max_vector: int):
        self.values = values                  # id(input Var) -> example runtime value
        self.producers = producers            # id(Var) -> the group equation defining it
        self.max_vector = max_vector          # 16 bytes of the group's narrowest dtype
        self.stride_dims: dict = {}           # id(input) -> its original dim per dim (merges)
        self.contiguous_inputs: list = []     # torch-made inputs read as contiguous
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
        self.narrow = True                  # int32 logical indices (see `analysis`)
        self.used: set = set()              # runtime integers the kernel reads
        self.render = index.Renderer(self.lines, self.names.fresh, self.hoist, self.use)
        self.rows = self.cols = None
        self.zeros: dict = {}               # tile shape -> its int32 zero tile
        self.shape = "[ROWS, COLS]"         # the tile's shape: a column chunk's, when chunked
        self.narrow_tiles: dict = {}        # fp32 name of an fp16/bf16 value -> its NarrowTile
        self.column_leaves: list = []       # the column indices: the tile's or its chunks'
        self.shifted_cols = False           # the chunk's columns are `cols` shifted off the
                                            # vector's multiples (`assembly`)
        self.pairs = None                   # pair tiling (`pairs.Pairs`), or None
        self.loop = None                    # the loop over an outer dim (`tile_plan.Loop`)
        self.row_axis = None                # the outer dim ROWS walk fastest (`row_axis`)
        self.across: list = []              # (innermost index, bytes of the tensor) of each
                                            # load whose contiguous innermost dim the columns
                                            # do not walk
        self.row = None                     # the row plan's tile, read by reductions
        self.reduction_loop = None          # a plan whose reductions loop over blocks
                                            # (`lower_reduction.ReductionLoop`)
        self.pair_loads: dict = {}          # (tensor, full offset, full mask) -> its two halves
        self.views: dict = {}               # (id(input), first merged dim) -> its merged view
        self.int32_offsets: dict = {}       # id(input) -> whether its offsets fit int32
        self.loaded: dict = {}              # (pointer, offset, mask, shape) -> the loaded value
        self.nested_atoms: set = set()      # `o_d < size` of an output smaller than the domain
                                            # (`stores`): a broadcast along d drops them

    # ---- names -------------------------------------------------------------------------
    def let(self, prefix: str, expr: str, comment: str = "") -> str:
        """Binds `expr` to a new name (`v1`, ...) in the body and returns the name."""
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
        if is_negative_zero(value):
            return self.let("v", negative_zero(self.shape))
        return self.let("v", f"tl.full({self.shape}, {self.value(value, [], index.TRUE, None)}, "
                             f"{TL_DTYPE[compute_dtype(dtype)]})")

    def forget(self, names: set) -> None:
        """Forgets the values, masks and loads bound to these names (bound inside a loop, not
        defined after it): a later use binds them anew."""
        for table in (self.memo, self.render.names, self.loaded, self.narrow_tiles):
            for key in [k for k, v in table.items() if (v if isinstance(v, str) else k) in names]:
                del table[key]
        self.render.masks[:] = [(m, n) for m, n in self.render.masks if n not in names]

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
        if known(x):
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

    # ---- pointers and values ---------------------------------------------------------------
    def pointer(self, t) -> str:
        """The kernel name of input t's pointer (a parameter added when first used)."""
        if id(t) not in self.pointers:
            self.pointers[id(t)] = self.names.take(f"{t.name}_ptr")
            self.params.append(Param(self.pointers[id(t)], "pointer",
                                     tensor=self.originals.get(id(t), t)))
        return self.pointers[id(t)]

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

    def caches(self) -> tuple:
        """What the writer reuses by name (values, loads, bound index expressions and masks, zero
        tiles), to be `restore`d after a block whose names are not seen outside it."""
        return (dict(self.memo), dict(self.loaded), dict(self.pair_loads),
                dict(self.narrow_tiles), dict(self.zeros), dict(self.render.names),
                len(self.render.masks))

    def restore(self, kept: tuple) -> None:
        (self.memo, self.loaded, self.pair_loads, self.narrow_tiles, self.zeros,
         self.render.names, masks) = kept
        del self.render.masks[masks:]

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
            if known(v):
                return literal(v, self.shape)
            return self.render.expr(self.size(v), top=True)
        key = (id(v), tuple(idx), mask, self.shape)       # chunks of one width share values
        if key in self.memo:
            return self.memo[key]
        eqn = self.producers.get(id(v))
        result = (loads.load(self, v, idx, mask, path, what) if eqn is None
                  else rule_of(eqn).lower(self, eqn, idx, mask, path))
        self.memo[key] = result
        return result


def _int64(name: str) -> str:
    """A scalar parameter in int64 (`tl.cast`: Triton passes an integer equal to 1 as a Python
    int, which has no `.to`)."""
    return f"tl.cast({name}, tl.int64)"

