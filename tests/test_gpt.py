"""The small LitGPT-style GPT of `ir.examples` under `ir.jit(model, executors=["triton"])`:
trains like eager (forward, losses over AdamW steps, final parameters), with forward and backward
Triton kernels for its RoPE, RMSNorms (the mean in the kernel), residual adds and SwiGLU; `eval()`
under `no_grad` fuses the same groups."""

import copy

import ir
import torch
import triton_exec
from ir.diagnostics import fusion_groups
from ir.examples import GPT, GPTConfig, gpt_batch, gpt_loss

CONFIG = GPTConfig()


def train(model, call, steps=3, B=2, T=16):
    """(losses, gradients per step) of `steps` AdamW steps of `call` (the model or its jitted
    form) on one batch. The learning rate is small: an AdamW step moves an element by up to lr
    whatever its gradient's size, so the last-bit difference of a gradient near zero (fp32
    arithmetic in another order) can move it by up to lr."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    idx, targets = gpt_batch(model.config, B, T)
    losses, grads = [], []
    for _ in range(steps):
        loss = gpt_loss(call(idx), targets)
        optimizer.zero_grad()
        loss.backward()
        grads.append({name: p.grad.clone() for name, p in model.named_parameters()})
        optimizer.step()
        losses.append(loss.detach())
    return torch.stack(losses), grads


def fused_ops(jm) -> list:
    """The op list of each fusion group of the last call (before differentiable units)."""
    trace = next(t for t in ir.last_traces(jm) if t.provenance.startswith("Fusion by the triton"))
    return [group["ops"] for group in fusion_groups(trace)]


def test_gpt_trains_like_eager_with_fused_forward_and_backward_kernels():
    torch.manual_seed(0)
    model = GPT(CONFIG)
    reference = copy.deepcopy(model)
    jm = ir.jit(model, executors=["triton"])
    idx, _ = gpt_batch(CONFIG, 2, 16, seed=5)
    torch.testing.assert_close(jm(idx), reference(idx), rtol=1e-5, atol=1e-5)

    losses, grads = train(model, jm)
    expected, expected_grads = train(reference, reference)
    torch.testing.assert_close(losses, expected, rtol=1e-5, atol=1e-5)
    assert losses[-1] < losses[0]
    for step, (got, want) in enumerate(zip(grads, expected_grads)):
        for name in want:
            torch.testing.assert_close(got[name], want[name], rtol=1e-4, atol=1e-6,
                                       msg=lambda m: f"step {step}, {name}.grad: {m}")
    # the fused norms' reductions sum in another order (README, Numerical contract): a gradient
    # near zero then differs in its last bits, and an AdamW step moves it by up to lr
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-4, msg=lambda m: f"{name}: {m}")
    assert ir.cache_stats(jm).misses == 1       # one entry served every step

    kernels = triton_exec.last_kernels(jm)
    directions = [k.direction for k in kernels]
    assert directions.count("forward") > 0 and directions.count("backward") > 0
    groups = fused_ops(jm)
    # RoPE of q and k (slices, neg, cat, mul, add), SwiGLU (the silu prim, mul), RMSNorms (the
    # mean, rsqrt, the weight), residual adds, per layer
    rope = [ops for ops in groups if {"neg", "cat", "mul", "add"} <= set(ops)]
    swiglu = [ops for ops in groups if {"silu", "mul"} <= set(ops)]
    norm = [ops for ops in groups if "rsqrt" in ops]
    residual = [ops for ops in groups if "add" in ops and "cat" not in ops and "rsqrt" not in ops]
    assert len(rope) >= CONFIG.n_layer and len(swiglu) == CONFIG.n_layer
    # each norm's mean is in its kernel; a residual add read by nothing but a norm is too
    residual_in_norm = [ops for ops in norm if ops[0] == "add"]
    assert all("sum" in ops for ops in norm)
    assert (len(norm) == 2 * CONFIG.n_layer + 1
            and len(residual) + len(residual_in_norm) >= 2 * CONFIG.n_layer)
    # every group differentiable: its backward is fused too
    assert len(ir.last_backward_traces(jm)) > 0

    jm.eval()
    with torch.no_grad():
        torch.testing.assert_close(jm(idx), reference.eval()(idx), rtol=1e-5, atol=1e-5)
        assert fused_ops(jm) == groups
        assert all(k.direction == "forward" for k in triton_exec.last_kernels(jm))


def test_gpt_compiles_once_for_every_batch_and_sequence_size_in_symbolic_mode():
    torch.manual_seed(0)
    config = GPTConfig(n_layer=1)
    model = GPT(config)
    reference = copy.deepcopy(model)
    jm = ir.jit(model, executors=["triton"], cache="symbolic values")
    for B, T in [(2, 16), (3, 32), (5, 24)]:
        idx, targets = gpt_batch(config, B, T, seed=T)
        out = jm(idx)
        torch.testing.assert_close(out, reference(idx), rtol=1e-5, atol=1e-5)
        gpt_loss(out, targets).backward()
        gpt_loss(reference(idx), targets).backward()
        for (name, p), q in zip(model.named_parameters(), reference.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6,
                                       msg=lambda m: f"(B, T) = {(B, T)}, {name}.grad: {m}")
    assert (ir.cache_stats(jm).misses, ir.cache_stats(jm).hits) == (1, 2)
    # no size of idx is pinned (the RoPE width pins the cos/sin caches' widths to the config's)
    specialized = ir.explain(jm, idx).specialized
    assert not [s for s in specialized if s["of"].startswith("idx")], specialized
