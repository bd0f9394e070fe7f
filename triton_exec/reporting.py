"""Autotune reports of a jitted function's kernels: `triton_exec.report(jfn, *args, out_dir=...)`.

The function is jitted afresh (same function, executors and cache mode) and called on `args` with
tuning forced, so every config of every kernel is timed even when a winner is persisted (the new
winners are persisted, except interpreter-timed ones). Then, per kernel, a
`report_format.KernelReport`: the tuning key, every config's result, the ideal bytes moved, the
access widths read from the PTX compiled offline for sm_90 (or the compiler's error), each
config's static cost from that compile (instructions per program, bytes per warp-instruction,
registers: `triton_exec.cost`), compile time, cache hits, the analysis' vector widths. On a GPU the
device-to-device copy bandwidth is measured too; on a CPU the report says that its timings come
from the Triton interpreter.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

import ir
from ir.jit import JitFunction
from triton_exec import autotune, cost
from triton_exec.executor import last_kernels
from triton_exec.report_format import ConfigResult, KernelReport, write_report


def ideal_bytes(record) -> int:
    """Bytes an ideal kernel moves: each tensor input read once, each output written once."""
    return sum(cost.ideal_bytes(record))


def access_widths_or_error(record, arch: int = 90) -> dict:
    try:
        return record.access_widths(arch)
    except Exception as error:      # the offline compiler's refusal is a result too
        text = " ".join(f"{type(error).__name__}: {error}".split())
        return {"ld": {}, "st": {}, "error": text[:500]}


def static_costs(record, configs) -> dict:
    """Per config label, the kernel's static cost under that config (see `triton_exec.cost`),
    or the offline compiler's refusal."""
    costs = {}
    for result in configs:
        config = autotune._from_public(result.config)
        if config is None:
            continue
        try:
            costs[result.label] = cost.record_cost(record, 90, config).as_dict()
        except Exception as error:      # the offline compiler's refusal is a result too
            costs[result.label] = {"error": f"{type(error).__name__}: {error}"[:500]}
    return costs


def kernel_report(record, cache_hits: int) -> KernelReport:
    """Its access widths are the PTX of the config a plain call runs: on the interpreter, which
    times nothing that counts, the heuristic's (the first tried); on a GPU, the winner's."""
    tuning = record.tuning
    shown = record
    if tuning is not None and tuning.interpreter and tuning.results:
        heuristic = autotune._from_public(tuning.results[0].config)
        if heuristic is not None:
            shown = dataclasses.replace(record, config=heuristic)
    if tuning is not None and tuning.results:
        configs = list(tuning.results)
    else:
        why = tuning.note if tuning is not None else "no tuning information"
        configs = [ConfigResult(dict(record.config.as_dict()), error=f"not timed: {why}")]
    compile_s = record.compile_s + (tuning.winner_first_launch_s if tuning else 0.0)
    return KernelReport(
        name=record.name,
        key=tuning.key if tuning is not None else "",
        configs=configs,
        bytes_moved=ideal_bytes(record),
        access_widths=access_widths_or_error(shown),
        compile_s=compile_s,
        cache_hits=cache_hits,
        vector_widths=dict(record.analysis_width),
        static_costs=static_costs(record, configs),
    )


def copy_bandwidth_gbps(device, nbytes: int = 1 << 30) -> float | None:
    """A device-to-device copy of `nbytes` with do_bench, counted read + write; None off CUDA."""
    device = torch.device(device)
    if device.type != "cuda":
        return None
    from triton.testing import do_bench
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    ms = do_bench(lambda: dst.copy_(src), quantiles=[0.5, 0.5])[0]
    del src, dst
    torch.cuda.empty_cache()
    return 2 * nbytes / (ms * 1e-3) / 1e9


def _device_of(args):
    for a in args:
        if isinstance(a, torch.Tensor):
            return a.device
        if isinstance(a, (list, tuple)):
            found = _device_of(a)
            if found is not None:
                return found
    return torch.device("cpu")


def report(jfn, *args, out_dir, max_configs: int | None = None) -> dict[str, Path]:
    """Tune and report the kernels of `jfn` (an `ir.jit` function, or a plain function, which gets
    the Triton executor) on `args`; writes report.json, report.md and report.png into `out_dir`
    and returns their paths."""
    if isinstance(jfn, JitFunction):
        fresh = ir.jit(jfn.fn, executors=list(jfn.executors), cache=jfn.cache_mode)
    else:
        fresh = ir.jit(jfn, executors=["triton"])
    with autotune.forced(retime=True, max_configs=max_configs):
        fresh(*args)
    fresh(*args)                        # the entry is reused: one cache hit
    records = last_kernels(fresh)
    device = _device_of(args)
    interpreter = device.type != "cuda" or any(
        r.tuning is not None and r.tuning.interpreter for r in records)
    hits = ir.cache_stats(fresh).hits
    kernels = [kernel_report(r, hits) for r in records]
    if interpreter:
        copy_gbps, name = None, f"{device.type} (Triton interpreter)"
    else:
        copy_gbps, name = copy_bandwidth_gbps(device), torch.cuda.get_device_name(device)
    paths = write_report(kernels, Path(out_dir), device=name, copy_gbps=copy_gbps,
                         interpreter=interpreter)
    with open(paths["md"], "a", encoding="utf-8") as md:
        md.write("\n" + VECTOR_WIDTH_NOTE + "\n")
    return paths


VECTOR_WIDTH_NOTE = (
    "Configs vary ROWS per program, num_warps and VEC; COLS is the heuristic's. VEC caps the "
    "access width below the largest the analysis proves (its maximum is the heuristic's VEC), so "
    "the narrower VECs are the vectorization's A/B. Every config keeps each thread holding a full "
    "vector along COLS (ROWS * COLS >= 32 * num_warps * VEC). The access widths from PTX are the "
    "winner's on a GPU, the heuristic's under the interpreter.")
