"""Whole models through three front ends: eager, `torch.compile` (inductor) and `torch.compile`
with our backend (`ir.dynamo.Backend()`), side by side: time per step (forward; forward +
backward), kernels launched per step (GPU: the profiler's CUDA kernels), Triton kernels per step
(ours: the backend's kernel records; inductor: the profiler's `triton_` kernels), and whether
the step matches eager.

    python perf/models.py          # GPU: a Llama-3-8B-shaped decoder layer, bf16, B=1, T=2048
    python perf/models.py --cpu    # tiny configs through the interpreter: a smoke run

Models: transformers' Llama and LitGPT's GPT (`litgpt`, its Llama-3-8B `Config`), each where its
package is installed, and the project's GPT (`ir.examples.GPT`, LitGPT-style), one layer each;
on a GPU with Llama-3-8B's layer sizes (hidden 4096, 32 heads, 8 KV heads for Llama and LitGPT,
MLP 14336) and a vocabulary of 1024, so the layer and not the LM head is what is timed. On a CPU the inductor rows are skipped (its C++ compile
takes minutes) and times are interpreter times, not GPU timings.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path

import torch

CUDA = torch.cuda.is_available()
if not CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import ir  # noqa: E402
import triton_exec  # noqa: E402
from ir.examples import GPT, GPTConfig, gpt_loss  # noqa: E402

FRONTS = ("eager", "torch.compile inductor", "torch.compile triton_exec")


@dataclasses.dataclass
class Row:
    model: str
    step: str               # "forward" or "forward + backward"
    front: str
    ms: float | None = None
    launched: int | None = None     # kernels per step (CUDA profiler)
    triton: int | None = None       # Triton kernels per step
    ok: bool | None = None
    note: str = ""


def llama(gpu: bool):
    import transformers
    sizes = (dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                  num_key_value_heads=8) if gpu else
             dict(hidden_size=64, intermediate_size=128, num_attention_heads=4,
                  num_key_value_heads=2))
    config = transformers.LlamaConfig(vocab_size=1024 if gpu else 128, num_hidden_layers=1,
                                      max_position_embeddings=4096, **sizes)
    model = transformers.LlamaForCausalLM(config)
    return model, lambda m, idx: m(idx, use_cache=False).logits, config.vocab_size


def litgpt_llama(gpu: bool):
    from litgpt import GPT as LitGPT, Config
    sizes = {} if gpu else dict(n_embd=64, n_head=4, n_query_groups=2, intermediate_size=128)
    config = Config.from_name("Llama-3-8B", n_layer=1, vocab_size=1024 if gpu else 128,
                              padded_vocab_size=1024 if gpu else 128, **sizes)
    return LitGPT(config), lambda m, idx: m(idx), config.padded_vocab_size


def gpt(gpu: bool):
    config = (GPTConfig(vocab_size=1024, block_size=4096, n_layer=1, n_head=32, n_embd=4096,
                        intermediate_size=14336, rotary_percentage=1.0) if gpu else
              GPTConfig(n_layer=1))
    return GPT(config), lambda m, idx: m(idx), config.vocab_size


def models():
    """The models whose package imports here, by row name."""
    found = {}
    for name, package, build in (("llama (transformers)", "transformers", llama),
                                 ("llama-3-8b (litgpt)", "litgpt", litgpt_llama)):
        try:
            __import__(package)
            found[name] = build
        except ImportError:
            pass
    found["gpt (ir.examples)"] = gpt
    return found


def run_step(fn, model, idx, backward: bool):
    if not backward:
        with torch.no_grad():
            return fn(model, idx)
    logits = fn(model, idx)
    gpt_loss(logits, idx).backward()
    return logits


def timed(step, calls: int) -> float:
    step()          # warm up: compiles
    if CUDA:
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        step()
    if CUDA:
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e3


def kernels_launched(step) -> tuple[int, int] | tuple[None, None]:
    """(CUDA kernels, of them Triton `triton_`-named ones) one step launches (GPU only)."""
    if not CUDA:
        return None, None
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return len(names), sum(n.startswith("triton_") for n in names)


def measure(name, build, backward: bool, calls: int) -> list[Row]:
    device, dtype = ("cuda", torch.bfloat16) if CUDA else ("cpu", torch.float32)
    torch.manual_seed(0)
    model, fn, vocab = build(CUDA)
    model = model.to(device, dtype)
    T = 2048 if CUDA else 8
    idx = torch.randint(0, vocab, (1, T), device=device)
    step_name = "forward + backward" if backward else "forward"
    expected = run_step(fn, model, idx, backward).float()
    rows = []
    for front in FRONTS:
        row = Row(name, step_name, front)
        rows.append(row)
        if front == "torch.compile inductor" and not CUDA:
            row.note = "skipped on CPU (C++ compile)"
            continue
        torch._dynamo.reset()
        backend = ir.dynamo.Backend() if front.endswith("triton_exec") else "inductor"
        compiled = model if front == "eager" else torch.compile(model, backend=backend)

        def step():
            model.zero_grad(set_to_none=True)
            return run_step(fn, compiled, idx, backward)

        got = step().float()
        tol = dict(rtol=2e-2, atol=2e-2) if dtype is torch.bfloat16 else dict(rtol=1e-4, atol=1e-5)
        row.ok = torch.allclose(got, expected, **tol)
        row.ms = timed(step, calls)
        row.launched, row.triton = kernels_launched(step)
        if isinstance(backend, ir.dynamo.Backend):
            row.triton = len(triton_exec.last_kernels(backend))
    torch._dynamo.reset()
    return rows


def format_table(rows: list[Row]) -> str:
    lines = ["| model | step | front end | ms/step | kernels launched | Triton kernels | matches eager | note |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        cells = [r.model, r.step, r.front, "-" if r.ms is None else f"{r.ms:.2f}",
                 "-" if r.launched is None else str(r.launched),
                 "-" if r.triton is None else str(r.triton),
                 "-" if r.ok is None else ("yes" if r.ok else "NO"), r.note]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> list[Row]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true", help="tiny configs, interpreter (smoke)")
    parser.add_argument("--calls", type=int, default=None, help="timed steps per row")
    opts = parser.parse_args(argv)
    if opts.cpu and CUDA:
        parser.error("--cpu is for machines without a GPU")
    calls = opts.calls or (10 if CUDA else 1)
    rows = [row for name, build in models().items() for backward in (False, True)
            for row in measure(name, build, backward, calls)]
    where = (torch.cuda.get_device_name() + ", bf16, B=1, T=2048" if CUDA else
             "CPU, Triton interpreter, tiny configs, fp32: NOT GPU timings")
    print(f"## Models through eager, inductor and our backend ({where}; torch "
          f"{torch.__version__})\n")
    print(format_table(rows))
    return rows


if __name__ == "__main__":
    main()
