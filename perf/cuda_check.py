"""Correctness on CUDA tensors (compiled Triton, not the interpreter): the RoPE at several sizes,
pad/cat/slice programs, random programs from tests/programs.py, each compared with eager, and
random fp16/bf16/fp32 arithmetic chains (tests/test_semantics_rounding.py) bit for bit.

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
from ir.examples import rope, rope_inputs  # noqa: E402


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


def repeated_call_cases(device):
    """(name, fn, cache mode, argument tuples) for one cache entry called again and again: after
    its first launch per specialization the launcher calls the compiled kernel directly, so these
    vary what Triton specializes on under the same entry's guards: the alignment of an input whose
    alignment the prologue does not check, and (symbolic mode) sizes that are 1, divisible by 16
    or neither."""
    g = torch.Generator().manual_seed(1)
    base = torch.randn(4096, generator=g).to(device)
    yield ("x[4:-4] + x[3:-5], offsets 0..7", lambda x: x[4:-4] + x[3:-5], "constant values",
           [(base[k:k + 1000],) for k in (0, 1, 4, 0, 3, 8, 0)])
    yield ("pad (4,4) symbolic, widths 16/17/32/1", pad_last, "symbolic values",
           [(torch.randn(r, w, generator=g).to(device),)
            for r, w in ((8, 16), (8, 17), (3, 32), (8, 16), (5, 1), (1, 16))])
    yield ("rope symbolic, T 16/1/48/17", rope, "symbolic values",
           [tuple(a.to(device) if isinstance(a, torch.Tensor) else a
                  for a in rope_inputs(2, 4, t, 32, 8, dtype=torch.bfloat16))
            for t in (16, 1, 48, 17, 16)])


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

    repeated, count = [], 0
    for name, fn, mode, calls in repeated_call_cases(device):
        count += len(calls)
        jfn = ir.jit(fn, executors=["triton"], cache=mode)
        for args in calls:
            try:
                for _ in range(2):
                    out = jfn(*args)
                    assert_close(out, fn(*args), out.dtype)
            except Exception:
                repeated.append(f"{name}, args {[getattr(a, 'shape', a) for a in args]}\n"
                                f"{traceback.format_exc(limit=3)}")
    print(f"repeated calls (direct launches): {count} calls, {len(repeated)} failed")
    failures += repeated

    from hypothesis import HealthCheck, given, settings
    random_failures = []

    @settings(max_examples=ns.examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(programs())
    def random_programs(program):
        program.inputs = [on_device(t, device) for t in program.inputs]
        try:
            jfn = ir.jit(program.fn, executors=["triton"])
            for _ in range(2):      # the second call launches directly
                assert_matches_eager(program, jfn(*program.inputs))
        except Exception:
            random_failures.append(f"{program.describe()}\n{traceback.format_exc(limit=3)}")

    random_programs()
    print(f"random programs: {ns.examples} run, {len(random_failures)} failed")

    # fp16/bf16/fp32 chains with numbers, bit for bit against CUDA eager: the device's own rules
    # for number operands (README "Numerical contract") are read from PyTorch's CUDA source
    from semantics import assert_bits_equal
    from test_semantics_rounding import chain
    rounding_failures = []

    @settings(max_examples=ns.examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(chain())
    def rounding_chains(case):
        program, inputs, description = case
        inputs = [on_device(t, device) for t in inputs]
        try:
            assert_bits_equal(ir.jit(program, executors=["triton"])(*inputs), program(*inputs))
        except Exception:
            rounding_failures.append(f"{description}\n{traceback.format_exc(limit=3)}")

    rounding_chains()
    print(f"fp16/bf16/fp32 chains bit-exact with eager: {ns.examples} run, "
          f"{len(rounding_failures)} failed")
    for f in failures + random_failures[:5] + rounding_failures[:5]:
        print("FAILED:", f)
    return 1 if failures or random_failures or rounding_failures else 0


if __name__ == "__main__":
    sys.exit(main())
