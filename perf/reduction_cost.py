"""Static cost per program of our reduction kernels against Liger-Kernel's at Llama-3-8B shapes
(hidden 4096, SwiGLU's 14336, a 128,256-token vocabulary, bf16), compiled offline for sm_90
(`triton_exec.cost`, as `perf/static_cost.py`): RMSNorm forward and backward (as transformers
writes it: in fp32, the weight times the result in bf16), residual add + RMSNorm, SwiGLU forward
and backward, and cross-entropy (forward and the logits' gradient). Liger's kernels are compiled
with the launch its own wrapper makes at this size (its wheel from ../shared/wheels, imported
without its package `__init__`; in a child process without the interpreter, which replaces
the `tl.sum` its kernels call).

Bytes per warp-instruction are the call's ideal bytes per program over the warp-instructions
the program issues. The static count is of the code: for a kernel with loops (Liger's RMSNorm
backward over its rows, its cross-entropy's two passes over the vocabulary; our column sums over
the rows and our long rows over their blocks) the issued count is estimated as the code outside
the loops once plus the loops' code times their trip count (column "trips"; `cost.StaticCost.
issued`), both code paths of a branch counted (Liger's cross-entropy zeroes an ignored row's
gradient in a loop of its own: 17 SASS, counted with the others).

    python perf/reduction_cost.py            # slow: a few minutes of offline compiles
    python perf/reduction_cost.py "rms forward" "cross-entropy forward"     # some cases

`python perf/static_cost.py` prints these tables too, after its RoPE and pad/cat ones.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import subprocess
from pathlib import Path

if "--liger" not in sys.argv:
    os.environ.setdefault("TRITON_INTERPRET", "1")
ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, ROOT / "perf"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import ir  # noqa: E402
import triton_exec  # noqa: E402
from static_cost import _error, _widths, liger_ops  # noqa: E402
from triton_exec import cost, offline  # noqa: E402
from triton_exec.launch import noop_launches  # noqa: E402

BF16, F32 = torch.bfloat16, torch.float32
HIDDEN, FFN, VOCAB, TOKENS, CE_TOKENS, SMS = 4096, 14336, 128256, 4096, 1024, 132


def rms_norm(x, w):
    """transformers' LlamaRMSNorm."""
    xf = x.to(F32)
    return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)


def add_rms_norm(x, r, w):
    h = x + r
    return rms_norm(h, w), h


def swiglu(a, b):
    return F.silu(a) * b


def cross_entropy(logits, target):
    return F.cross_entropy(logits, target)


@dataclasses.dataclass
class Row:
    variant: str
    kernel: str
    tile: str
    trips: int = 1
    cost: cost.StaticCost | None = None
    widths: dict | None = None
    note: str = ""

    @property
    def bytes_per_issued(self) -> float:
        return self.cost.bytes_per_issued(self.trips)


# ---- ours --------------------------------------------------------------------------------

def _trips(record) -> int:
    """The trip count of the kernel's loops (1: none)."""
    lowered, config = record.lowered, record.config
    from ir.proxies import hint
    from triton_exec import index
    if lowered.column_rows is not None:
        rows = index.evaluate(lowered.column_rows, lambda leaf: hint(leaf.source))
        return max(1, -(-rows // config.rows))
    if lowered.row_loop:
        cols = index.evaluate(lowered.cols, lambda leaf: hint(leaf.source))
        return max(1, -(-cols // config.cols))
    return 1


def ours(fn, args, backward: bool) -> list[Row]:
    jfn = ir.jit(fn, executors=["triton"])
    args = [a.detach().requires_grad_(backward) if a.dtype.is_floating_point else a for a in args]
    with noop_launches():
        outs = jfn(*args)
        if backward:
            outs = outs if isinstance(outs, tuple) else (outs,)
            torch.autograd.grad(outs, [a for a in args if a.requires_grad],
                                [torch.empty_like(o) for o in outs])
    direction = "backward" if backward else "forward"
    rows = []
    for record in triton_exec.last_kernels(jfn):
        if record.direction != direction:
            continue
        c = record.config
        row = Row("ours", record.name, f"{c.rows}x{c.cols}, {c.num_warps} warps", _trips(record))
        try:
            row.cost = record.cost(arch=90)
            row.widths = record.access_widths(arch=90)
        except Exception as error:      # noqa: BLE001 - the compiler's refusal is a result
            row.note = _error(error)
        rows.append(row)
    return rows


# ---- Liger-Kernel ------------------------------------------------------------------------

def _compile(kernel, params: dict, num_warps: int) -> dict:
    """The offline compile of a launch on `params`: tensors (by dtype) 16-byte aligned, ints of
    1 constant, multiples of 16 divisible, floats fp32, constexprs as given."""
    fn = offline._as_jit_function(kernel)
    constexpr_names = {p.name for p in fn.params if p.is_constexpr}
    signature, constexprs, divisible = {}, {}, []
    for name in fn.arg_names:
        value = params.get(name, fn.params[fn.arg_names.index(name)].default)
        if isinstance(value, torch.dtype):
            signature[name] = "*" + {BF16: "bf16", F32: "fp32", torch.int64: "i64"}[value]
            divisible.append(name)
        elif name in constexpr_names or value is None or (isinstance(value, int) and value == 1):
            signature[name], constexprs[name] = "constexpr", value
        elif isinstance(value, float):
            signature[name] = "fp32"
        else:
            signature[name] = "i32"
            if value % 16 == 0:
                divisible.append(name)
    return offline.compile_asm(kernel, signature, constexprs, divisible, num_warps)


def liger_row(kernel, params, num_warps, loaded, stored, trips=1, note="") -> Row:
    name = offline._as_jit_function(kernel).__name__
    row = Row("Liger-Kernel", name, f"{params.get('BLOCK_SIZE')} cols, {num_warps} warps", trips,
              note=note)
    try:
        asm = _compile(kernel, params, num_warps)
        row.cost = cost.static_cost(asm, num_warps, loaded, stored)
        row.widths = offline.access_widths(asm["ptx"])
    except Exception as error:      # noqa: BLE001
        row.note = _error(error)
    return row


def liger_rows(liger, case: str) -> list[Row]:
    import triton
    import triton.language as tl
    if liger is None:
        return [Row("Liger-Kernel", "-", "-", note="not available: no wheel")]
    H, N = HIDDEN, TOKENS
    if case == "rms forward":
        return [liger_row(liger["rms_norm"]._rms_norm_forward_kernel, dict(
            Y_ptr=BF16, Y_row_stride=H, X_ptr=BF16, X_row_stride=H, W_ptr=BF16, W_row_stride=1,
            RSTD_ptr=F32, RSTD_row_stride=1, n_cols=H, eps=1e-6, offset=0.0, casting_mode=0,
            elementwise_affine=True, BLOCK_SIZE=H), 8, 2 * H + 2 * H / N, 2 * H + 4)]
    if case == "rms backward":
        per = math.ceil(N / SMS)
        return [liger_row(liger["rms_norm"]._rms_norm_backward_kernel, dict(
            dY_ptr=BF16, dY_row_stride=H, dX_ptr=BF16, dX_row_stride=H, X_ptr=BF16,
            X_row_stride=H, X_dtype=tl.bfloat16, W_ptr=BF16, W_row_stride=1, RSTD_ptr=F32,
            RSTD_row_stride=1, dW_ptr=F32, dW_row_stride=H, n_rows=N, n_cols=H, offset=0.0,
            rows_per_program=per, casting_mode=0, elementwise_affine=True, BLOCK_SIZE=H,
            COMPUTE_DW=True), 8, per * (4 * H + 4) + 2 * H, per * 2 * H + 4 * H, per,
            note="dW partial sums per program; torch sums them (another kernel)")]
    if case == "add + rms forward":
        return [liger_row(liger["fused_add_rms_norm"]._fused_add_rms_norm_forward_kernel, dict(
            Y_ptr=BF16, Y_row_stride=H, S_ptr=BF16, S_row_stride=H, X_ptr=BF16, X_row_stride=H,
            R_ptr=BF16, R_row_stride=H, W_ptr=BF16, W_row_stride=1, RSTD_ptr=F32,
            RSTD_row_stride=1, n_cols=H, eps=1e-6, offset=0.0, casting_mode=0, BLOCK_SIZE=H),
            8, 4 * H + 2 * H / N, 4 * H + 4)]
    block = triton.next_power_of_2(FFN)
    if case == "swiglu forward":
        return [liger_row(liger["swiglu"]._swiglu_forward_kernel, dict(
            a_ptr=BF16, b_ptr=BF16, c_ptr=BF16, stride=FFN, gate_multiplier=1.0, n_cols=FFN,
            BLOCK_SIZE=block), 32, 4 * FFN, 2 * FFN)]
    if case == "swiglu backward":
        return [liger_row(liger["swiglu"]._swiglu_backward_kernel, dict(
            dc_ptr=BF16, a_ptr=BF16, b_ptr=BF16, stride=FFN, gate_multiplier=1.0, n_cols=FFN,
            BLOCK_SIZE=block), 32, 6 * FFN, 4 * FFN, note="in place: da, db over a, b")]
    if case.startswith("cross-entropy"):
        block = min(32768, triton.next_power_of_2(VOCAB))
        return [liger_row(liger["cross_entropy"].liger_cross_entropy_kernel, dict(
            X_ptr=BF16, X_stride=VOCAB, Y_ptr=torch.int64, Y_stride=1, weight_ptr=BF16,
            loss_ptr=F32, z_loss_ptr=F32, loss_stride=1, token_accuracy_ptr=F32,
            token_accuracy_stride=0, predicted_tokens_ptr=torch.int64,
            predicted_tokens_stride=0, n_cols=VOCAB, n_non_ignore=CE_TOKENS,
            sum_non_ignore_weight=float(CE_TOKENS), weight_sum=0.0, ignore_index=-100,
            lse_square_scale=0.0, label_smoothing=0.0, reduction="mean", softcap=None,
            RETURN_Z_LOSS=False, RETURN_TOKEN_ACCURACY=False, RETURN_PREDICTED_TOKENS=False,
            BLOCK_SIZE=block, HAS_WEIGHT=False, HAS_SOFTCAPPING=False, HAS_GRADIENTS=True),
            32, 2 * VOCAB + 8, 2 * VOCAB + 4, math.ceil(VOCAB / block),
            note="loss and the logits' gradient (in place) in one pass of the forward")]
    raise ValueError(case)


# ---- the cases ---------------------------------------------------------------------------

def _empty(*shape, dtype=BF16):
    return torch.empty(*shape, dtype=dtype)


def cases():
    x, r, w = _empty(TOKENS, HIDDEN), _empty(TOKENS, HIDDEN), _empty(HIDDEN)
    a, b = _empty(TOKENS, FFN), _empty(TOKENS, FFN)
    logits = _empty(CE_TOKENS, VOCAB)
    target = torch.zeros(CE_TOKENS, dtype=torch.int64)
    return [
        (f"RMSNorm forward [{TOKENS}, {HIDDEN}]", "rms forward", rms_norm, (x, w), False),
        (f"RMSNorm backward (dx, dw) [{TOKENS}, {HIDDEN}]", "rms backward", rms_norm, (x, w),
         True),
        (f"residual add + RMSNorm forward [{TOKENS}, {HIDDEN}]", "add + rms forward",
         add_rms_norm, (x, r, w), False),
        (f"SwiGLU forward [{TOKENS}, {FFN}]", "swiglu forward", swiglu, (a, b), False),
        (f"SwiGLU backward [{TOKENS}, {FFN}]", "swiglu backward", swiglu, (a, b), True),
        (f"cross-entropy forward [{CE_TOKENS}, {VOCAB}], mean", "cross-entropy forward",
         cross_entropy, (logits, target), False),
        (f"cross-entropy backward (logits' gradient) [{CE_TOKENS}, {VOCAB}]",
         "cross-entropy backward", cross_entropy, (logits, target), True),
    ]


def table(name: str, rows: list[Row]) -> list[str]:
    lines = [f"### {name}", "",
             "| variant | kernel | tile | trips | instr/program (in loops) | B/program | B/warp-instr "
             "| regs | spill B | PTX widths | note |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---|---|"]
    for r in rows:
        c = r.cost
        if c is None:
            lines.append(f"| {r.variant} | {r.kernel} | {r.tile} | {r.trips} | - | - | - | - | "
                         f"- | - | {r.note} |")
            continue
        lines.append(f"| {r.variant} | {r.kernel} | {r.tile} | {r.trips} | {c.instructions} "
                     f"{c.counted} ({c.loop_instructions}) | {c.bytes_moved:.0f} "
                     f"| {r.bytes_per_issued:.2f} "
                     f"| {c.registers if c.registers is not None else '-'} "
                     f"| {c.spill_bytes if c.spill_bytes is not None else '-'} "
                     f"| {_widths(r.widths)} | {r.note} |")
    return lines + [""]


def liger_rows_apart(key: str) -> list[Row]:
    """Liger's rows, compiled in a child process without TRITON_INTERPRET: its kernels call
    `tl.sum` and the like (@triton.jit library functions), which the interpreter replaces."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, __file__, "--liger", key], env=env,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return [Row("Liger-Kernel", "-", "-", note=_error(RuntimeError(done.stderr[-300:])))]
    rows = []
    for found in json.loads(done.stdout.splitlines()[-1]):
        found["cost"] = found["cost"] and cost.StaticCost(**{
            k: v for k, v in found["cost"].items() if k != "bytes_per_warp_instruction"})
        found["widths"] = found["widths"] and {op: {int(w): n for w, n in d.items()}
                                               for op, d in found["widths"].items()}
        rows.append(Row(**found))
    return rows


def main(argv=None) -> dict:
    argv = list(argv or ())
    if argv[:1] == ["--liger"]:     # the child of `liger_rows_apart`
        rows = liger_rows(liger_ops("rms_norm", "fused_add_rms_norm", "swiglu", "cross_entropy"),
                          argv[1])
        print(json.dumps([dict(dataclasses.asdict(r), cost=r.cost and r.cost.as_dict())
                          for r in rows]))
        return {}
    only = set(argv)
    return print_tables(lambda name, key: not only or key in only)


def print_tables(keep) -> dict:
    """Prints the table of each case that `keep(name, key)` keeps; {name: rows}."""
    import triton
    print(f"# Reductions: static cost per program, sm_90 offline (Triton {triton.__version__}, "
          f"torch {torch.__version__}), ours against Liger-Kernel, bf16\n")
    results = {}
    for name, key, fn, args, backward in cases():
        if not keep(name, key):
            continue
        rows = ours(fn, args, backward) + liger_rows_apart(key)
        results[name] = rows
        print("\n".join(table(name, rows)), flush=True)
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
