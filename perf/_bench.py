"""Shared benchmark frame: one table per run comparing torch eager, torch.compile, ir.jit with the
Triton executor and ir.jit with the vectorization analysis off, each row checked against eager.

On a GPU: time is the median of `triton.testing.do_bench`; GB/s counts the ideal bytes (each input
read once, each output written once); the share is against a device-to-device copy measured in
the same run. On a CPU (`--cpu`): the Triton executor runs through the Triton interpreter, timed
with a perf_counter loop; those numbers say only that everything runs, nothing about speed.
"""
from __future__ import annotations

import dataclasses
import math
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

ROWS = ("eager", "torch.compile", "ir.jit triton", "ir.jit triton_novec")
CPU_REPS = 3


def select_device(cpu: bool) -> str:
    """'cuda' or 'cpu'; on the CPU path the Triton interpreter is switched on (before any kernel
    is defined)."""
    import torch
    if cpu or not torch.cuda.is_available():
        if os.environ.get("TRITON_INTERPRET") != "1" and "triton" in sys.modules:
            raise RuntimeError("Triton was imported before the interpreter could be switched "
                               "on: set TRITON_INTERPRET=1")
        os.environ["TRITON_INTERPRET"] = "1"
        return "cpu"
    return "cuda"


@dataclasses.dataclass
class Row:
    case: str
    label: str
    ms: float | None = None
    gbps: float | None = None
    share: float | None = None          # of the measured copy bandwidth (GPU only)
    ok: bool | None = None              # matches eager; None when the row did not run
    note: str = ""

    @property
    def skipped(self) -> bool:
        return self.ok is None


def time_ms(fn, device: str) -> float:
    """Median milliseconds per call."""
    if device == "cuda":
        from triton.testing import do_bench
        return float(do_bench(fn, warmup=25, rep=100, return_mode="median"))
    fn()
    samples = []
    for _ in range(CPU_REPS):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


def tensor_bytes(*tensors) -> int:
    return sum(math.prod(t.shape) * t.element_size() for t in tensors)


def check_close(actual, expected) -> str:
    """'' when close (bf16/fp16 results at their rounding tolerance), else the mismatch."""
    import torch
    tolerances = {torch.bfloat16: (2e-2, 4e-2), torch.float16: (1e-2, 1e-2),
                  torch.float32: (1e-5, 1e-5)}
    try:
        assert actual.shape == expected.shape, f"shape {tuple(actual.shape)} != {tuple(expected.shape)}"
        assert actual.dtype == expected.dtype, f"dtype {actual.dtype} != {expected.dtype}"
        rtol, atol = tolerances.get(expected.dtype, (0, 0))
        torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=True)
    except AssertionError as error:
        return " ".join(str(error).split())[:200]
    return ""


def compare(case: str, fn, args, ideal_bytes: int, device: str, copy_gbps: float | None,
            with_compile: bool) -> list[Row]:
    """The four rows of one case."""
    import torch

    import ir
    import triton_exec  # noqa: F401  (registers the executors)

    expected = fn(*args)
    candidates = [("eager", lambda: fn)]
    if with_compile:
        candidates.append(("torch.compile", lambda: torch.compile(fn, dynamic=False)))
    candidates += [("ir.jit triton", lambda: ir.jit(fn, executors=["triton"])),
                   ("ir.jit triton_novec", lambda: ir.jit(fn, executors=["triton_novec"]))]
    rows = []
    for label, make in candidates:
        row = Row(case, label)
        try:
            runner = make()
            out = runner(*args)          # compiles (and tunes, on a GPU)
            problem = check_close(out, expected)
            row.ok = not problem
            row.note = problem
            row.ms = time_ms(lambda: runner(*args), device)
            row.gbps = ideal_bytes / (row.ms * 1e-3) / 1e9
            if copy_gbps:
                row.share = row.gbps / copy_gbps
        except Exception as error:       # a row that cannot run says why; the table goes on
            row.ok = False
            row.note = " ".join(f"{type(error).__name__}: {error}".split())[:200]
        rows.append(row)
    if not with_compile:
        why = "skipped (--no-compile)" if device == "cuda" else "skipped on CPU (use --with-compile)"
        rows.insert(1, Row(case, "torch.compile", note=why))
    return rows


def copy_bandwidth(device: str) -> float | None:
    if device != "cuda":
        return None
    from triton_exec.reporting import copy_bandwidth_gbps
    return copy_bandwidth_gbps(device)


def print_table(title: str, rows: list[Row], device: str, copy_gbps: float | None) -> None:
    import torch
    if device == "cuda":
        where = f"{torch.cuda.get_device_name()}; copy bandwidth {copy_gbps:.0f} GB/s (read + write)"
    else:
        where = ("CPU: the Triton executors run through the Triton interpreter; "
                 "these times are NOT GPU timings")
    print(f"\n## {title}\n\n{where}\n")
    header = ["case", "executor", "time ms", "GB/s", "% of copy", "matches eager", "note"]
    lines = [header]
    for r in rows:
        lines.append([r.case, r.label,
                      f"{r.ms:.4f}" if r.ms is not None else "-",
                      f"{r.gbps:.1f}" if r.gbps is not None else "-",
                      f"{r.share:.0%}" if r.share is not None else "-",
                      "skipped" if r.skipped else ("yes" if r.ok else "NO"),
                      r.note])
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    for k, line in enumerate(lines):
        print("| " + " | ".join(c.ljust(w) for c, w in zip(line, widths)) + " |")
        if k == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    sys.stdout.flush()


def parse(argv, description: str):
    import argparse
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--cpu", action="store_true",
                        help="tiny sizes through the Triton interpreter (a smoke test)")
    parser.add_argument("--with-compile", action="store_true",
                        help="on CPU, also run torch.compile (always tried on a GPU)")
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    return parser.parse_args(argv)


def run_cases(title: str, cases, ns) -> list[Row]:
    """cases(device) -> [(name, fn, args, ideal_bytes)]; prints the table, returns its rows."""
    device = select_device(ns.cpu)
    with_compile = not ns.no_compile and (device == "cuda" or ns.with_compile)
    copy_gbps = copy_bandwidth(device)
    rows = []
    for name, fn, args, nbytes in cases(device):
        rows += compare(name, fn, args, nbytes, device, copy_gbps, with_compile)
        del fn, args
        if device == "cuda":
            import torch
            torch.cuda.empty_cache()
    print_table(title, rows, device, copy_gbps)
    return rows
