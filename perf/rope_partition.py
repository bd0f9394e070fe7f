"""Kernels per RoPE call in real RoPE code (issue 28, item 3: partition quality): for q and k
sharing cos/sin with GQA (k has a quarter of q's heads), the Triton kernels of `ir.jit(fn,
executors=["triton"])` per forward and per backward, the launches per call (those kernels plus
the ops PyTorch still runs with a memory-bound kernel of their own, `perf/kernel_counts.py`'s
count) and eager's launches (ATen ops that are not views), each call checked against eager;
with `--cost`, the static cost of the forward kernel (sm_90 offline: SASS instructions per
program, bytes per warp-instruction, PTX access widths).

    python perf/rope_partition.py [--cost]      # B 2, 8 q / 2 kv heads, T 16, head 64, bf16

Forms: transformers' `apply_rotary_pos_emb` (rotate-half), the same then `repeat_kv` of k and v,
LitGPT's partial rotation (a quarter of the head), the README's RoPE on q and k, Qwen2-VL's
M-RoPE (cos/sin sections `cat` shared by q and k).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")
ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, ROOT / "perf", ROOT / "tests"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

import ir  # noqa: E402
import triton_exec  # noqa: E402
from kernel_counts import torch_ops  # noqa: E402
from test_partition_quality import (  # noqa: E402
    hf_attention_inputs, hf_rope, inputs, litgpt_rope, mrope, readme_qk)

FORMS = [("transformers rotate-half", hf_rope, "btd"),
         ("transformers + repeat_kv(k, v)", hf_attention_inputs, "btd"),
         ("LitGPT partial (16 of 64)", litgpt_rope, "partial"),
         ("README RoPE on q and k", readme_qk, "partial"),
         ("Qwen2-VL M-RoPE", mrope, "sections")]
SIZE = dict(B=2, H=8, Hkv=2, T=16, D=64)


class EagerLaunches(TorchDispatchMode):
    """Counts the ATen ops eager dispatches that are not views (each a kernel launch)."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not func._schema.is_mutable and not any(
                a.alias_info is not None for a in func._schema.returns) and func not in (
                torch.ops.aten.detach.default,):
            self.count += 1
        return func(*args, **(kwargs or {}))


def case_args(fn, layout):
    """The call's arguments, q, k (and v) first: the inputs that need gradients."""
    q, k, cos, sin = inputs(layout, **SIZE)
    if fn is hf_attention_inputs:
        return (q, k, torch.randn(k.shape).to(k.dtype), cos, sin), 3
    return (q, k, cos, sin), 2


def leaves(args, n_grad):
    return [a.detach().clone().requires_grad_(i < n_grad) for i, a in enumerate(args)]


def step(fn, args):
    """One forward and backward of every output, with gradients of q, k (and v)."""
    outs = fn(*args)
    grads = [a for a in args if a.requires_grad]
    return outs, torch.autograd.grad(outs, grads, [torch.ones_like(o) for o in outs])


def eager_launches(fn, args, n_grad) -> tuple[int, int]:
    args = leaves(args, n_grad)
    with EagerLaunches() as forward:
        outs = fn(*args)
    with EagerLaunches() as backward:
        torch.autograd.grad(outs, [a for a in args if a.requires_grad],
                            [torch.ones_like(o) for o in outs])
    return forward.count, backward.count


def measure(name, fn, layout, with_cost: bool) -> dict:
    args, n_grad = case_args(fn, layout)
    jfn = ir.jit(fn, executors=["triton"])
    (outs, grads) = step(jfn, leaves(args, n_grad))
    (want, want_grads) = step(fn, leaves(args, n_grad))
    ok = all(torch.equal(a, b) for a, b in zip(outs, want)) and all(
        torch.allclose(a.float(), b.float(), rtol=2e-2, atol=4e-2)
        for a, b in zip(grads, want_grads))
    records = triton_exec.last_kernels(jfn)
    forward = [r for r in records if r.direction == "forward"]
    backward = [r for r in records if r.direction == "backward"]
    torch_fwd = torch_ops([ir.last_traces(jfn)[-1]])
    torch_bwd = torch_ops([t[-1] for t in ir.last_backward_traces(jfn).values()])
    row = dict(name=name, forward=len(forward), backward=len(backward),
               launches=(len(forward) + len(torch_fwd), len(backward) + len(torch_bwd)),
               eager=eager_launches(fn, args, n_grad), ok=ok, cost="")
    if with_cost and len(forward) == 1:
        c = forward[0].cost(arch=90)
        widths = forward[0].access_widths(arch=90)
        row["cost"] = (f"{c.instructions} {c.counted}, {c.bytes_per_warp_instruction:.2f} "
                       f"B/warp-instr, ld {sorted(widths['ld'])} st {sorted(widths['st'])} B")
    return row


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cost", action="store_true",
                        help="also the forward kernel's static cost (sm_90, offline)")
    ns = parser.parse_args(argv)
    size = ", ".join(f"{k} {v}" for k, v in SIZE.items())
    print(f"## Kernels per RoPE call, q and k with GQA ({size}), bf16\n")
    print("| form | Triton kernels fwd / bwd | launches fwd / bwd (ours) | launches fwd / bwd "
          "(eager) | matches eager |" + (" forward kernel, sm_90 |" if ns.cost else ""))
    print("|---|---:|---:|---:|---|" + ("---|" if ns.cost else ""))
    rows = []
    for name, fn, layout in FORMS:
        row = measure(name, fn, layout, ns.cost)
        rows.append(row)
        print(f"| {name} | {row['forward']} / {row['backward']} | {row['launches'][0]} / "
              f"{row['launches'][1]} | {row['eager'][0]} / {row['eager'][1]} | "
              f"{'yes' if row['ok'] else 'NO'} |" + (f" {row['cost']} |" if ns.cost else ""),
              flush=True)
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
