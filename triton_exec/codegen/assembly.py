"""Step 3 of lowering a group: the kernel's body from its tile: the header (program id, row and
column indices, the domain mask, the loop's index), every output's value as a function of the
output index, and the stores; with column chunks, each chunk's values and stores in turn.
Imports `writer`, `stores`, `tile_plan` and `analysis` from this package.
"""
from __future__ import annotations

from ir import IntProxy
from ir.proxies import FloatProxy
from triton_exec import index
from triton_exec.codegen.analysis import Group
from triton_exec.codegen.stores import Columns, blocks, outputs_of, values_and_stores
from triton_exec.codegen.tile_plan import Tile
from triton_exec.codegen.writer import KernelWriter
from triton_exec.vectorize import Path


def kernel_writer(group: Group, vectorize_enabled: bool) -> KernelWriter:
    """The writer that builds `group`'s kernel: its values, defining equations, guards and merge."""
    w = KernelWriter(group.values, {id(o): e for e in group.eqns for o in e.outs},
                     vectorize_enabled, group.max_vector)
    w.guards += group.guards
    w.narrow = group.narrow
    if group.merged is not None:
        w.stride_dims, w.originals = group.merged.stride_dims, group.merged.originals
    return w


def runtime_sizes(group: Group, w: KernelWriter) -> list:
    """The runtime sizes and numbers the kernel reads (each once, in order of first use): the
    group's allocated sizes (each output's), then those in its parameters' values."""
    sizes = []
    read = [s for shape in (group.allocated, *group.output_shapes) for s in shape]
    read += [leaf.source for p in w.params if p.value is not None
             for leaf in index.leaves(p.value)]
    for s in read:
        if isinstance(s, (IntProxy, FloatProxy)) and all(s is not v for v in sizes):
            sizes.append(s)
    return sizes


def build(group: Group, tile: Tile, w: KernelWriter, chunks=None, share=True) -> list:
    """Step 3: the tile's header, every value as a function of the output index, and the store
    lines (returned; with `chunks`, each chunk's values and stores in turn, in the body);
    accesses, parameters and guards collect in `w`. With `share`, an unmasked chunk's columns
    are those of the first unmasked chunk of its width shifted (`cols_0 + 64`), so a value one
    chunk reads at another's columns (a RoPE's partner half) is the value that chunk read."""
    w.rows, w.cols, w.pairs, w.loop = tile.rows, tile.cols, tile.pairs, tile.loop
    w.row_axis = tile.row_axis
    w.column_leaves.append(tile.cols)
    w.lines.append(_tile_comment(tile, w, chunks))
    _tile_indices(group, tile, w, chunks)
    if tile.loop is not None:
        _loop_start(tile.loop, w.lines)
    _outer_indices(tile, w)
    outputs = outputs_of(group, tile, w)
    plain = [o for o in outputs if o.block is None]
    if not chunks:
        w.lines.append("# Values, as functions of the output index")
        # the domain's mask `cols < extent` narrows every access of a whole tile (pair tiling:
        # the widths are read from the index, `Pairs.gcd`)
        start = Path() if tile.pairs is not None else Path().through(group.domain[-1])
        columns = Columns(tile.cols, tile.in_domain, start, tile.cols)
        stores = values_and_stores(group, tile, w, columns, plain)
        passes = [columns]
    else:
        stores, passes = [], _chunked_values(group, tile, w, chunks, share, plain)
    blocks(group, tile, w, passes, [o for o in outputs if o.block is not None])
    return stores


def _tile_comment(tile: Tile, w: KernelWriter, chunks) -> str:
    """The kernel's first comment: the domain and how the tile walks it."""
    loop, domain = tile.loop, ", ".join(w.describe(s) for s in tile.sizes)
    rows_walk = ("ROWS walks the other outer dims" if loop is None or len(tile.sizes) > 2
                 else "no other outer dim: one row")
    looped = f"; dim {loop.dim} is walked by a loop in each program, {rows_walk}" if loop else ""
    if tile.row_axis is not None:
        looped += (f"; ROWS walk dim {tile.row_axis.dim} fastest: a 2-D tile, loads contiguous "
                   f"along it are wide along the rows, the stores along the columns")
    if tile.pairs is None:
        return (f"# Tile [ROWS, COLS] of the output domain [{domain}]; COLS walks the innermost "
                f"dim" + (" (whole, in column chunks: over each every cat/pad/slice boundary "
                          "is decided)" if chunks else "") + looped)
    return (f"# Tile [ROWS, COLS] of the pairs of the output domain "
            f"[{domain}{', 2' * tile.pairs.trailing}]: COLS walks pairs of the innermost dim, "
            f"each lane computes both elements" + looped)


def _tile_indices(group: Group, tile: Tile, w: KernelWriter, chunks) -> None:
    """The program id and the lanes' row index; without chunks, the column index of the
    program's column block (and the full tile's, under pair tiling) and the domain mask."""
    body = w.lines
    rows_type = "" if group.narrow else ".to(tl.int64)"
    body.append("pid = tl.program_id(0)")
    if chunks:
        body.append(f"rows = pid{rows_type} * ROWS + tl.arange(0, ROWS)[:, None]")
        return
    cols_type = ".to(tl.int64)" if group.wide_cols else ""
    body.append(f"col_blocks = ({w.render.expr(tile.cols_extent)} + COLS - 1) // COLS")
    body.append(f"rows = (pid // col_blocks){rows_type} * ROWS + tl.arange(0, ROWS)[:, None]")
    body.append("# VEC caps the contiguity Triton may assume along COLS, so the access width")
    body.append(f"cols = (pid % col_blocks){cols_type}"
                " * COLS + tl.max_contiguous(tl.arange(0, COLS), VEC)[None, :]")
    if tile.pairs is not None:
        body.append("# both elements of the pairs: the full tile [ROWS, 2 * COLS]")
        body.append(f"full_cols = (pid % col_blocks){cols_type}"
                    " * (2 * COLS) + tl.max_contiguous(tl.arange(0, 2 * COLS), VEC)[None, :]")
    _bind_domain(w, tile.in_domain, "in_domain", {tile.rows: "ROWS", tile.cols: "COLS"})


def _loop_start(loop, body: list) -> None:
    """The first index of the program's block of the loop's dim, and the loop's index line."""
    body.append(f"# Dim {loop.dim} in blocks of LOOP indices, one block per program along the "
                f"grid's second axis; {loop.leaf.name}: the loop's index")
    if loop.last is None:
        extent = loop.extent.value
        body.append(f"# (the last block ends at the extent: it overlaps the one before where "
                    f"LOOP does not divide {extent})")
        body.append(f"{loop.start} = tl.minimum(tl.program_id(1) * LOOP, {extent} - LOOP)")
    else:
        body.append(f"# (the last block repeats the last index, {loop.last}, past the extent)")
        body.append(f"{loop.start} = tl.program_id(1) * LOOP")
    body.append(loop.index_line)


def _outer_indices(tile: Tile, w: KernelWriter) -> None:
    """The outer indices of the output that are compound values of the row index, named."""
    if any(o.tiled and not isinstance(o, index.Leaf) for o in tile.outer):
        w.lines.append("# Outer indices of the output, from the row index")
        for d in range(len(tile.outer) - 1, -1, -1):
            o = tile.outer[d]
            if o.tiled and not isinstance(o, index.Leaf):
                w.render.bind(o, w.names.take(f"o{d}"))


def _chunked_values(group: Group, tile: Tile, w: KernelWriter, chunks, share: bool,
                    outputs: list) -> list[Columns]:
    """Each column chunk's column index, the outputs' values and stores in turn (see `build`);
    returns the chunks' columns."""
    body = w.lines
    in_rows = index.Mask((index.Less(tile.rows, tile.rows_extent),))
    _bind_domain(w, in_rows, "in_rows", {tile.rows: "ROWS"})
    shared = {}                             # width -> the first unmasked chunk's leaf, start
    passes = []
    for chunk in chunks:
        w.shape = f"[ROWS, {chunk.width}]"
        comment = f"# Columns [{chunk.start}, {chunk.stop})"
        body.append(comment)
        # a chunk off the vector's multiples is aligned to its loads (a symmetric pad's input
        # columns): its index is a bare arange shifted by the start, and each load's width is
        # read from its own index (`index.aligned_run`), the stores' from the start
        w.shifted_cols = chunk.start % w.max_vector != 0
        if share and not chunk.masked and chunk.width in shared:
            w.cols, first = shared[chunk.width]
            cols = index.add(w.cols, chunk.start - first)
        else:
            first = 0 if w.shifted_cols else chunk.start
            w.cols = index.Leaf(w.names.take(f"cols_{chunk.start}"), frozenset({"col_arange"}),
                                32, 1, first, first + chunk.stop - chunk.start)
            cols = index.add(w.cols, chunk.start - first)
            w.column_leaves.append(w.cols)
            if not chunk.masked:
                shared[chunk.width] = w.cols, first
            arange = ((f"{first} + " if first else "")
                      + f"tl.arange(0, {chunk.width})[None, :]")
            if chunk.width >= w.max_vector:
                # VEC caps the contiguity Triton may assume (on the 2-d index: a cap on a bare
                # or shifted arange is lost where Triton folds it)
                arange = f"tl.max_contiguous({arange}, [1, VEC])"
            body.append(f"{w.cols.name} = {arange}")
        # bounds hold for the lanes the masks keep: the chunk's own mask is not folded by them
        in_chunk = in_rows & (index.Mask((index.Less(cols, index.Const(chunk.stop)),))
                              if chunk.masked else index.TRUE)
        # a chunk's accesses are narrowed by its own bounds, not the domain's extent: the
        # loads of a chunk of aligned input rows stay wide where the output's rows (of 17) make
        # the stores narrow (their width is the output's, `values_and_stores`)
        start = Path().through(chunk.start, chunk.width, *((chunk.stop,) if chunk.masked else ()))
        passes.append(Columns(cols, in_chunk, start, w.cols, w.shape, comment,
                              None if chunk.masked else chunk.width))
        body.extend(values_and_stores(group, tile, w, passes[-1], outputs))
    return passes


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

