"""Host overhead per call: eager PyTorch vs `ir.jit` on the seed's RoPE with tiny inputs.

With tiny inputs the kernels cost almost nothing, so the time per call is the framework's own:
the jit's key, prologue and generated Python on top of the same torch calls. Every row runs in
this one process, interleaved, and reports the median over several repeats of many calls.

    python perf/overhead.py            # full run
    python perf/overhead.py --quick    # a few iterations, for a smoke test
    python perf/overhead.py --torch-compile    # also torch.compile: Dynamo, inductor, ours

To add a row, add a (label, callable, checked) triple in `rows()`; each callable takes the
RoPE's arguments (x, cos, sin, n); `checked` rows must match eager. The first row is the baseline.

Without a GPU the Triton rows run on CPU tensors with every kernel launch replaced by a no-op
(the benchmark-only switch `triton_exec.launch.noop_launches()`), so they show the
framework's own cost per call: key, prologue, the generated computation and launcher (output
allocation, grid, argument packing, the direct launch's specialization key and call), without
the launch itself. On a GPU they launch for real, and one more row launches through Triton's own
`kernel[grid](...)` path (TRITON_EXEC_LAUNCH=plain) to measure the lean launch against it.
With --seed-size on a GPU it also reports host time per call against kernel time at the seed's size.
"""
from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
import types
from pathlib import Path

import os

import torch

CUDA = torch.cuda.is_available()
if not CUDA:     # the Triton executor claims CPU tensors only under the interpreter
    os.environ.setdefault("TRITON_INTERPRET", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import ir  # noqa: E402
from ir.examples import rope, rope_inputs  # noqa: E402
import triton_exec  # noqa: E402,F401  (registers the "triton" executor)
from triton_exec.launch import noop_launches  # noqa: E402


def tiny_inputs(shape=(1, 2, 4, 32), n=8, dtype=torch.float32):
    return rope_inputs(*shape, n=n, dtype=dtype, device="cuda" if CUDA else "cpu")


def rows(args) -> list[tuple[str, object, bool]]:
    """The (label, callable, checked) triples to time; the first is the baseline."""
    constant = ir.jit(rope, executors=["torch"], cache="constant values")
    symbolic = ir.jit(rope, executors=["torch"], cache="symbolic values")
    launches = "" if CUDA else " (launches no-op'd)"
    plain_rows = []
    if CUDA:    # the lean launch against Triton's own launch path, the entry otherwise the same
        os.environ["TRITON_EXEC_LAUNCH"] = "plain"
        try:
            plain = ir.jit(rope, executors=["triton"], cache="constant values")
            plain(*args)
        finally:
            del os.environ["TRITON_EXEC_LAUNCH"]
        plain_rows = [("ir.jit triton, constant values, TRITON_EXEC_LAUNCH=plain", plain, True)]
    triton_constant = ir.jit(rope, executors=["triton"], cache="constant values")
    triton_symbolic = ir.jit(rope, executors=["triton"], cache="symbolic values")
    if not CUDA:    # build their cache entries now, with launches no-op'd
        with noop_launches():
            triton_constant(*args), triton_symbolic(*args)
    return [
        ("eager", rope, True),
        ("ir.jit torch, constant values", constant, True),
        ("ir.jit torch, symbolic values", symbolic, True),
        ("ir.thin torch, symbolic values (no prologue)", ir.thin(symbolic, *args), True),
        (f"ir.jit triton, constant values{launches}", triton_constant, CUDA),
        (f"ir.jit triton, symbolic values{launches}", triton_symbolic, CUDA),
        (f"ir.thin triton, symbolic values{launches}", ir.thin(triton_symbolic, *args), CUDA),
    ] + plain_rows


def own_code(fn):
    """fn with a code object of its own: Dynamo keeps its compiled entries per code object, so
    each row's lookup sees its own entry only."""
    return types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__,
                              fn.__defaults__, fn.__closure__)


def torch_compile_rows(args) -> list[tuple[str, object, bool]]:
    """torch.compile's rows: Dynamo's guards and graph call with the "eager" backend (the floor
    of every backend), inductor, and ours (`backend="triton_exec"`), static and dynamic."""
    launches = "" if CUDA else " (launches no-op'd)"
    backends = [ir.dynamo.Backend(), ir.dynamo.Backend()]
    ours_rows = [torch.compile(own_code(rope), backend=backends[0]),
                 torch.compile(own_code(rope), backend=backends[1], dynamic=True)]
    with noop_launches() if not CUDA else contextlib.nullcontext():   # compile them now
        for compiled in ours_rows:
            compiled(*args)
    # the graphs Dynamo captured, called as Dynamo calls them (thin check), and the static one
    # through ir.jit's whole lookup (key and prologue). The static graph's inputs are x, cos,
    # sin (n is a constant of it); the dynamic one's also n and the size symbols
    (graph,), (dynamic_graph,) = backends[0].graphs, backends[1].graphs
    dynamic_inputs = dynamic_graph_inputs(dynamic_graph)
    return [
        (f"triton_exec graph as Dynamo calls it, thin check{launches}",
         lambda x, cos, sin, n: graph(x, cos, sin), CUDA),
        (f"the same graph through ir.jit's lookup{launches}",
         lambda x, cos, sin, n: graph.jitted(x, cos, sin), CUDA),
        (f"triton_exec dynamic graph as Dynamo calls it, thin check{launches}",
         lambda x, cos, sin, n: dynamic_graph(*dynamic_inputs(x, cos, sin, n)), CUDA),
        ("torch.compile eager backend (Dynamo only)",
         torch.compile(own_code(rope), backend="eager"), True),
        ("torch.compile eager backend (Dynamo only), dynamic=True",
         torch.compile(own_code(rope), backend="eager", dynamic=True), True),
        ("torch.compile inductor", torch.compile(own_code(rope), backend="inductor"), True),
        ("torch.compile inductor, dynamic=True",
         torch.compile(own_code(rope), backend="inductor", dynamic=True), True),
        (f"torch.compile triton_exec{launches}", ours_rows[0], CUDA),
        (f"torch.compile triton_exec, dynamic=True{launches}", ours_rows[1], CUDA),
    ]


def dynamic_graph_inputs(graph):
    """RoPE's arguments (x, cos, sin, n) -> the dynamic graph's inputs in its order: the tensors
    and n by name, each size symbol read from a tensor size it stands for (as Dynamo does)."""
    rope_args = ["l_x_", "l_cos_", "l_sin_", "l_n_"]
    where = {}
    for i, name in enumerate(rope_args[:3]):
        for d, size in enumerate(graph.example_values[name].shape):
            where.setdefault(str(size), (i, d))
    picks = [(rope_args.index(name), None) if name in rope_args else where[name]
             for name in graph.example_values]
    return lambda *a: [a[i] if d is None else a[i].shape[d] for i, d in picks]


def time_per_call_us(fn, args, calls: int) -> float:
    start = time.perf_counter_ns()
    for _ in range(calls):
        fn(*args)
    return (time.perf_counter_ns() - start) / calls / 1e3


def measure(rows_, args, calls: int, repeats: int) -> list[dict]:
    expected = rows_[0][1](*args)
    for label, fn, checked in rows_:    # warm up (the jit compiles here), check the answer
        out = fn(*args)
        if checked:
            torch.testing.assert_close(out, expected, rtol=1e-2, atol=1e-2,
                                       msg=lambda m: f"{label}: {m}")
        time_per_call_us(fn, args, max(1, calls // 10))
    samples: dict[str, list[float]] = {label: [] for label, _, _ in rows_}
    for _ in range(repeats):   # interleaved, so drift affects every row alike
        for label, fn, _ in rows_:
            samples[label].append(time_per_call_us(fn, args, calls))
    base, base_min = statistics.median(samples[rows_[0][0]]), min(samples[rows_[0][0]])
    return [{"label": label, "us_per_call": statistics.median(s), "min_us": min(s),
             "ratio": statistics.median(s) / base, "min_ratio": min(s) / base_min,
             "samples_us": s}
            for label, s in samples.items()]


def format_table(results: list[dict], calls: int, repeats: int) -> str:
    width = max(len(r["label"]) for r in results)
    lines = [f"RoPE x[1, 2, 4, 32] f32, cos/sin [4, 8], n=8; torch {torch.__version__}; "
             f"{repeats} interleaved repeats x {calls} calls: their median and their minimum "
             "(the least disturbed)",
             f"{'row':<{width}}  {'us/call':>9}  {'vs eager':>8}  {'min us':>8}  {'vs eager':>8}",
             f"{'-' * width}  {'-' * 9}  {'-' * 8}  {'-' * 8}  {'-' * 8}"]
    for r in results:
        lines.append(f"{r['label']:<{width}}  {r['us_per_call']:>9.1f}  {r['ratio']:>7.2f}x"
                     f"  {r['min_us']:>8.1f}  {r['min_ratio']:>7.2f}x")
    return "\n".join(lines)


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few iterations (smoke test)")
    parser.add_argument("--calls", type=int, default=None, help="calls per repeat")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--torch-compile", action="store_true",
                        help="also torch.compile rows: Dynamo alone, inductor, ours")
    parser.add_argument("--seed-size", action="store_true",
                        help="on a GPU, also host time vs kernel time at the seed's size")
    opts = parser.parse_args(argv)
    calls = opts.calls or (50 if opts.quick else 2000)
    repeats = opts.repeats or (3 if opts.quick else 9)
    args = tiny_inputs()
    results = measure(rows(args) + (torch_compile_rows(args) if opts.torch_compile else []),
                      args, calls, repeats)
    print(format_table(results, calls, repeats))
    if opts.seed_size and CUDA:
        print(host_vs_kernel())
    return results


def host_vs_kernel() -> str:
    """At the seed's size (bsz 256, 16 heads, seq 1024, head 32, rope 8, bf16): the host time of
    one call (until it returns, kernels still running) against the kernel time."""
    import triton
    args = tiny_inputs((256, 16, 1024, 32), 8, torch.bfloat16)
    lines = ["", "Seed size, bf16: host time per call vs device time per call (GPU)"]
    for label, mode in (("constant values", "constant values"), ("symbolic", "symbolic values")):
        jfn = ir.jit(rope, executors=["triton"], cache=mode)
        jfn(*args)
        torch.cuda.synchronize()
        host = []
        for _ in range(20):
            start = time.perf_counter_ns()
            jfn(*args)
            host.append((time.perf_counter_ns() - start) / 1e3)
            torch.cuda.synchronize()
        device_ms = triton.testing.do_bench(lambda: jfn(*args))
        lines.append(f"ir.jit triton, {label}: host {statistics.median(host):.1f} us, "
                     f"device {device_ms * 1e3:.1f} us per call")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
