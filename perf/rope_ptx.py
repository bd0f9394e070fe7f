"""Static PTX instruction count of the seed RoPE kernel, compiled offline for sm_90 (no GPU
needed): the fp32 "constant values" kernel and the bf16 "symbolic values" kernel, with their
global load/store widths. An instruction is a PTX line that is not a directive, a label, a brace
or a comment.

    python perf/rope_ptx.py
"""
import os
import sys
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import torch  # noqa: E402

import ir  # noqa: E402
import triton_exec  # noqa: E402
from ir.examples import rope, rope_inputs  # noqa: E402
from triton_exec.cost import ptx_instructions  # noqa: E402


if __name__ == "__main__":
    for dtype, mode in ((torch.float32, "constant values"), (torch.bfloat16, "symbolic values")):
        jfn = ir.jit(rope, executors=["triton"], cache=mode)
        jfn(*rope_inputs(hs=32, n=8, dtype=dtype))
        (record,) = triton_exec.last_kernels(jfn)
        print(f"{str(dtype).removeprefix('torch.')}, {mode}: {ptx_instructions(record.ptx())} PTX "
              f"instructions; access widths {record.access_widths()}")
