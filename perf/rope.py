"""RoPE forward, side by side: torch eager, torch.compile, ir.jit (Triton), ir.jit (Triton, no
vectorization analysis).

    python perf/rope.py          # on a GPU: the seed's size, llama-2-7b, llama-3-8B (bf16)
    python perf/rope.py --cpu    # tiny sizes through the Triton interpreter (a smoke test)

x is [B, n_head, T, head]; cos and sin are [T, rope width]; the first `rope width` elements of
the head are rotated, the rest pass through.
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


def main(argv=None):
    ns = _bench.parse(argv, __doc__)
    return _bench.run_cases("RoPE forward, bf16", cases, ns)


if __name__ == "__main__":
    main(sys.argv[1:])
