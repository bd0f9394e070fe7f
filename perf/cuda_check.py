"""Correctness on CUDA tensors (compiled Triton, not the interpreter): the RoPE at several sizes,
pad/cat/slice programs, and random programs from tests/programs.py, each compared with eager.

    PYTHONPATH=$PWD python perf/cuda_check.py [--examples N]

Exits 1 if any case differs from eager (and prints which); run by perf/gpu_check.sh.
"""
from __future__ import annotations

import argparse
import sys
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "perf")]
if "--device" in sys.argv and sys.argv[sys.argv.index("--device") + 1:][:1] == ["cpu"]:
    import os
    os.environ["TRITON_INTERPRET"] = "1"      # before Triton is imported

import torch  # noqa: E402

import ir  # noqa: E402
import triton_exec  # noqa: E402,F401
from padcat import cat_last, pad_last, pad_middle, slice_aligned, slice_misaligned  # noqa: E402
from ir.examples import rope  # noqa: E402


def on_device(t: torch.Tensor, device) -> torch.Tensor:
    """`t` on `device` with the same strides and storage offset."""
    if not isinstance(t, torch.Tensor):
        return t
    storage = t.untyped_storage()
    flat = torch.empty(0, dtype=t.dtype).set_(storage, 0, (storage.nbytes() // t.element_size(),))
    return flat.to(device).as_strided(t.shape, t.stride(), t.storage_offset())


def fixed_cases(device):
    g = torch.Generator().manual_seed(0)

    def randn(*shape, dtype=torch.bfloat16):
        return torch.randn(*shape, generator=g).to(dtype).to(device)

    sizes = [(1, 2, 8, 32, 8), (2, 4, 64, 128, 128), (3, 5, 7, 64, 16)]
    if device == "cuda":
        sizes.append((256, 16, 1024, 32, 8))
    for b, h, t, d, n in sizes:
        for dtype in (torch.bfloat16, torch.float32):
            yield (f"rope {dtype} x[{b},{h},{t},{d}] n={n}", rope,
                   (randn(b, h, t, d, dtype=dtype), randn(t, n, dtype=dtype),
                    randn(t, n, dtype=dtype), n))
    yield "pad last (4,4)", pad_last, (randn(33, 40),)
    yield "pad last (4,4) fp32 odd", pad_last, (randn(5, 37, dtype=torch.float32),)
    yield "pad middle", pad_middle, (randn(64, 64, 2, dtype=torch.float32),)
    yield "cat", cat_last, (randn(17, 20), randn(17, 28))
    yield "cat odd widths", cat_last, (randn(9, 3), randn(9, 5))
    yield "slice aligned", slice_aligned, (randn(11, 48),)
    yield "slice misaligned", slice_misaligned, (randn(11, 36),)
    base = randn(8, 72)
    yield "non-contiguous, offset input", pad_last, (base[:, 3:67],)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--examples", type=int, default=60, help="random programs to run")
    parser.add_argument("--device", default="cuda",
                        help="cpu: a dry run of this script through the Triton interpreter")
    ns = parser.parse_args(argv)
    device = ns.device
    if device == "cpu":
        import os
        os.environ["TRITON_INTERPRET"] = "1"
    from programs import assert_close, assert_matches_eager, programs
    failures, count = [], 0
    for executor in ("triton", "triton_novec"):
        for name, fn, args in fixed_cases(device):
            count += 1
            try:
                out = ir.jit(fn, executors=[executor])(*args)
                assert_close(out, fn(*args), out.dtype if out.dtype.is_floating_point else None)
            except Exception:
                failures.append(f"{executor} / {name}\n{traceback.format_exc(limit=3)}")
    print(f"fixed cases: {count} run, {len(failures)} failed")

    from hypothesis import HealthCheck, given, settings
    random_failures = []

    @settings(max_examples=ns.examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(programs())
    def random_programs(program):
        program.inputs = [on_device(t, device) for t in program.inputs]
        try:
            assert_matches_eager(program, ir.jit(program.fn, executors=["triton"])(*program.inputs))
        except Exception:
            random_failures.append(f"{program.describe()}\n{traceback.format_exc(limit=3)}")

    random_programs()
    print(f"random programs: {ns.examples} run, {len(random_failures)} failed")
    for f in failures + random_failures[:5]:
        print("FAILED:", f)
    return 1 if failures or random_failures else 0


if __name__ == "__main__":
    sys.exit(main())
