"""Static cost of a kernel from its offline compile: instructions per program against bytes moved.

A kernel that streams memory stays memory-bound only while it issues few enough instructions per
byte (an H200 moves ~4.3 TB/s and issues on the order of 1e12 warp-instructions/s: below ~5-8
bytes per warp-instruction, issue is the limit). Without a GPU this is the performance signal
beside the access widths: the SASS of the sm_<arch> cubin, disassembled with the `nvdisasm` and
`cuobjdump` that ship inside Triton's NVIDIA backend (PTX instructions where those tools or the
cubin are missing, said in `counted`), the registers per thread and local-memory (spill) bytes,
and the global bytes a program moves: the call's ideal bytes (each input read once, each output
written once) over its programs. The code inside loops (a branch back to an earlier label) is
counted apart, so that a loop kernel's issued instructions are estimated as the code outside
its loops once plus its loops' code times their trip count (`StaticCost.issued`).
"""
from __future__ import annotations

import dataclasses
import math
import os
import re
import subprocess
import tempfile



@dataclasses.dataclass(frozen=True)
class StaticCost:
    """One kernel's static cost per program (one program is `num_warps` warps)."""

    arch: int
    counted: str                # "SASS" (the cubin, disassembled) or "PTX" (no cubin/tools)
    instructions: int           # per warp of one program: the static count of the code
    num_warps: int
    bytes_loaded: float         # global bytes a program loads (ideal: each input once)
    bytes_stored: float         # global bytes a program stores
    registers: int | None       # per thread (None: counted from PTX, no allocation known)
    spill_bytes: int | None     # local memory per thread (register spills), None as above
    ptx_instructions: int       # the PTX's count, beside the SASS one
    loop_instructions: int = 0  # of `instructions`, those inside a loop (from the label a
                                # branch jumps back to, to that branch)

    @property
    def bytes_moved(self) -> float:
        return self.bytes_loaded + self.bytes_stored

    @property
    def warp_instructions(self) -> int:
        """Warp-instructions one program issues (straight-line code: every warp runs it all)."""
        return self.instructions * self.num_warps

    @property
    def bytes_per_warp_instruction(self) -> float:
        return self.bytes_moved / self.warp_instructions if self.warp_instructions else 0.0

    def issued(self, trips: int) -> int:
        """Warp-instructions one program issues where each loop runs `trips` times: the code
        outside the loops once, the loops' code `trips` times."""
        once = self.instructions - self.loop_instructions
        return (once + self.loop_instructions * trips) * self.num_warps

    def bytes_per_issued(self, trips: int) -> float:
        """Bytes moved per warp-instruction issued with loops of `trips` trips."""
        issued = self.issued(trips)
        return self.bytes_moved / issued if issued else 0.0

    def summary(self) -> str:
        """One line: `312 SASS x 4 warps, 8192 B/program, 6.6 B/warp-instr, 40 regs, 0 spill`."""
        regs = (f", {self.registers} regs, {self.spill_bytes} B spill"
                if self.registers is not None else "")
        return (f"{self.instructions} {self.counted} x {self.num_warps} warps, "
                f"{self.bytes_moved:.0f} B/program, "
                f"{self.bytes_per_warp_instruction:.2f} B/warp-instr{regs}")

    def as_dict(self) -> dict:
        return dict(dataclasses.asdict(self),
                    bytes_per_warp_instruction=round(self.bytes_per_warp_instruction, 3))


def static_cost(asm: dict, num_warps: int, bytes_loaded: float, bytes_stored: float,
                arch: int = 90) -> StaticCost:
    """The cost of a compiled kernel (`asm`: "ptx" and, where ptxas ran, "cubin")."""
    cubin = asm.get("cubin")
    sass = _disassemble(cubin) if cubin else None
    if sass is not None:
        registers, spill = resource_usage(cubin)
        return StaticCost(arch, "SASS", sass_instructions(sass), num_warps, bytes_loaded,
                          bytes_stored, registers, spill, ptx_instructions(asm["ptx"]),
                          sass_loop_instructions(sass))
    ptx = ptx_instructions(asm["ptx"])
    return StaticCost(arch, "PTX", ptx, num_warps, bytes_loaded, bytes_stored, None, None, ptx,
                      ptx_loop_instructions(asm["ptx"]))


def _ptx_listing(ptx: str) -> list:
    """[(label, instruction)]: each PTX line that is a label (instruction None) or an
    instruction (not a directive, a brace or a comment)."""
    listing = []
    for line in (line.split("//")[0].strip() for line in ptx.splitlines()):
        if line.endswith(":") and line.startswith("$"):
            listing.append((line[:-1], None))
        elif line and not line.startswith(("//", ".", "{", "}", "$", "@@")) \
                and not line.endswith(":"):
            listing.append((None, line))
    return listing


def ptx_instructions(ptx: str) -> int:
    """PTX instructions: lines that are not a directive, a label, a brace or a comment."""
    return sum(1 for _, instruction in _ptx_listing(ptx) if instruction is not None)


_PTX_BRANCH = re.compile(r"\bbra(?:\.uni)?\s+(?P<label>\$[\w.]+)\s*;")


def ptx_loop_instructions(ptx: str) -> int:
    """PTX instructions inside a loop (see `loop_instructions`)."""
    return loop_instructions(_ptx_listing(ptx), _PTX_BRANCH)


# "        /*0120*/                   LDG.E.128 R4, desc[UR4][R2.64] ;"
_SASS_LINE = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(?P<code>[^;]*);")
_LABEL = re.compile(r"^(?P<label>\.L_x_\d+):")


def _sass_listing(sass: str) -> list:
    """[(label, instruction)] of an `nvdisasm -c` listing: each label (instruction None) and
    each instruction, without the NOP padding and the branch-to-itself after the last EXIT
    (padding too)."""
    listing, label = [], None
    for line in sass.splitlines():
        if (m := _LABEL.match(line.strip())) is not None:
            label = m["label"]
            listing.append((label, None))
            continue
        m = _SASS_LINE.match(line)
        if m is None:
            continue
        code = m["code"].split()
        opcode = code[0] if not code[0].startswith("@") else code[1]
        if opcode == "NOP" or (opcode == "BRA" and label is not None and f"`({label})" in line):
            continue
        label = None
        listing.append((None, m["code"]))
    return listing


def sass_instructions(sass: str) -> int:
    """SASS instructions of an `nvdisasm -c` listing, without the NOP padding and the
    branch-to-itself after the last EXIT (padding too)."""
    return sum(1 for _, instruction in _sass_listing(sass) if instruction is not None)


_SASS_BRANCH = re.compile(r"\bBRA\b.*`\((?P<label>\.L_x_\d+)\)")


def sass_loop_instructions(sass: str) -> int:
    """SASS instructions inside a loop (see `loop_instructions`)."""
    return loop_instructions(_sass_listing(sass), _SASS_BRANCH)


def loop_instructions(listing: list, branch: re.Pattern) -> int:
    """The instructions of `listing` ([(label, instruction)]) that lie inside a loop: from a
    label to a later branch back to it, each instruction counted once where loops nest or
    overlap."""
    at, inside, position = {}, set(), 0
    for label, instruction in listing:
        if instruction is None:
            at[label] = position
            continue
        m = branch.search(instruction)
        if m is not None and m["label"] in at:
            inside.update(range(at[m["label"]], position + 1))
        position += 1
    return len(inside)


def _tool(name: str) -> str | None:
    try:
        from triton import knobs
        path = getattr(knobs.nvidia, name).path
    except Exception:       # a Triton without the tool (or without an NVIDIA backend)
        return None
    return path if path and os.path.exists(path) else None


def _run_on_cubin(tool: str, args: list, cubin: bytes) -> str | None:
    path = _tool(tool)
    if path is None:
        return None
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        try:
            return subprocess.run([path, *args, f.name], capture_output=True, text=True,
                                  check=True, timeout=120).stdout
        except (OSError, subprocess.SubprocessError):
            return None


def _disassemble(cubin: bytes) -> str | None:
    return _run_on_cubin("nvdisasm", ["-c"], cubin)


def resource_usage(cubin: bytes) -> tuple[int | None, int | None]:
    """(registers per thread, local-memory bytes per thread) from `cuobjdump -res-usage`."""
    text = _run_on_cubin("cuobjdump", ["-res-usage"], cubin) or ""
    regs, local = re.search(r"\bREG:(\d+)", text), re.search(r"\bLOCAL:(\d+)", text)
    return (int(regs[1]) if regs else None), (int(local[1]) if local else None)


def ideal_bytes(record) -> tuple[int, int]:
    """(bytes loaded, bytes stored) of an ideal run of a kernel record's call: each tensor input
    read once, each output written once (tensors told apart by the launch expression that passes
    them)."""
    seen, loaded, stored = set(), 0, 0
    for p in record.lowered.params:
        key = p.output if p.tensor is None else p.tensor.name
        if p.kind != "pointer" or key in seen:
            continue
        seen.add(key)
        t = record.example_args[p.name]
        nbytes = math.prod(t.shape) * t.element_size()
        if p.tensor is None:
            stored += nbytes
        else:
            loaded += nbytes
    return loaded, stored


def programs(record, config=None) -> int:
    """The grid size of the record's call under `config` (its own by default)."""
    from ir.proxies import hint
    from triton_exec.launch import grid
    return max(1, math.prod(grid(record.lowered, config or record.config,
                                 lambda leaf: hint(leaf.source))))


def record_cost(record, arch: int = 90, config=None) -> StaticCost:
    """The static cost of a kernel record's kernel under `config` (its own by default),
    compiled offline for sm_<arch> as a launch on the call's arguments would specialize it."""
    from triton_exec import launch, offline
    from triton_exec.codegen import KERNEL_OPTIONS
    config = config or record.config
    signature, constexprs, divisible = launch.launch_specialization(
        record.lowered, record.example_args, config)
    asm = offline.compile_asm(record.kernel, signature, constexprs, divisible, config.num_warps,
                              arch, KERNEL_OPTIONS)
    loaded, stored = ideal_bytes(record)
    n = programs(record, config)
    return static_cost(asm, config.num_warps, loaded / n, stored / n, arch)
