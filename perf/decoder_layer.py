"""Memory-bound kernels per call of a Llama-style decoder layer (issue 28's table): RMSNorm in
fp32 as transformers writes it, rotate-half RoPE on q and k, GQA (k and v repeated as
transformers' `repeat_kv`), SDPA, SwiGLU, two residuals; B=2, T=16, d=64. Eager's count next to
ours (`ir.jit(layer, executors=["triton"])`), forward and backward (the gradients of the input
and of every parameter for a given output gradient).

Counted per call, after a warm-up call (compiles): the Triton kernels launched plus the ATen ops
PyTorch runs that launch a memory-bound kernel, leaving out matmuls, attention, the embedding,
views and allocations (`AtenOps` keeping `memory_bound` ops, a dispatch mode: it sees eager's ops, those our traces
leave to PyTorch, and those autograd's engine runs between our fused units; it does not look
inside a Triton launch).

On a GPU it also runs the layer's forward and forward + backward through eager, inductor
(`torch.compile`) and ours, and prints their times and their largest difference from eager.

    python perf/decoder_layer.py            # through the interpreter on a CPU (a GPU when present)
"""
from __future__ import annotations

import collections
import contextlib
import os
import sys
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

import ir  # noqa: E402
import triton_exec  # noqa: E402
from triton_exec import launch  # noqa: E402

# ATen ops that launch no memory-bound kernel of their own: views, allocations, metadata, and
# the compute-bound ones left out of the count (matmuls, attention, embedding)
FREE = {"view", "_unsafe_view", "expand", "permute", "transpose", "t", "unsqueeze", "squeeze",
        "slice", "select", "as_strided", "alias", "detach", "split", "split_with_sizes",
        "unbind", "_reshape_alias", "view_as", "empty", "empty_strided", "empty_like",
        "lift_fresh", "resolve_neg", "resolve_conj", "is_same_size", "_to_copy_meta"}
COMPUTE = ("mm", "bmm", "addmm", "matmul", "linear", "attention", "embedding")


def memory_bound(name: str) -> bool:
    """Whether the ATen op `name` launches a memory-bound kernel of its own."""
    return name not in FREE and not any(c in name for c in COMPUTE)


class AtenOps(TorchDispatchMode):
    """Counts, by name, the ATen ops run under it that `counted(name)` keeps, outside Triton
    launches (`launches_unseen`)."""

    paused = False      # inside a launch: the interpreter's own torch calls

    def __init__(self, counted=memory_bound):
        super().__init__()
        self.counted = counted
        self.ops = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if not AtenOps.paused and self.counted(name):
            self.ops[name] += 1
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def launches_unseen():
    """Triton launches run with every `AtenOps` count paused (the interpreter's own torch
    calls)."""
    original = launch.PlainLaunch.__call__

    def call(self, grid, args):
        AtenOps.paused = True
        try:
            return original(self, grid, args)
        finally:
            AtenOps.paused = False
    launch.PlainLaunch.__call__ = call
    try:
        yield
    finally:
        launch.PlainLaunch.__call__ = original


class RMSNorm(torch.nn.Module):
    """transformers' LlamaRMSNorm: in fp32, the weight times the result in the input's dtype."""

    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight, self.eps = torch.nn.Parameter(torch.ones(d)), eps

    def forward(self, hidden_states):
        dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.eps)
        return self.weight * hidden_states.to(dtype)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def repeat_kv(hidden_states, n_rep: int):
    b, h, t, hd = hidden_states.shape
    return hidden_states[:, :, None, :, :].expand(b, h, n_rep, t, hd).reshape(b, h * n_rep, t, hd)


class DecoderLayer(torch.nn.Module):
    def __init__(self, d=64, heads=4, kv_heads=2, hidden=128):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, d // heads
        self.input_layernorm, self.post_attention_layernorm = RMSNorm(d), RMSNorm(d)
        self.q_proj = torch.nn.Linear(d, heads * self.hd, bias=False)
        self.k_proj = torch.nn.Linear(d, kv_heads * self.hd, bias=False)
        self.v_proj = torch.nn.Linear(d, kv_heads * self.hd, bias=False)
        self.o_proj = torch.nn.Linear(heads * self.hd, d, bias=False)
        self.gate_proj = torch.nn.Linear(d, hidden, bias=False)
        self.up_proj = torch.nn.Linear(d, hidden, bias=False)
        self.down_proj = torch.nn.Linear(hidden, d, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        h = self.input_layernorm(x)
        q = self.q_proj(h).view(b, t, self.heads, self.hd).transpose(1, 2)
        k = self.k_proj(h).view(b, t, self.kv_heads, self.hd).transpose(1, 2)
        v = self.v_proj(h).view(b, t, self.kv_heads, self.hd).transpose(1, 2)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        n_rep = self.heads // self.kv_heads
        a = F.scaled_dot_product_attention(q, repeat_kv(k, n_rep), repeat_kv(v, n_rep),
                                           is_causal=True)
        x = x + self.o_proj(a.transpose(1, 2).reshape(b, t, -1))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


def layer_inputs(B=2, T=16, d=64, heads=4, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    hd = d // heads
    inv = 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd))
    freqs = torch.outer(torch.arange(T).float(), inv)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = (e[None].expand(B, T, hd).contiguous().to(device) for e in (emb.cos(), emb.sin()))
    return torch.randn(B, T, d, generator=g).to(device), cos, sin


def count(run_layer, layer, inputs) -> dict:
    """{direction: (Triton kernels, Counter of ATen ops)} of one call after a warm-up."""
    params = list(layer.parameters())
    x = inputs[0].detach().requires_grad_()
    g = torch.randn(inputs[0].shape, generator=torch.Generator().manual_seed(1)).to(x.device)

    def step(mode_f, mode_b):
        with mode_f:
            out = run_layer(x, *inputs[1:])
        with mode_b:
            torch.autograd.grad(out, [x] + params, g)
        return out

    step(AtenOps(), AtenOps())        # compiles
    forward, backward = AtenOps(), AtenOps()
    out = step(forward, backward)
    kernels = triton_exec.last_kernels(run_layer) if isinstance(run_layer, ir.JitModule) else []
    return {"forward": (sum(k.direction == "forward" for k in kernels), forward.ops),
            "backward": (sum(k.direction == "backward" for k in kernels), backward.ops),
            "out": out}


def _cell(triton: int, ops) -> str:
    torch_ops = sum(ops.values())
    listed = ", ".join(f"`{n}` x{c}" if c > 1 else f"`{n}`" for n, c in sorted(ops.items()))
    total = triton + torch_ops
    if not triton:
        return f"{total}"
    return f"{total} ({triton} Triton + {torch_ops} torch{': ' + listed if listed else ''})"


def _step(run_layer, layer, x, rest, g, backward: bool):
    """One forward (and backward): the output and the gradients of x and the parameters."""
    leaf = x.detach().requires_grad_(backward)
    out = run_layer(leaf, *rest)
    if not backward:
        return [out.detach()]
    return [out.detach(), *torch.autograd.grad(out, [leaf] + list(layer.parameters()), g)]


def against_inductor(layer, inputs, calls: int = 20) -> None:
    """On a GPU: eager, inductor (`torch.compile`) and ours, forward and forward + backward,
    their values against eager's and their time per call."""
    import time
    x, rest = inputs[0], inputs[1:]
    g = torch.randn_like(x)
    runners = {"eager": layer, "inductor": torch.compile(layer),
               "ours": ir.jit(layer, executors=["triton"])}
    print("\n| step | eager ms | inductor ms | ours ms | inductor max err | ours max err |"
          "\n|---|---:|---:|---:|---:|---:|")
    for backward in (False, True):
        results, ms = {}, {}
        for name, run in runners.items():
            results[name] = _step(run, layer, x, rest, g, backward)     # compiles
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(calls):
                _step(run, layer, x, rest, g, backward)
            torch.cuda.synchronize()
            ms[name] = (time.perf_counter() - start) / calls * 1e3
        err = {n: max((a - b).abs().max().item() for a, b in zip(results[n], results["eager"]))
               for n in ("inductor", "ours")}
        print(f"| {'forward + backward' if backward else 'forward'} | {ms['eager']:.3f} "
              f"| {ms['inductor']:.3f} | {ms['ours']:.3f} | {err['inductor']:.2e} "
              f"| {err['ours']:.2e} |")
        assert err["ours"] < 1e-3, err


def main() -> dict:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    layer = DecoderLayer().to(device)
    inputs = layer_inputs(device=device)
    with launches_unseen():
        eager = count(layer, layer, inputs)
        ours = count(ir.jit(layer, executors=["triton"]), layer, inputs)
    torch.testing.assert_close(ours["out"], eager["out"], rtol=1e-4, atol=1e-5)
    print("Llama-style decoder layer (B=2, T=16, d=64, 4 q / 2 kv heads, fp32): memory-bound "
          "kernels per call (Triton kernels + ATen ops that launch a memory-bound kernel; "
          "matmuls, attention, embedding and views left out)\n")
    print("| | forward | backward | total |\n|---|---|---|---:|")
    for name, c in (("eager", eager), ("ours", ours)):
        (tf, of), (tb, ob) = c["forward"], c["backward"]
        total = tf + sum(of.values()) + tb + sum(ob.values())
        print(f"| {name} | {_cell(tf, of)} | {_cell(tb, ob)} | {total} |")
    if device == "cuda":
        against_inductor(layer, inputs)
    return {"eager": eager, "ours": ours}


if __name__ == "__main__":
    main()
