"""Memory-bound kernels per training step of the small GPT of `ir.examples` under
`ir.jit(model, executors=["triton"])`: the Triton kernels of the forward and of the backward,
and the ops PyTorch still runs in the traces that launch a memory-bound kernel of their own
(leaving out views, matmuls, attention and the embedding), and in the backward the kernels
autograd's engine launches between our backward traces: one `add` per gradient it accumulates
(a value read by several calls), and the backward of each op left to eager autograd that is
neither compute nor a view (read from the graph of the logits, so the loss is not counted).

    python perf/kernel_counts.py             # 2 layers, B 2, T 16, through the interpreter on a CPU
    IR_WHOLE_BACKWARD=0 python perf/kernel_counts.py     # with a backward per fusion group
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


# autograd nodes whose backward is compute, a view, or one of our backward traces (counted there)
FREE_NODES = ("Mm", "Bmm", "Addmm", "Linear", "Matmul", "ScaledDotProduct", "Attention",
              "Embedding", "View", "Reshape", "Permute", "Transpose", "Expand", "Slice", "Select",
              "Split", "Unbind", "Squeeze", "Unsqueeze", "Alias", "TBackward", "AccumulateGrad",
              "_UnitFunction", "_WholeFunction")


def engine_ops(output) -> list:
    """The memory-bound kernels autograd's engine launches in the backward of `output`'s graph:
    `add` per gradient accumulated (a (node, input) reached by n edges sums n gradients), and
    the node of each op left to eager autograd that is neither compute nor a view."""
    edges, ops, seen, stack = {}, [], set(), [output.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        name = type(node).__name__
        if not any(free in name for free in FREE_NODES):
            ops.append(name)
        for child, input_nr in node.next_functions:
            if child is not None:
                edges[(child, input_nr)] = edges.get((child, input_nr), 0) + 1
                stack.append(child)
    return ops + ["add"] * sum(n - 1 for n in edges.values())


def counts(config: GPTConfig, B: int = 2, T: int = 16) -> dict:
    """{direction: (Triton kernels, ops PyTorch runs)} of one forward + backward."""
    torch.manual_seed(0)
    jm = ir.jit(GPT(config), executors=["triton"])
    idx, targets = gpt_batch(config, B, T)
    logits = jm(idx)
    engine = engine_ops(logits)
    gpt_loss(logits, targets).backward()
    kernels = triton_exec.last_kernels(jm)
    backward = [passes[-1] for passes in ir.last_backward_traces(jm).values()]
    return {"forward": (sum(k.direction == "forward" for k in kernels),
                        torch_ops([ir.last_traces(jm)[-1]])),
            "backward": (sum(k.direction == "backward" for k in kernels),
                         torch_ops(backward) + engine)}


def main() -> None:
    config = GPTConfig()
    print(f"small GPT, {config.n_layer} layers: memory-bound kernels per training step")
    for direction, (triton, on_torch) in counts(config).items():
        print(f"  {direction:8s} {triton:3d} Triton + {len(on_torch):3d} PyTorch "
              f"({', '.join(sorted(set(on_torch))) or 'none'})")


if __name__ == "__main__":
    main()
