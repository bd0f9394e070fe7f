"""What the code generator hands the launcher (`triton_exec.launch`): the lowered kernel
(`Lowered`), its parameters and how the host fills them (`Param`, `Stride`), its accesses and
their widths (`Access`), the names it shares with the launcher (`Namespace`) and the options
kernels compile with. Imports `ir` and `triton_exec.index` only.
"""
from __future__ import annotations

import dataclasses
import keyword

from ir.proxies import hint, same_shape
from triton_exec import index

@dataclasses.dataclass
class Access:
    """One global load or store of the kernel and its vector width (elements per access)."""

    kind: str           # "load" or "store"
    tensor: str         # the trace name of the tensor
    what: str           # which part: "plain", "pad", "slice", "cat piece 1 of 2", ...
    width: int

    number: int = 0     # position among the kernel's accesses
    along_cols: bool = True     # its address walks the tile's columns one element at a time
    axis: str = "cols"  # the tile axis its width is along: "cols", or "rows" for a load
                        # contiguous along the outer dim ROWS walks fastest (`row_axis`)
    line: str = ""      # the kernel line it is (unique: a load binds a fresh name, a store
                        # writes its own offset): the record finds it in the source by this,
                        # wherever the lines move (a loop hoists loads above it)

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
    contiguous_inputs: list     # names of torch-made inputs read as contiguous (the launcher
                                # checks; `triton_exec.strided` reads another layout)
    aligned_pointers: bool      # whether launches specialize pointers on 16-byte alignment
    allocated: tuple            # the outputs' shape (ints and IntProxies): () for a 0-d output
    tiled: tuple                # the shape the kernel tiles: after the inner-dim merge
    chunks: tuple = ()          # Chunk: column chunks computed one by one (the launch covers
                                # the columns with one block: COLS >= the extent); () when whole
    loop: "LoopDim | None" = None   # the outer dim a loop in each program walks (LOOP indices
                                    # per program, the grid's second axis); `rows` excludes it
    whole_rows: bool = False    # a row plan (`row_plan`): one column block (COLS covers the
                                # row, or a loop walks it: `row_loop`)
    row_loop: bool = False      # a row plan that walks the row in blocks of COLS columns
    column_rows: "index.Expr | None" = None     # a column plan (`column_reduction`): the rows
                                                # each program reduces (`rows`: the count of the
                                                # outer dims' indices, a program each)
    row_axis: int | None = None     # a 2-D tile for a transpose (`row_axis`): the outer dim ROWS
                                    # walks fastest, along which some loads are wide
    output_shapes: tuple = ()   # each output's shape, where they differ (a horizontal fusion:
                                # they nest in `allocated`); () when all are `allocated`

    def output_shape(self, k: int) -> tuple:
        """The shape of output `k` (ints and IntProxies)."""
        return self.output_shapes[k] if self.output_shapes else self.allocated

    @property
    def domain(self) -> tuple:
        """The outputs' shape, (1,) for a 0-d output."""
        return self.allocated or (1,)

    @property
    def vector_width(self) -> dict:
        return {a.label: a.width for a in self.accesses}

    @property
    def vector_axis(self) -> dict:
        """The tile axis each access's width is along: "cols" or "rows"."""
        return {a.label: a.axis for a in self.accesses}

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



def product(terms) -> str:
    """Source of the product of size expressions, leaving out factors of 1."""
    return " * ".join(t for t in terms if t != "1") or "1"


def differing_shapes(shapes: tuple, allocated: tuple) -> tuple:
    """`Lowered.output_shapes`: the outputs' `shapes` where one differs from `allocated` (a
    horizontal fusion's smaller output, a row plan's per-row value kept for the backward), else
    ()."""
    return shapes if any(not same_shape(s, allocated) for s in shapes) else ()
