"""Step 4 of lowering a group: the @triton.jit function's source from the writer's lines: the
signature, the prelude, assignments nothing reads dropped, and under a loop the body split into
the lines that run once per program and those inside the loop. Imports `writer` and
`tile_plan` from this package.
"""
from __future__ import annotations

import collections
import re

from triton_exec.codegen.tile_plan import Loop
from triton_exec.codegen.writer import KernelWriter


def render_kernel(name: str, w: KernelWriter, stores: list) -> str:
    """Step 4: the @triton.jit function's source."""
    signature = ", ".join([p.name for p in w.params]
                          + ["ROWS: tl.constexpr", "COLS: tl.constexpr", "VEC: tl.constexpr"]
                          + (["LOOP: tl.constexpr"] if w.loop else []))
    prelude = ["# Runtime sizes and strides arrive divided by their guarded power-of-two "
               "divisor; h*: values the launcher computes"] + w.prelude if w.prelude else []
    body = live_lines(prelude + w.lines + (["# Stores"] + stores if stores else []))
    if w.loop is not None:
        body = loop_body(body, w.loop)
    pointers = [p.name for p in w.params if p.kind == "pointer"]
    decorator = "@triton.jit" if w.vectorize else (
        "# The vectorization analysis is off: pointer alignment stays unknown to Triton\n"
        f"@triton.jit(do_not_specialize_on_alignment={pointers})")
    return "{}\ndef {}({}):\n{}\n".format(
        decorator, name, signature, "\n".join("    " + line for line in body))


_ASSIGNED = re.compile(r"^\s*(\w+) = ")
_TARGETS = re.compile(r"^(\w+(?:, \w+)*) = ")
_NAME = re.compile(r"[A-Za-z_]\w*")


def loop_body(lines: list, loop: Loop) -> list:
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
        if line.startswith(" "):    # the body of a block (`stores`): with its header
            inside.append(line)
            if (targets := _TARGETS.match(code.strip())) is not None:
                dependent |= set(targets[1].split(", "))
            continue
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


def live_lines(lines: list) -> list:
    """The kernel's lines without assignments nothing reads (a conversion a plain copy made
    unneeded), until none is left."""
    while True:
        words = collections.Counter(w for line in lines for w in re.findall(r"\w+", line))
        live = [line for line in lines
                if (m := _ASSIGNED.match(line)) is None or words[m[1]] > 1]
        if len(live) == len(lines):
            return lines
        lines = live

