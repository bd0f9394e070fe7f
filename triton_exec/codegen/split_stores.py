"""Stores narrower than the loads of their column chunk, from the loads' own layout: a TF 'same'
pad `F.pad(x, (0, 1, 0, 1))` of 56-wide bf16 rows loads x's aligned rows 16 bytes at a time and
stores rows of 57, whose odd start makes each store 2 bytes. Triton's coalescing gives each
access a layout of its own width (a thread holding 8 consecutive elements for the load, 1 for
the store) and converts the tile between them through shared memory, which costs more
instructions than the whole copy (issue 29: 3.73 bytes per warp-instruction against 27.68 for
an all-scalar kernel). Here the chunk's values are split in registers instead: `tl.reshape` and
`tl.split` give the elements each thread loaded as P = V / S pieces of S (V: the loads' width,
S: the store's), and each piece is stored flattened to one dim of rows and vectors ([ROWS * G,
S], G = the chunk's width over V): row-major, that is the order in which the loads' layout gives
the vectors to the threads (along the chunk first, then the rows), and Triton lays out a store of
one dim of positions (and the S lanes of each within a thread) that way, whichever order it
breaks ties of contiguity in (Triton 3.6 and 3.9 differ there), so no layout conversion remains.
Each store keeps the width the analysis proved, S (the flattened offsets are multiples of S:
`tl.multiple_of`). Imports nothing from this package.
"""
from __future__ import annotations


def split_store_lines(w, ptr: str, rows_offset: str, start: int, chunk_width: int,
                      load_width: int, width: int, value: str, mask: str | None,
                      comment: str) -> list[str]:
    """The lines that store `value` (a [ROWS, chunk_width] tile of the chunk starting at column
    `start`, loaded `load_width` wide) `width` wide, split into pieces (see the module); the
    first store line carries `comment` (the access's line). `rows_offset`: the output's offset
    of each row ([ROWS, 1]); `mask`: the store's mask over the rows ([ROWS, 1]) or None. Each
    helper name is taken from `w.names`."""
    groups, pieces = chunk_width // load_width, load_width // width
    lines = [f"# Stores {width} wide from loads {load_width} wide: the values split in "
             f"registers into {pieces} pieces of {width}, each stored from the loads' layout"]
    tile = w.names.fresh("s")
    if width == 1:
        split = f"tl.reshape({value}, [ROWS, {groups}, 1{', 2' * _bits(pieces)}])"
    else:       # the pieces' index innermost, as the splits take it
        split = (f"tl.reshape(tl.permute(tl.reshape({value}, [ROWS, {groups}, {pieces}, "
                 f"{width}]), (0, 1, 3, 2)), [ROWS, {groups}, {width}{', 2' * _bits(pieces)}])")
    lines.append(f"{tile} = {split}")
    level = [tile]
    for _ in range(_bits(pieces)):      # the lowest bit of the piece's index first: the
        # results stay in order of the piece's index (the new bit above the earlier ones)
        halves = []
        for t in level:
            low, high = w.names.fresh("s"), w.names.fresh("s")
            lines.append(f"{low}, {high} = tl.split({t})")
            halves.append((low, high))
        level = [h[0] for h in halves] + [h[1] for h in halves]
    flat = f"ROWS * {groups}"
    firsts = (f"tl.reshape({rows_offset} + {load_width} * tl.arange(0, {groups})[None, :], "
              f"[{flat}])")
    offsets, row_mask = w.names.fresh("s"), None
    if width == 1:
        lines.append(f"{offsets} = {firsts}  # each vector's first column, per row")
    else:
        lines.append(f"{offsets} = tl.multiple_of({firsts}, {width})[:, None] + "
                     f"tl.arange(0, {width})[None, :]  # each vector's columns, per row")
    if mask:
        row_mask = w.names.fresh("s")
        spread = (f"tl.reshape(tl.broadcast_to({mask}, [ROWS, {groups}]), [{flat}])"
                  + ("" if width == 1 else "[:, None]"))
        lines.append(f"{row_mask} = " + (spread if width == 1 else
                                         f"tl.broadcast_to({spread}, [{flat}, {width}])"))
    shape = f"[{flat}]" if width == 1 else f"[{flat}, {width}]"
    for p in range(pieces):
        store = (f"tl.store({ptr} + {offsets} + {start + p * width}, "
                 f"tl.reshape({level[p]}, {shape})"
                 + (f", mask={row_mask}" if row_mask else "") + ")")
        lines.append(store + (f"  # {comment}" if p == 0 else ""))
    return lines


def _bits(n: int) -> int:
    return n.bit_length() - 1

