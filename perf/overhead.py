"""Host overhead per call: eager PyTorch vs `ir.jit` on the seed's RoPE with tiny inputs.

With tiny inputs the kernels cost almost nothing, so the time per call is the framework's own:
the jit's key, prologue and generated Python on top of the same torch calls. Every row runs in
this one process, interleaved, and reports the median over several repeats of many calls.

    python perf/overhead.py            # full run
    python perf/overhead.py --quick    # a few iterations, for a smoke test

To add a row (another executor, a thin path), add a (label, callable) pair in `rows()`; each
callable takes the RoPE's arguments (x, cos, sin, n). The first row is the baseline of the ratio.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import ir  # noqa: E402


def rope(x, cos, sin, n: int):
    xr = x[..., :n]
    x1, x2 = xr[..., : n // 2], xr[..., n // 2 :]
    roped = xr * cos + torch.cat((-x2, x1), dim=-1) * sin
    return torch.cat((roped.to(x.dtype), x[..., n:]), dim=-1)


def tiny_inputs():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 2, 4, 32, generator=g)
    cos, sin = torch.randn(4, 8, generator=g), torch.randn(4, 8, generator=g)
    return (x, cos, sin, 8)


def rows(args) -> list[tuple[str, object]]:
    """The (label, callable) pairs to time; the first is the baseline."""
    constant = ir.jit(rope, executors=["torch"], cache="constant values")
    symbolic = ir.jit(rope, executors=["torch"], cache="symbolic values")
    return [
        ("eager", rope),
        ("ir.jit torch, constant values", constant),
        ("ir.jit torch, symbolic values", symbolic),
        ("ir.thin torch, symbolic values (no prologue)", ir.thin(symbolic, *args)),
    ]


def time_per_call_us(fn, args, calls: int) -> float:
    start = time.perf_counter_ns()
    for _ in range(calls):
        fn(*args)
    return (time.perf_counter_ns() - start) / calls / 1e3


def measure(rows_, args, calls: int, repeats: int) -> list[dict]:
    expected = rows_[0][1](*args)
    for label, fn in rows_:    # warm up (the jit compiles here) and check the answer
        torch.testing.assert_close(fn(*args), expected, msg=lambda m: f"{label}: {m}")
        time_per_call_us(fn, args, max(1, calls // 10))
    samples: dict[str, list[float]] = {label: [] for label, _ in rows_}
    for _ in range(repeats):   # interleaved, so drift affects every row alike
        for label, fn in rows_:
            samples[label].append(time_per_call_us(fn, args, calls))
    base = statistics.median(samples[rows_[0][0]])
    return [{"label": label, "us_per_call": statistics.median(s),
             "ratio": statistics.median(s) / base, "samples_us": s}
            for label, s in samples.items()]


def format_table(results: list[dict], calls: int, repeats: int) -> str:
    width = max(len(r["label"]) for r in results)
    lines = [f"RoPE x[1, 2, 4, 32] f32, cos/sin [4, 8], n=8; torch {torch.__version__}; "
             f"median of {repeats} repeats x {calls} calls",
             f"{'row':<{width}}  {'us/call':>9}  {'vs eager':>8}",
             f"{'-' * width}  {'-' * 9}  {'-' * 8}"]
    for r in results:
        lines.append(f"{r['label']:<{width}}  {r['us_per_call']:>9.1f}  {r['ratio']:>7.2f}x")
    return "\n".join(lines)


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few iterations (smoke test)")
    parser.add_argument("--calls", type=int, default=None, help="calls per repeat")
    parser.add_argument("--repeats", type=int, default=None)
    opts = parser.parse_args(argv)
    calls = opts.calls or (50 if opts.quick else 2000)
    repeats = opts.repeats or (3 if opts.quick else 9)
    args = tiny_inputs()
    results = measure(rows(args), args, calls, repeats)
    print(format_table(results, calls, repeats))
    return results


if __name__ == "__main__":
    main()
