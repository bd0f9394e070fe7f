"""RoPE, side by side: torch eager, torch.compile, ir.jit (Triton), ir.jit (Triton, no
vectorization analysis); then forward + backward (the gradient of x, or of q and k), with
Liger-Kernel's RoPE (a hand-written Triton RoPE with a fused backward) as one more row.

    python perf/rope.py          # on a GPU: the seed's size, llama-2-7b, llama-3-8B (bf16)
    python perf/rope.py --cpu    # tiny sizes through the Triton interpreter (a smoke test)

x is [B, n_head, T, head]; cos and sin are [T, rope width]; the first `rope width` elements of
the head are rotated, the rest pass through. In the forward + backward table x (q, k) is the
transposed view of a [B, T, heads, head] tensor, as a projection makes it, cos/sin repeat their
halves (as Llama's), and each row gets the upstream gradient in the layout of its own output.
Liger rotates q and k together, in place: its row times that (on the same tensors each time).
The Liger row needs `liger_kernel` importable (`pip install --no-deps` its wheel, as
perf/gpu_check.sh does); without it, and on CPU, the row says why it did not run.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _bench  # noqa: E402
from ir.examples import rope, rope_inputs  # noqa: E402

# name: (B, n_head, T, head, rope width)
GPU_SIZES = {
    "seed (bsz 256, 16 heads, seq 1024, head 32, rope 8)": (256, 16, 1024, 32, 8),
    "llama-2-7b (B 2, 32 heads, T 4096, head 128, rope 128)": (2, 32, 4096, 128, 128),
    "llama-3-8B (B 2, 32 heads, T 8192, head 128, rope 128)": (2, 32, 8192, 128, 128),
}
CPU_SIZES = {
    "seed-like (1, 2, 8, head 32, rope 8)": (1, 2, 8, 32, 8),
    "llama-like (1, 2, 8, head 16, rope 16)": (1, 2, 8, 16, 16),
}


def cases(device):
    import torch
    sizes = CPU_SIZES if device == "cpu" else GPU_SIZES
    for name, (b, h, t, d, n) in sizes.items():
        x, cos, sin, n = rope_inputs(b, h, t, d, n, dtype=torch.bfloat16, device=device)
        nbytes = _bench.tensor_bytes(x, cos, sin, x)       # read x, cos, sin; write out like x
        yield name, rope, (x, cos, sin, n), nbytes


# name: (B, q heads, kv heads (0: x only), T, head, rope width)
TRAINING_GPU_SIZES = {
    "seed (B 256, 16 heads, T 1024, head 32, rope 8), x": (256, 16, 0, 1024, 32, 8),
    "llama-3-8B (B 1, T 4096, 32 q / 8 kv heads, head 128, full), q and k":
        (1, 32, 8, 4096, 128, 128),
}
TRAINING_CPU_SIZES = {
    "seed-like (1, 2 heads, T 8, head 32, rope 8), x": (1, 2, 0, 8, 32, 8),
    "llama-like (1, 4 q / 2 kv heads, T 8, head 16, full), q and k": (1, 4, 2, 8, 16, 16),
}


def rope_qk(q, k, cos, sin, n: int):
    return rope(q, cos, sin, n), rope(k, cos, sin, n)


def training_cases(device):
    """(name, fn, tensors that need grad, other arguments, ideal bytes) per size: fn(*tensors,
    *others); the bytes of one forward (read x, cos, sin; write out) and one backward (read the
    gradient, cos, sin; write x's gradient)."""
    import torch
    sizes = TRAINING_CPU_SIZES if device == "cpu" else TRAINING_GPU_SIZES
    for name, (b, h, kv, t, d, n) in sizes.items():
        g = torch.Generator().manual_seed(0)

        def heads(count):
            base = torch.randn(b, t, count, d, generator=g).to(torch.bfloat16).to(device)
            return base.transpose(1, 2)

        half = torch.randn(t, n // 2, generator=g)
        cos = torch.cat((half.cos(), half.cos()), -1).to(torch.bfloat16).to(device)
        sin = torch.cat((half.sin(), half.sin()), -1).to(torch.bfloat16).to(device)
        xs = [heads(h)] + ([heads(kv)] if kv else [])
        per_x = [2 * _bench.tensor_bytes(x, cos, sin, x) for x in xs]
        yield name, (rope_qk if kv else rope), xs, (cos, sin, n), sum(per_x)


def _liger(xs, cos, sin, n):
    """Liger's RoPE on q (and k: x's first head when the case has x only), or why not."""
    if xs[0].device.type == "cpu":
        # checked: under the interpreter its fp32 results match eager, its bf16 ones do not
        return None, "skipped on CPU: Liger's bf16 kernel is wrong under the Triton interpreter"
    try:
        from liger_kernel.ops.rope import LigerRopeFunction
    except Exception as error:  # noqa: BLE001  (any import failure: the row says why)
        return None, f"skipped: liger_kernel not importable ({type(error).__name__})"
    k_only = len(xs) == 1

    def run(q, k=None):
        k = q[:, :1].detach().clone() if k is None else k
        out = LigerRopeFunction.apply(q, k, cos, sin, None, 1, n)
        return out[0] if k_only else out
    return run, "in place; x only: k is one extra head" if k_only else "in place"


def _grads_like(outs, seed=1):
    import torch
    g = torch.Generator().manual_seed(seed)
    return [torch.empty_like(o).copy_(torch.randn(o.shape, generator=g).to(o.dtype))
            for o in outs]


def compare_training(case, fn, xs, others, ideal_bytes, device, copy_gbps, with_compile):
    """The five rows of one forward + backward case, each checked against eager (outputs and
    gradients)."""
    import torch

    import ir
    import triton_exec  # noqa: F401  (registers the executors)

    def leaves():
        return [x.detach().clone().transpose(1, 2).contiguous().transpose(1, 2)
                .requires_grad_() for x in xs]

    def as_tuple(out):
        return out if isinstance(out, tuple) else (out,)

    ref = leaves()
    expected = as_tuple(fn(*ref, *others))
    grads = _grads_like(expected)
    expected_grads = torch.autograd.grad(expected, ref, grads)
    candidates = [("eager", fn)]
    if with_compile:
        candidates.append(("torch.compile", torch.compile(fn, dynamic=False)))
    candidates += [("ir.jit triton", ir.jit(fn, executors=["triton"])),
                   ("ir.jit triton_novec", ir.jit(fn, executors=["triton_novec"]))]
    liger, liger_note = _liger(xs, *others)
    rows = []
    for label, runner in candidates + [("Liger-Kernel", liger)]:
        row = _bench.Row(case, label, note=liger_note if label == "Liger-Kernel" else "")
        if runner is None:
            rows.append(row)
            continue
        try:
            inputs = leaves()
            outs = as_tuple(runner(*inputs, *others) if label != "Liger-Kernel"
                            else runner(*[x * 1 for x in inputs]))     # Liger writes in place
            got = torch.autograd.grad(outs, inputs, [torch.empty_like(o).copy_(g) for o, g
                                                     in zip(outs, grads)])
            problems = [_bench.check_close(a, e) for a, e in zip(outs + got,
                                                                  expected + expected_grads)]
            row.ok = not any(problems)
            row.note = "; ".join([row.note] + [p for p in problems if p]).strip("; ")
            row_grads = [torch.empty_like(o).copy_(g) for o, g in zip(outs, grads)]
            timed = inputs if label != "Liger-Kernel" else [x.detach().clone().requires_grad_()
                                                            for x in inputs]

            def step():
                torch.autograd.grad(as_tuple(runner(*timed, *others) if label != "Liger-Kernel"
                                             else runner(*[x * 1 for x in timed])),
                                    timed, row_grads)
            row.ms = _bench.time_ms(step, device)
            row.gbps = ideal_bytes / (row.ms * 1e-3) / 1e9
            if copy_gbps:
                row.share = row.gbps / copy_gbps
        except Exception as error:       # a row that cannot run says why; the table goes on
            row.ok = False
            row.note = " ".join(f"{type(error).__name__}: {error}".split())[:200]
        rows.append(row)
    if not with_compile:
        why = "skipped (--no-compile)" if device == "cuda" else "skipped on CPU (use --with-compile)"
        rows.insert(1, _bench.Row(case, "torch.compile", note=why))
    return rows


def main(argv=None):
    ns = _bench.parse(argv, __doc__)
    rows = _bench.run_cases("RoPE forward, bf16", cases, ns)
    device = _bench.select_device(ns.cpu)
    with_compile = not ns.no_compile and (device == "cuda" or ns.with_compile)
    copy_gbps = _bench.copy_bandwidth(device)
    training = []
    for name, fn, xs, others, nbytes in training_cases(device):
        training += compare_training(name, fn, xs, others, nbytes, device, copy_gbps,
                                     with_compile)
    _bench.print_table("RoPE forward + backward, bf16", training, device, copy_gbps)
    return rows + training


if __name__ == "__main__":
    main(sys.argv[1:])
