"""Autotuning of generated kernels: pick a launch config per kernel and shape bucket, persist it.

`choose_config` is what `TritonExecutor._fuse` calls instead of `launch.heuristic_config`:

1. the tuning key: kernel source hash + the dtypes of its tensors + the shape bucket (every size of
   the output domain rounded up to a power of two) + the device kind;
2. a winner persisted in the `TuningCache` for that key is used as is (no timing);
3. else, if tuning is on, every config of a small space (ROWS per program x num_warps x VEC;
   COLS is the heuristic's) is timed on the building call's own inputs and the min p50 wins and is
   persisted (an interpreter-timed winner only with ``TRITON_EXEC_AUTOTUNE=1``);
4. else the heuristic config, untimed.

Tuning is on for CUDA tensors (compiled Triton) unless ``TRITON_EXEC_AUTOTUNE=0``; on the
interpreter only when forced (``TRITON_EXEC_AUTOTUNE=1`` or the `forced()` context), and its
timings are interpreter timings, labelled so. The space: ROWS per program x num_warps, and VEC,
the vector width from 1 up to the analysis' maximum (the analysis proves the largest legal width
per access; a smaller VEC caps what Triton may assume, through `tl.max_contiguous`). Every config
keeps each thread holding a full vector along COLS (``ROWS * COLS >= 32 * num_warps * VEC``),
without which Triton could not use it.

Every tried config's result (p20/p50/p80 in ms, or the failure reason) stays on the outcome, which
the kernel record keeps for the report.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import math
import os
import statistics
import time
import warnings

import torch
import triton

from ir.proxies import hint
from triton_exec.codegen import KERNEL_OPTIONS
from triton_exec.launch import LaunchConfig, grid as launch_grid, heuristic_config
from triton_exec.report_format import ConfigResult
from triton_exec.tuning_cache import TuningCache, default_tuning_cache_path

ENV = "TRITON_EXEC_AUTOTUNE"                  # "0": never tune; "1": tune even on the interpreter
ENV_MAX_CONFIGS = "TRITON_EXEC_AUTOTUNE_MAX_CONFIGS"
GPU_MAX_CONFIGS = 12
INTERPRETER_MAX_CONFIGS = 3
INTERPRETER_REPS = 3
QUANTILES = [0.2, 0.5, 0.8]
log = logging.getLogger("triton_exec.autotune")


@dataclasses.dataclass
class Outcome:
    """How a kernel's launch config was chosen."""

    config: LaunchConfig
    key: str
    source: str                 # "heuristic", "cache" (persisted winner) or "tuned"
    results: list = dataclasses.field(default_factory=list)        # ConfigResult per tried config
    first_launch_s: dict = dataclasses.field(default_factory=dict)  # config label -> first call s
    interpreter: bool = False   # timings (if any) come from the Triton interpreter
    seconds: float = 0.0        # time spent timing
    note: str = ""              # why tuning did not run, when it did not

    @property
    def winner_first_launch_s(self) -> float:
        """The first launch of the chosen config (on a GPU: Triton's compile of it + one run)."""
        return self.first_launch_s.get(_label(_public(self.config)), 0.0)


# ---- settings ---------------------------------------------------------------------------------

@dataclasses.dataclass
class _Settings:
    force: bool = False         # tune on the interpreter too
    retime: bool = False        # time even when the cache has a winner (then overwrite it)
    max_configs: int | None = None


_settings: list[_Settings] = []


@contextlib.contextmanager
def forced(retime: bool = True, max_configs: int | None = None):
    """Within this block kernels are tuned (interpreter included); with `retime`, persisted winners
    are timed again, so that a report sees every config's result."""
    _settings.append(_Settings(True, retime, max_configs))
    try:
        yield
    finally:
        _settings.pop()


def _current() -> _Settings:
    return _settings[-1] if _settings else _Settings()


def tuning_enabled(device, interpreter: bool) -> bool:
    if _current().force:            # a report: every config is timed, whatever the environment
        return True
    env = os.environ.get(ENV, "").strip()
    if env in ("0", "1"):
        return env == "1"
    return torch.device(device).type == "cuda" and not interpreter


def _max_configs(interpreter: bool) -> int:
    if _current().max_configs:
        return _current().max_configs
    env = os.environ.get(ENV_MAX_CONFIGS, "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    return INTERPRETER_MAX_CONFIGS if interpreter else GPU_MAX_CONFIGS


_caches: dict[str, TuningCache] = {}


def tuning_cache() -> TuningCache:
    """The process's TuningCache for the current ``TRITON_EXEC_CACHE_DIR``."""
    path = default_tuning_cache_path()
    if str(path) not in _caches:
        _caches[str(path)] = TuningCache(path)
    return _caches[str(path)]


def reset_caches() -> None:
    """Forget the in-memory tuning caches (the next lookup rereads the file, as a new process)."""
    _caches.clear()


# ---- key and config space ---------------------------------------------------------------------

def is_interpreted(kernel) -> bool:
    from triton.runtime.interpreter import InterpretedFunction
    return isinstance(kernel, InterpretedFunction)


def device_kind(device, interpreter: bool) -> str:
    device = torch.device(device)
    if interpreter:
        return "interpreter"
    if device.type == "cuda":
        return torch.cuda.get_device_name(device).replace(" ", "_")
    return device.type


def tuning_key(source: str, example_args: dict, domain: tuple, device: str) -> str:
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    dtypes = ",".join(str(v.dtype).removeprefix("torch.") for v in example_args.values()
                      if isinstance(v, torch.Tensor))
    bucket = "x".join(str(triton.next_power_of_2(max(int(s), 1))) for s in domain)
    return f"{digest}|{dtypes}|{bucket}|{device}"


def config_space(heuristic: LaunchConfig, rows: int, vector: int, max_configs: int,
                 narrowest: int | None = None, loop_extent: int | None = None,
                 min_rows: int = 1) -> list[LaunchConfig]:
    """The heuristic first; then the same tile with each narrower VEC (1, 2, ... below the
    analysis' maximum `vector`), the A/B of the vectorization; for a kernel with a loop (over a
    dim of `loop_extent`), the heuristic with LOOP 2 and 8 (up to the extent); then ROWS x
    num_warps around the heuristic at the full VEC, nearest first (in tile size, then warps).
    COLS is kept; each thread holds >= VEC elements along COLS (ROWS*COLS >= 32*num_warps*VEC;
    for a kernel computed in column chunks, along its `narrowest` chunk) and at most 64 in all;
    ROWS >= `min_rows` (a transpose's 2-D tile: its widest load along the rows). At most
    `max_configs`."""
    cols = heuristic.cols
    narrowest = narrowest or cols
    max_rows = max(triton.next_power_of_2(max(rows, 1)), heuristic.rows)
    narrower = [dataclasses.replace(heuristic, vec=v)
                for v in (2 ** k for k in range(int(math.log2(vector)))) if v < heuristic.vec]
    loops = [] if heuristic.loop is None else [
        dataclasses.replace(heuristic, loop=b) for b in (2, 8)
        if b != heuristic.loop and b <= (loop_extent or 1)]
    candidates = {heuristic}
    r = 1
    while r <= max_rows:
        tile = r * cols
        if tile <= 16384 and (tile >= 256 or r == max_rows) and r >= min_rows:
            for warps in (1, 2, 4, 8):
                if r * narrowest >= 32 * warps * vector and tile <= 64 * 32 * warps:
                    candidates.add(LaunchConfig(r, cols, warps, vector, heuristic.loop))
        r *= 2

    def distance(c: LaunchConfig):
        return (abs(math.log2(c.rows * c.cols) - math.log2(heuristic.rows * heuristic.cols)),
                abs(math.log2(c.num_warps) - math.log2(heuristic.num_warps)), c.rows, c.num_warps)

    rest = sorted(candidates - {heuristic}, key=distance)
    return ([heuristic] + narrower + loops + rest)[:max(max_configs, 1)]


def _label(config: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in config.items())


def _public(config: LaunchConfig) -> dict:
    return {"ROWS": config.rows, "COLS": config.cols, "num_warps": config.num_warps,
            "VEC": config.vec, **({} if config.loop is None else {"LOOP": config.loop})}


def _from_public(stored: dict) -> LaunchConfig | None:
    try:
        config = LaunchConfig(int(stored["ROWS"]), int(stored["COLS"]), int(stored["num_warps"]),
                              int(stored["VEC"]),
                              int(stored["LOOP"]) if "LOOP" in stored else None)
    except (KeyError, TypeError, ValueError):
        return None
    powers = (config.rows, config.cols, config.num_warps, config.vec)
    if all(v > 0 and v & (v - 1) == 0 for v in powers) and (config.loop or 1) > 0:
        return config
    return None


# ---- timing -----------------------------------------------------------------------------------

def _run_args(lowered, example_args: dict, device):
    """Kernel arguments for timing: the building call's inputs, real outputs allocated like the
    (meta) example outputs. None (and why) when an input is not a real tensor."""
    args = []
    for p in lowered.params:
        value = example_args[p.name]
        if p.kind == "pointer":
            if p.output is not None:
                value = torch.empty(tuple(value.shape), dtype=value.dtype, device=device)
            elif not isinstance(value, torch.Tensor) or value.device.type == "meta":
                return None, f"input {p.tensor.name} is not available when the kernel is built"
        args.append(value)
    return args, ""


def _error_text(error: BaseException) -> str:
    text = " ".join(f"{type(error).__name__}: {error}".split())
    return text[:300] + ("..." if len(text) > 300 else "")


def _time(fn, interpreter: bool):
    """(p20, p50, p80) in ms: do_bench on a GPU; a perf_counter loop on the interpreter."""
    if interpreter:
        samples = []
        for _ in range(INTERPRETER_REPS):
            start = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - start) * 1e3)
        samples.sort()
        q = statistics.quantiles(samples, n=10, method="inclusive") if len(samples) > 1 \
            else samples * 9
        return q[1], statistics.median(samples), q[7]
    from triton.testing import do_bench
    return tuple(do_bench(fn, warmup=10, rep=40, quantiles=QUANTILES))


def benchmark(lowered, kernel, configs, example_args: dict, device,
              interpreter: bool) -> tuple[list[ConfigResult], dict]:
    """Times each config; (results, first-launch seconds per config label)."""
    args, why = _run_args(lowered, example_args, device)
    if args is None:
        return [ConfigResult(_public(c), error=why) for c in configs], {}
    results, first = [], {}
    for config in configs:
        grid = launch_grid(lowered, config, lambda leaf: hint(leaf.source))

        def run(config=config, grid=grid):
            kernel[grid](*args, **config.constexprs(), num_warps=config.num_warps,
                         **KERNEL_OPTIONS)

        public = _public(config)
        try:
            start = time.perf_counter()
            run()
            if not interpreter:
                torch.cuda.synchronize(device)
            first[_label(public)] = time.perf_counter() - start
            p20, p50, p80 = _time(run, interpreter)
            results.append(ConfigResult(public, p20, p50, p80))
        except Exception as error:      # a config that cannot run is a result, not a crash
            results.append(ConfigResult(public, error=_error_text(error)))
    return results, first


# ---- the entry point --------------------------------------------------------------------------

def choose_config(lowered, kernel, example_args: dict, domain: list[int], device,
                  timing: bool = True) -> Outcome:
    """The launch config of one kernel (see the module docstring).

    example_args: kernel parameter -> value in the building call (outputs as meta tensors);
    domain: the output domain's sizes in this call (the kernel tiles it as
    [prod(domain[:-1]), domain[-1]]); timing: False to run no kernel (a persisted winner or the
    heuristic)."""
    domain = [int(s) for s in domain]
    rows = math.prod(s for d, s in enumerate(domain[:-1])
                     if lowered.loop is None or d != lowered.loop.dim)
    heuristic = heuristic_config(lowered, rows, domain[-1])
    interpreter = is_interpreted(kernel)
    key = tuning_key(lowered.source, example_args, tuple(domain), device_kind(device, interpreter))
    settings = _current()
    cache = tuning_cache()
    if not settings.retime:
        stored = cache.get(key)
        if stored is not None:
            config = _from_public(stored)
            if config is not None:
                return Outcome(config, key, "cache", interpreter=interpreter)
            warnings.warn(f"tuning cache {cache.path}: entry {key} is not a launch config "
                          f"({stored!r}); tuning again", stacklevel=2)
    if not timing:
        return Outcome(heuristic, key, "heuristic", interpreter=interpreter,
                       note="not tuned: ir.explain runs no kernel")
    if not tuning_enabled(device, interpreter):
        return Outcome(heuristic, key, "heuristic", interpreter=interpreter,
                       note="tuning off (no CUDA device, or TRITON_EXEC_AUTOTUNE=0)")
    configs = config_space(heuristic, rows, lowered.max_width, _max_configs(interpreter),
                           min((c.width for c in lowered.chunks), default=None),
                           lowered.loop and lowered.loop.extent,
                           max((a.width for a in lowered.accesses if a.axis == "rows"), default=1))
    log.info("tuning %s over %d configs on %s (domain %s)", lowered.name, len(configs),
             device_kind(device, interpreter), domain)
    start = time.perf_counter()
    results, first = benchmark(lowered, kernel, configs, example_args, device, interpreter)
    seconds = time.perf_counter() - start
    ok = [(r.p50_ms, i) for i, r in enumerate(results) if not r.failed]
    if not ok:
        return Outcome(heuristic, key, "heuristic", results, first, interpreter, seconds,
                       note="every config failed")
    winner = configs[min(ok)[1]]
    log.info("tuned %s in %.1f s: %s, p50 %.4f ms (%d of %d configs ran)", lowered.name, seconds,
             _label(_public(winner)), min(ok)[0], len(ok), len(configs))
    if not interpreter or os.environ.get(ENV, "").strip() == "1":
        # interpreter timings say nothing about speed: their winners are kept only when asked
        cache.put(key, {**_public(winner), "p50_ms": min(ok)[0],
                        "timed_on": "interpreter" if interpreter else device_kind(device, False)})
    return Outcome(winner, key, "tuned", results, first, interpreter, seconds)
