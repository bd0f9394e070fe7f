"""The small LitGPT-style GPT of `ir.examples` (ir.jit(model)): one training step (forward, cross
entropy, backward to every parameter's gradient; no optimizer), side by side: torch eager,
torch.compile, ir.jit with the Triton executor. Each row's loss and gradients are checked against
eager (bf16: relative error of each gradient below 2e-2; fp32: 1e-4).

    python perf/gpt.py           # on a GPU: bf16, 2 layers, n_embd 1024, 16 heads, B 8, T 1024
    python perf/gpt.py --cpu     # 1 layer, tiny, fp32, through the Triton interpreter (a smoke test)

Rows print as they finish (a row that fails says why and the next one runs), then the table.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _bench  # noqa: E402

LABELS = ("eager", "ir.jit triton", "torch.compile")


def setup(device: str):
    """(config, dtype, B, T) of the benchmark on `device`."""
    import torch
    from ir.examples import GPTConfig
    if device == "cuda":
        config = GPTConfig(vocab_size=8192, block_size=1024, n_layer=2, n_head=16, n_embd=1024,
                           intermediate_size=2816, rotary_percentage=0.25)
        return config, torch.bfloat16, 8, 1024
    return GPTConfig(n_layer=1), torch.float32, 2, 16


def training_step(call, parameters):
    """step(idx, targets) -> (loss, gradients of `parameters`) through `call`."""
    import torch
    from ir.examples import gpt_loss

    def step(idx, targets):
        loss = gpt_loss(call(idx), targets)
        return loss, torch.autograd.grad(loss, parameters)
    return step


def mismatch(result, expected, dtype) -> str:
    """'' when the loss and every gradient match eager's at the dtype's tolerance."""
    import torch
    loss, grads = result
    problem = _bench.check_close(loss, expected[0])
    if problem:
        return "loss: " + problem
    bound = 2e-2 if dtype == torch.bfloat16 else 1e-4
    for k, (g, e) in enumerate(zip(grads, expected[1])):
        error = ((g.float() - e.float()).norm() / e.float().norm().clamp_min(1e-30)).item()
        if not error < bound:       # NaN fails
            return f"gradient {k}: relative error {error:.2e} >= {bound}"
    return ""


def main(argv=None):
    ns = _bench.parse(argv, __doc__)
    device = _bench.select_device(ns.cpu)
    import torch

    import ir
    import triton_exec  # noqa: F401  (registers the executors)
    from ir.examples import GPT, gpt_batch

    with_compile = not ns.no_compile and (device == "cuda" or ns.with_compile)
    config, dtype, B, T = setup(device)
    torch.manual_seed(0)
    model = GPT(config).to(device=device, dtype=dtype)
    parameters = list(model.parameters())
    idx, targets = gpt_batch(config, B, T, device=device)
    expected = training_step(model, parameters)(idx, targets)
    case = (f"GPT forward + backward, {str(dtype).removeprefix('torch.')}, {config.n_layer} "
            f"layers, n_embd {config.n_embd}, B {B}, T {T}")
    makers = {"eager": lambda: model, "ir.jit triton": lambda: ir.jit(model, executors=["triton"]),
              "torch.compile": lambda: torch.compile(model, dynamic=False)}
    rows = []
    for label in LABELS:
        row = _bench.Row(case, label)
        if label == "torch.compile" and not with_compile:
            row.note = ("skipped (--no-compile)" if device == "cuda"
                        else "skipped on CPU (use --with-compile)")
        else:
            try:
                step = training_step(makers[label](), parameters)
                problem = mismatch(step(idx, targets), expected, dtype)   # compiles (and tunes)
                row.ok, row.note = not problem, problem
                row.ms = _bench.time_ms(lambda: step(idx, targets), device)
                row.note = row.note or f"{B * T / row.ms * 1e3:,.0f} tokens/s"
            except Exception as error:   # a row that cannot run says why; the table goes on
                row.ok = False
                row.note = " ".join(f"{type(error).__name__}: {error}".split())[:200]
        rows.append(row)
        print(f"{label}: {row.ms if row.ms is None else round(row.ms, 4)} ms, matches eager: "
              f"{row.ok}, {row.note}", flush=True)
    _bench.print_table("GPT training step (forward + backward)", rows, device, None)
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
