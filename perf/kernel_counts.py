"""Memory-bound kernels per training step of the small GPT of `ir.examples` under
`ir.jit(model, executors=["triton"])`: the Triton kernels of the forward and of the backward,
and the ops PyTorch still runs in the traces that launch a memory-bound kernel of their own
(leaving out views, matmuls, attention and the embedding; eager autograd's own backward of an
op left to PyTorch is not in a trace and not counted).

    python perf/kernel_counts.py             # 2 layers, B 2, T 16, through the interpreter on a CPU
"""
from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402

import ir  # noqa: E402
import triton_exec  # noqa: E402
from ir.examples import GPT, GPTConfig, gpt_batch, gpt_loss  # noqa: E402

FREE = {"reshape", "permute", "broadcast_in_dim", "slice"}
COMPUTE = ("linear", "matmul", "scaled_dot_product_attention", "embedding", "mm", "bmm", "addmm")


def torch_ops(traces) -> list:
    """The ops of these final traces that PyTorch runs with a memory-bound kernel."""
    ops = []
    for trace in traces:
        for e in trace.eqns:
            name = str(e.params.get("fn_name", e.prim.name)) if e.prim.name == "opaque" \
                else e.prim.name
            if (e.prim.kind == "host" or name in FREE or "fusion" in name
                    or any(c in name for c in COMPUTE)):
                continue
            ops.append(name)
    return ops


def counts(config: GPTConfig, B: int = 2, T: int = 16) -> dict:
    """{direction: (Triton kernels, ops PyTorch runs)} of one forward + backward."""
    torch.manual_seed(0)
    jm = ir.jit(GPT(config), executors=["triton"])
    idx, targets = gpt_batch(config, B, T)
    gpt_loss(jm(idx), targets).backward()
    kernels = triton_exec.last_kernels(jm)
    backward = [passes[-1] for passes in ir.last_backward_traces(jm).values()]
    return {"forward": (sum(k.direction == "forward" for k in kernels),
                        torch_ops([ir.last_traces(jm)[-1]])),
            "backward": (sum(k.direction == "backward" for k in kernels), torch_ops(backward))}


def main() -> None:
    config = GPTConfig()
    print(f"small GPT, {config.n_layer} layers: memory-bound kernels per training step")
    for direction, (triton, on_torch) in counts(config).items():
        print(f"  {direction:8s} {triton:3d} Triton + {len(on_torch):3d} PyTorch "
              f"({', '.join(sorted(set(on_torch))) or 'none'})")


if __name__ == "__main__":
    main()
