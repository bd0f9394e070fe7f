"""Pad, cat and slice microbenchmarks, side by side: torch eager, torch.compile, ir.jit (Triton),
ir.jit (Triton, no vectorization analysis).

    python perf/padcat.py          # on a GPU: several hundred MB per case
    python perf/padcat.py --cpu    # tiny sizes through the Triton interpreter (a smoke test)
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _bench  # noqa: E402


def pad_last(x):
    return F.pad(x, (4, 4))


def pad_middle(x):
    return F.pad(x, (0, 0, 4, 4))


def cat_last(a, b):
    return torch.cat((a, b), dim=-1)


def slice_aligned(x):
    return x[:, 4:-4] * 2


def slice_misaligned(x):
    return x[:, 4:-4] + x[:, 3:-5]


def cases(device):
    big = device == "cuda"
    rows = 65536 if big else 4
    g = torch.Generator().manual_seed(0)

    def randn(*shape, dtype=torch.bfloat16):
        return torch.randn(*shape, generator=g).to(dtype).to(device)

    x = randn(rows, 2040 if big else 40)
    yield "pad (4, 4) of the last dim, bf16", pad_last, (x,), _bench.tensor_bytes(x, pad_last(x))
    del x
    x = randn(16384 if big else 2, 1024 if big else 8, 2, dtype=torch.float32)
    yield ("pad (4, 4) of the middle dim of [.., .., 2], fp32", pad_middle, (x,),
           _bench.tensor_bytes(x, pad_middle(x)))
    del x
    a, b = randn(rows, 1000 if big else 20), randn(rows, 1048 if big else 28)
    yield ("cat of [R, 1000] and [R, 1048] on the last dim, bf16", cat_last, (a, b),
           _bench.tensor_bytes(a, b, cat_last(a, b)))
    del a, b
    x = randn(rows, 2048 if big else 48)
    out = slice_aligned(x)
    yield "x[:, 4:-4] * 2, bf16", slice_aligned, (x,), _bench.tensor_bytes(x, out)
    yield ("x[:, 4:-4] + x[:, 3:-5] (misaligned), bf16", slice_misaligned, (x,),
           _bench.tensor_bytes(x, out))


def main(argv=None):
    ns = _bench.parse(argv, __doc__)
    return _bench.run_cases("Pad, cat and slice", cases, ns)


if __name__ == "__main__":
    main(sys.argv[1:])
