"""Piece-wise columns: a constant innermost extent with cat/pad/slice boundaries inside is
computed by one program in column chunks (`Chunk`), each a tile [ROWS, width] whose column index
has the chunk's bounds, so that the index folding decides every piece's mask over it. The
boundaries are read from the kernel built in a scratch writer. Imports `analysis`, `assembly`,
`tile_plan` and `kernel_types` from this package.
"""
from __future__ import annotations

import dataclasses

from triton_exec import index, vectorize
from triton_exec.codegen.analysis import Group
from triton_exec.codegen.assembly import build, kernel_writer
from triton_exec.codegen.kernel_types import known
from triton_exec.codegen.tile_plan import plan_tile


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


def plan_chunks(group: Group, boundaries, shifted: bool = False) -> list | None:
    """Column chunks over which every cat/pad/slice boundary is decided: the domain's static
    innermost extent split where a boundary `c` (a column at which some mask of the kernel
    changes, found by building it whole) meets a multiple of the group's vector (at `c` when
    aligned, else at the multiples around it: the chunk between keeps its selects), or with
    `shifted`, at `c` itself (a chunk then starts where its input does: `F.pad(x, (1, 1))`'s
    columns [1, 17) read x's aligned [0, 16)). Each segment is cut into power-of-two chunks.
    None when nothing splits (the kernel is built whole) or the extent is runtime or large."""
    extent = group.domain[-1]
    if not known(extent) or not 1 < extent <= PIECEWISE_MAX_COLS:
        return None
    v = group.max_vector
    points = {0, extent}
    for c in boundaries:
        if 0 < c < extent:
            points |= ({c} if shifted else {min(c // v * v, extent), min(-(-c // v) * v, extent)})
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
            if step is not None and known(extent) and extent // step[0] <= MAX_PERIODS:
                d, k = step
                found |= {j * d - k for j in range(1, (extent + k) // d + 1)}
    return found


def plan_columns(group: Group, vectorize_enabled: bool) -> list | None:
    """The column chunks of the kernel (see `plan_chunks`): from the boundaries of the whole
    kernel, then once more with those of the chunked one (a boundary a chunk's bounds reveal:
    a pad inside a head once the reshape's division by the head size folds); or the chunks that
start at the boundaries themselves (`plan_chunks`' `shifted`) where they make the narrowest
load wider in no more accesses per row: the loads of a symmetric pad's aligned input rows wide,
its stores as the odd start allows, rather than both as narrow as the pad's width makes them."""
    boundaries = column_boundaries(group, vectorize_enabled)
    chunks = plan_chunks(group, boundaries)
    if chunks is None:
        return None
    finer = plan_chunks(group, boundaries | column_boundaries(group, vectorize_enabled, chunks))
    chunks = finer if len(finer) <= MAX_CHUNKS else chunks if len(chunks) <= MAX_CHUNKS else None
    shifted = plan_chunks(group, boundaries, shifted=True)
    if chunks is None or not vectorize_enabled or shifted == chunks or len(shifted) > MAX_CHUNKS:
        return chunks
    (count, narrowest), (shifted_count, shifted_narrowest) = (
        _load_widths(group, plan) for plan in (chunks, shifted))
    return shifted if shifted_narrowest > narrowest and shifted_count <= count else chunks


def _load_widths(group: Group, chunks) -> tuple:
    """(accesses per row, narrowest load) of the kernel in `chunks`: the global accesses
    (vector instructions) a row of the domain takes, each chunk built alone in a scratch writer
    (its width over each access's width), and the narrowest width of a load."""
    count, narrowest = 0.0, vectorize.DIVISOR_CAP
    for chunk in chunks:
        w = kernel_writer(group, True)
        build(group, plan_tile(group, w), w, [chunk], share=False)
        count += sum(chunk.width / a.width for a in w.accesses)
        narrowest = min([narrowest] + [a.width for a in w.accesses if a.kind == "load"])
    return count, narrowest


