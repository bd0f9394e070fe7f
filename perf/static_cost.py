"""Static cost per program, side by side, without a GPU: our kernel, ours without vectorization, a
straightforward hand-written Triton kernel for the same function at the same tile
(perf/handwritten.py), and Liger-Kernel's RoPE kernel, each compiled offline for sm_90
(`triton_exec.cost`): SASS instructions per program (PTX where the cubin tools are missing), the
ideal global bytes a program moves, bytes per warp-instruction (an H200 is issue-bound below
~5-8), registers per thread and spill bytes, and the PTX access widths.

    python perf/static_cost.py            # the seed RoPE, Llama-3-8B RoPE, perf/padcat.py's cases,
                                          # then the reductions (perf/reduction_cost.py)
    python perf/static_cost.py --quick    # tiny seed RoPE (forward, backward), a pad (the suite)
    python perf/static_cost.py --case NHWC --case "'same'"   # the cases whose names hold these
    python perf/static_cost.py --case RMSNorm --case cross-entropy    # some reductions

The reductions (RMSNorm forward and backward, residual add + RMSNorm, SwiGLU forward and
backward, cross-entropy over 128,256 classes at Llama-3-8B shapes, bf16, against Liger-Kernel's
`rms_norm`, `fused_add_rms_norm`, `swiglu` and `cross_entropy` kernels) are
`perf/reduction_cost.py`'s tables, printed after these (not with `--quick`).

Our kernels are built by calling the jitted function on CPU tensors of the case's size with every
launch replaced by a no-op (`triton_exec.launch.noop_launches()`: only shapes and strides matter
to code generation; no kernel runs). The hand-written kernels are checked against eager through
the Triton interpreter on small inputs of the same structure first. Liger rotates q and k in
place, one program per token: at the seed's configuration it moves only the 8 rotated columns of
each head (and k is one extra head), at Llama-3-8B's the same bytes as ours (it reads half of
cos/sin, whose halves repeat). Its wheel is imported from ../shared/wheels (unpacked into a
temporary folder, not installed) when `liger_kernel` is not importable.
"""
from __future__ import annotations

import argparse
import dataclasses
import glob
import importlib
import math
import os
import sys
import tempfile
import types
import zipfile
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")
ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, ROOT / "perf"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import handwritten  # noqa: E402
import ir  # noqa: E402
import padcat  # noqa: E402
import triton_exec  # noqa: E402
from ir.examples import rope  # noqa: E402
from triton_exec import cost, offline  # noqa: E402
from triton_exec.launch import noop_launches  # noqa: E402

BF16 = torch.bfloat16


@dataclasses.dataclass
class Row:
    variant: str
    kernel: str
    tile: str
    cost: cost.StaticCost | None = None
    widths: dict | None = None
    note: str = ""
    loop: int | None = None         # LOOP: tiles per program along a loop dim (ours), if any


@dataclasses.dataclass
class Case:
    name: str
    fn: object
    args: tuple                     # at the measured size
    backward: bool = False          # measure the kernels of x's gradient
    hand: object = None             # (record, args) -> (kernel, kwargs of constexprs/ints)
    small: tuple = ()               # small arguments to check the hand-written kernel on
    liger: dict | None = None       # Liger's launch at this size (see _liger_row)
    hand_bytes: object = None       # args -> (loaded, stored) of the hand-written kernel where
                                    # ours does more (q and k in one kernel); else ours'


def _empty(*shape, dtype=BF16):
    return torch.empty(*shape, dtype=dtype)


def _randn(*shape, dtype=BF16, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def rope_qk(q, k, cos, sin, n: int):
    return rope(q, cos, sin, n), rope(k, cos, sin, n)


def convnext_tail(shortcut, y, gamma):
    """ConvNeXt's block tail: the NHWC branch scaled per channel, added to the NCHW shortcut."""
    return shortcut + (y * gamma).permute(0, 3, 1, 2)


def pad_same(x):
    """TF 'same' padding of an even size before a stride-2 conv (EfficientNet)."""
    return F.pad(x, (0, 1, 0, 1))


# ---- our kernels -------------------------------------------------------------------------

def our_records(case: Case, executor: str) -> list:
    """The kernel records of the case's forward (or of x's gradient), built with no-op launches."""
    jfn = ir.jit(case.fn, executors=[executor])
    args = [a.detach().requires_grad_(case.backward) if isinstance(a, torch.Tensor)
            and a.dtype.is_floating_point and a is case.args[0] else a for a in case.args]
    with noop_launches():
        outs = jfn(*args)
        if case.backward:
            outs = outs if isinstance(outs, tuple) else (outs,)
            torch.autograd.grad(outs, [args[0]], [torch.empty_like(o) for o in outs])
    direction = "backward" if case.backward else "forward"
    return [r for r in triton_exec.last_kernels(jfn) if r.direction == direction]


def _tile(config) -> str:
    loop = f", LOOP {config.loop}" if config.loop else ""
    return f"{config.rows}x{config.cols}{loop}, {config.num_warps} warps"


def our_rows(case: Case, executor: str, label: str) -> list[Row]:
    rows = []
    for record in our_records(case, executor):
        row = Row(label, record.name, _tile(record.config), loop=record.config.loop)
        try:
            row.cost = record.cost(arch=90)
            row.widths = record.access_widths(arch=90)
        except Exception as error:      # the offline compiler's refusal is a result too
            row.note = _error(error)
        rows.append(row)
    return rows


# ---- hand-written kernels ----------------------------------------------------------------

def _specialize(kernel, params: dict, num_warps: int) -> dict:
    """Offline compile of a hand-written kernel as a launch on `params` specializes it: tensors
    (given by dtype) 16-byte aligned, as the allocator makes them; integers of 1 constant,
    multiples of 16 divisible."""
    fn = offline._as_jit_function(kernel)
    constexpr_names = {p.name for p in fn.params if p.is_constexpr}
    signature, constexprs, divisible = {}, {}, []
    for name in fn.arg_names:
        value = params[name]
        if isinstance(value, torch.dtype):
            signature[name] = "*" + {BF16: "bf16", torch.float32: "fp32"}[value]
            divisible.append(name)
        elif name in constexpr_names or value == 1:
            signature[name], constexprs[name] = "constexpr", value
        else:
            signature[name] = "i32"
            if value % 16 == 0:
                divisible.append(name)
    return offline.compile_asm(kernel, signature, constexprs, divisible, num_warps)


def hand_row(case: Case, record) -> Row:
    """The hand-written kernel at our kernel's tile (ROWS, COLS, num_warps) and its bytes."""
    config = record.config
    kernel, params = case.hand(case.args)
    params = dict(params, ROWS=config.rows, COLS=config.cols)
    row = Row("hand-written", offline._as_jit_function(kernel).__name__,
              _tile(dataclasses.replace(config, loop=None)))
    try:
        asm = _specialize(kernel, params, config.num_warps)
        loaded, stored = (case.hand_bytes(case.args) if case.hand_bytes
                          else cost.ideal_bytes(record))
        # its programs: one per [ROWS, COLS] tile of every outer dim (no loop over one of them)
        n = cost.programs(record, dataclasses.replace(config, loop=config.loop and 1))
        row.cost = cost.static_cost(asm, config.num_warps, loaded / n, stored / n)
        row.widths = offline.access_widths(asm["ptx"])
    except Exception as error:      # noqa: BLE001
        row.note = _error(error)
    return row


def check_hand(case: Case) -> str:
    """'' when the hand-written kernel matches eager on the case's small inputs (interpreter)."""
    if not case.small:
        return ""
    kernel, params = case.hand(case.small)
    expected = case.fn(*case.small) if not case.backward else None
    if case.backward:
        x = case.small[0].detach().requires_grad_()
        out = case.fn(x, *case.small[1:])
        dy = _randn(*out.shape, seed=3)
        (expected,) = torch.autograd.grad(out, [x], [dy])
        tensors = [dy, *case.small[1:3]]
    else:
        tensors = [a for a in case.small if isinstance(a, torch.Tensor)]
    out = torch.empty_like(expected)
    rows = params["R"]              # the kernel's rows; its columns: the rest of the output
    cols = expected.numel() // rows
    ROWS, COLS = 4, triton_next_pow2(cols)
    ints = {k: v for k, v in params.items() if not isinstance(v, torch.dtype)}
    grid = (-(-rows // ROWS) * -(-cols // COLS),)
    kernel[grid](*tensors, out, **ints, ROWS=ROWS, COLS=COLS)
    from _bench import check_close
    return check_close(out, expected)


def triton_next_pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


# The hand-written kernel of each function and its parameters, from the case's arguments
def _rope_hand(backward: bool):
    def hand(args):
        x, cos, sin, n = args
        params = {"R": math.prod(x.shape[:-1]), "T": x.shape[-2], "HS": x.shape[-1], "N": n}
        names = ("dy_ptr", "cos_ptr", "sin_ptr", "dx_ptr") if backward else (
            "x_ptr", "cos_ptr", "sin_ptr", "out_ptr")
        params.update({name: x.dtype for name in names})
        return (handwritten.rope_backward if backward else handwritten.rope_forward), params
    return hand


def _pad_hand(lo, hi, inner=1):
    def hand(args):
        (x,) = args
        return handwritten.pad_columns, {"x_ptr": x.dtype, "out_ptr": x.dtype,
                                         "R": math.prod(x.shape[:-1]) // (x.shape[-2] if inner > 1 else 1),
                                         "C_IN": x.shape[-1] * (x.shape[-2] if inner > 1 else 1),
                                         "LO": lo * inner, "HI": hi * inner}
    return hand


def _tail_hand(args):
    s, y, g = args
    N, C, H, W = s.shape
    return handwritten.nhwc_to_nchw_tail, {"s_ptr": s.dtype, "y_ptr": y.dtype, "g_ptr": g.dtype,
                                           "out_ptr": s.dtype, "R": N * C, "C": C, "HW": H * W}


def _pad_same_hand(args):
    (x,) = args
    *outer, H, W = x.shape
    return handwritten.pad_same, {"x_ptr": x.dtype, "out_ptr": x.dtype,
                                  "R": math.prod(outer) * (H + 1), "H": H, "W": W}


def _cat_hand(args):
    a, b = args
    return handwritten.cat_columns, {"a_ptr": a.dtype, "b_ptr": b.dtype, "out_ptr": a.dtype,
                                     "R": a.shape[0], "CA": a.shape[-1], "CB": b.shape[-1]}


def _slice_hand(kernel):
    def hand(args):
        (x,) = args
        return kernel, {"x_ptr": x.dtype, "out_ptr": x.dtype, "R": x.shape[0],
                        "C": x.shape[-1], "LO": 4, "HI": 4}
    return hand


# ---- Liger-Kernel ------------------------------------------------------------------------

def liger_ops(*names: str) -> dict | None:
    """Liger-Kernel's `liger_kernel.ops.<name>` modules, importable or from its wheel unpacked
    into a temporary folder, without the packages' `__init__` (the ops import torch and triton
    only); None without the wheel."""
    try:
        return {m: importlib.import_module(f"liger_kernel.ops.{m}") for m in names}
    except ImportError:
        pass
    wheels = sorted(glob.glob(str(ROOT.parent / "shared" / "wheels" / "liger_kernel-*.whl"))
                    + glob.glob("/work/shared/wheels/liger_kernel-*.whl"))
    if not wheels:
        return None
    folder = tempfile.mkdtemp(prefix="liger_")
    with zipfile.ZipFile(wheels[-1]) as wheel:
        wheel.extractall(folder)
    for name in ("liger_kernel", "liger_kernel.ops"):
        stub = types.ModuleType(name)
        stub.__path__ = [os.path.join(folder, *name.split("."))]
        sys.modules[name] = stub
    return {m: importlib.import_module(f"liger_kernel.ops.{m}") for m in names}


def liger_rows(case: Case) -> list[Row]:
    """Liger's kernel with the launch its rope_forward/rope_backward makes at this size."""
    spec = case.liger
    ops = liger_ops("rope")
    kernel = ops and ops["rope"]._triton_rope
    if kernel is None:
        return [Row("Liger-Kernel", "_triton_rope", "-", note="not available: no wheel")]
    nq, nk, hd, rd, bsz, sl = (spec[k] for k in ("n_qh", "n_kh", "hd", "rd", "bs", "sl"))
    p2 = triton_next_pow2
    params = dict(q_ptr=BF16, q_row_stride=nq * hd, k_ptr=BF16, k_row_stride=nk * hd, cos=BF16,
                  cos_row_stride=rd, sin=BF16, sin_row_stride=rd, sl=sl, bs=bsz, cos_bs=1,
                  n_qh=nq, n_kh=nk, hd=hd, pad_n_qh=p2(nq), pad_n_kh=p2(nk), pad_hd=p2(hd),
                  pad_rd=p2(rd), rd=rd, BLOCK_SIZE=max(p2(nq), p2(nk)),
                  BACKWARD_PASS=case.backward)
    row = Row("Liger-Kernel", "_triton_rope", f"1 token x {nq}+{nk} heads, 4 warps",
              note=spec.get("note", ""))
    try:
        asm = _specialize(kernel, params, 4)
        moved = 2 * (nq + nk) * rd * 2 + 2 * (rd // 2) * 2     # q, k rotated cols r+w; half cos/sin
        row.cost = cost.static_cost(asm, 4, moved - (nq + nk) * rd * 2, (nq + nk) * rd * 2)
        row.widths = offline.access_widths(asm["ptx"])
    except Exception as error:      # noqa: BLE001
        row.note = _error(error)
    return [row]


# ---- the cases ---------------------------------------------------------------------------

def cases(quick: bool) -> list[Case]:
    out = []
    seed = (2, 4, 16, 32, 8) if quick else (256, 16, 1024, 32, 8)
    B, H, T, hs, n = seed
    small = (_randn(1, 2, 8, hs), _randn(8, n, seed=1), _randn(8, n, seed=2), n)
    seed_name = f"seed RoPE (B{B}, H{H}, T{T}, hs{hs}, n{n}), bf16"
    liger_seed = dict(n_qh=H, n_kh=1, hd=hs, rd=n, bs=B, sl=T,
                      note="in place: moves the 8 rotated columns of 32 only; k = 1 extra head")
    for backward in (False, True):
        out.append(Case(f"{seed_name}, {'backward (dx)' if backward else 'forward'}", rope,
                        (_empty(B, H, T, hs), _empty(T, n), _empty(T, n), n), backward,
                        _rope_hand(backward), small, liger_seed))
    if quick:
        out.append(Case("pad (4, 4) of the last dim, [4, 40] bf16", padcat.pad_last,
                        (_empty(4, 40),), hand=_pad_hand(4, 4), small=(_randn(3, 40),)))
        return out
    T = 4096
    llama = Case(f"Llama-3-8B RoPE (B1, T{T}, 32 q / 8 kv heads, hs128, full), bf16, forward",
                 rope_qk, (_empty(1, 32, T, 128), _empty(1, 8, T, 128), _empty(T, 128),
                           _empty(T, 128), 128),
                 hand=lambda args: _rope_hand(False)((args[0], args[2], args[3], args[4])),
                 # the hand-written kernel rotates q only: reads q, cos and sin, writes q's size
                 hand_bytes=lambda args: (args[0].nbytes + args[2].nbytes + args[3].nbytes,
                                          args[0].nbytes),
                 liger=dict(n_qh=32, n_kh=8, hd=128, rd=128, bs=1, sl=T,
                            note="in place, q and k in one program: the same bytes as ours"))
    out.append(llama)
    rows = 65536
    out += [
        Case(f"pad (4, 4) of the last dim, [{rows}, 2040] bf16", padcat.pad_last,
             (_empty(rows, 2040),), hand=_pad_hand(4, 4), small=(_randn(3, 40),)),
        Case("pad (4, 4) of the middle dim of [16384, 1024, 2], fp32", padcat.pad_middle,
             (_empty(16384, 1024, 2, dtype=torch.float32),), hand=_pad_hand(4, 4, inner=2),
             small=(_randn(3, 8, 2, dtype=torch.float32),)),
        Case(f"cat of [{rows}, 1000] and [{rows}, 1048] on the last dim, bf16",
             padcat.cat_last, (_empty(rows, 1000), _empty(rows, 1048)), hand=_cat_hand,
             small=(_randn(3, 20), _randn(3, 28, seed=1))),
        Case(f"x[:, 4:-4] * 2, [{rows}, 2048] bf16", padcat.slice_aligned,
             (_empty(rows, 2048),), hand=_slice_hand(handwritten.slice_scale),
             small=(_randn(3, 48),)),
        Case(f"x[:, 4:-4] + x[:, 3:-5] (misaligned), [{rows}, 2048] bf16",
             padcat.slice_misaligned, (_empty(rows, 2048),),
             hand=_slice_hand(handwritten.slice_add), small=(_randn(3, 48),)),
        Case("NHWC -> NCHW: ConvNeXt's tail s + (y * gamma).permute(0, 3, 1, 2), "
             "y [64, 56, 56, 96] bf16", convnext_tail,
             (_empty(64, 96, 56, 56), _empty(64, 56, 56, 96), _empty(96)), hand=_tail_hand,
             small=(_randn(2, 8, 4, 4), _randn(2, 4, 4, 8, seed=1), _randn(8, seed=2))),
    ]
    out += [Case(f"TF 'same' pad F.pad(x, (0, 1, 0, 1)) (EfficientNet), [64, 96, 56, 56] {name}",
                 pad_same, (_empty(64, 96, 56, 56, dtype=dtype),), hand=_pad_same_hand,
                 small=(_randn(2, 3, 8, 8, dtype=dtype),))
            for dtype, name in ((BF16, "bf16"), (torch.float32, "fp32"))]
    return out


def _error(error) -> str:
    return " ".join(f"{type(error).__name__}: {error}".split())[:160]


# ---- output ------------------------------------------------------------------------------

def _widths(widths) -> str:
    if not widths:
        return "-"
    return "; ".join(f"{op} " + ",".join(f"{w}Bx{c}" for w, c in sorted(d.items(), reverse=True))
                     for op, d in widths.items() if d)


def table(case: Case, rows: list[Row]) -> list[str]:
    hand = next((r.cost for r in rows if r.variant == "hand-written" and r.cost), None)
    lines = [f"### {case.name}", "",
             "| variant | kernel | tile | instr/program | PTX instr | B/program | B/warp-instr "
             "| vs hand-written | regs | spill B | PTX widths | note |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    for r in rows:
        c = r.cost
        if c is None:
            lines.append(f"| {r.variant} | {r.kernel} | {r.tile} | - | - | - | - | - | - | - | - "
                         f"| {r.note} |")
            continue
        ratio = (f"{c.bytes_per_warp_instruction / hand.bytes_per_warp_instruction:.2f}x"
                 if hand else "-")
        lines.append(
            f"| {r.variant} | {r.kernel} | {r.tile} | {c.instructions} {c.counted} "
            f"| {c.ptx_instructions} | {c.bytes_moved:.0f} | {c.bytes_per_warp_instruction:.2f} "
            f"| {ratio} | {c.registers if c.registers is not None else '-'} "
            f"| {c.spill_bytes if c.spill_bytes is not None else '-'} | {_widths(r.widths)} "
            f"| {r.note} |")
    return lines + [""]


def measure(case: Case) -> list[Row]:
    rows = our_rows(case, "triton", "ours")
    rows += our_rows(case, "triton_novec", "ours, no vectorization")
    if case.hand is not None and rows and rows[0].cost is not None:
        records = our_records(case, "triton")
        row = hand_row(case, records[0])
        problem = check_hand(case)
        if problem:
            row.note = f"WRONG against eager: {problem}"
        rows.append(row)
    if case.liger is not None:
        rows += liger_rows(case)
    return rows


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, a subset")
    parser.add_argument("--case", action="append", default=[],
                        help="only the cases whose names hold this text (repeatable)")
    ns = parser.parse_args(argv)
    import triton
    print(f"# Static cost per program, sm_90 offline (Triton {triton.__version__}, "
          f"torch {torch.__version__}){' --quick' if ns.quick else ''}\n")
    print("instr/program: per warp of one program (SASS from the cubin; PTX where the tools are "
          "missing); B/program: the call's ideal bytes (inputs read once, outputs written once) "
          "over its programs; B/warp-instr = B/program / (instr x num_warps).\n")
    results = {}
    for case in cases(ns.quick):
        if ns.case and not any(text in case.name for text in ns.case):
            continue
        rows = measure(case)
        results[case.name] = rows
        print("\n".join(table(case, rows)), flush=True)
    if not ns.quick:
        import reduction_cost       # it imports this module's helpers
        results.update(reduction_cost.print_tables(
            lambda name, key: not ns.case or any(text in name for text in ns.case)))
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
