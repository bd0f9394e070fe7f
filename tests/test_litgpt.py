"""LitGPT's `GPT` (the `litgpt` package, unmodified) through `torch.compile(...,
backend="triton_exec")` and through `ir.jit`: four model families, each LitGPT's own `Config` of a
real checkpoint name shrunk to one tiny layer (random weights, nothing downloaded). Logits, the
training loss and every gradient, KV-cache decoding and greedy `generate()` equal eager's, with
as many graphs as Dynamo captures for any backend and Triton kernels forward and backward."""
import pytest
import torch
import torch._dynamo
from litgpt import GPT, Config
from litgpt.generate.base import generate
from litgpt.utils import chunked_cross_entropy
from torch._dynamo.testing import CompileCounter

import ir
import triton_exec
from ir.dynamo import Backend
from test_dynamo import assert_ran_on_triton

VOCAB = 128
_TINY = dict(block_size=32, n_layer=1, n_embd=64, n_head=4, vocab_size=VOCAB,
             padded_vocab_size=VOCAB)
# family -> (LitGPT's config name, sizes that name's checkpoint sets and a tiny model must not)
FAMILIES = {
    # RMSNorm, LLaMAMLP (SwiGLU), GQA, full rotary with Llama 3's frequency adjustments
    "llama": ("Llama-3.2-1B", dict(n_query_groups=2, intermediate_size=128)),
    # GPT-NeoX: LayerNorm, parallel residual, rotary on a quarter of each head (4 of 16)
    "pythia": ("pythia-14m", {}),
    # MQA (one key/value head), GemmaMLP (tanh GeGLU), RMSNorm with unit offset, scaled embeddings
    "gemma": ("Gemma-2b", dict(n_query_groups=1, intermediate_size=128)),
    # a LayerNorm shared by attention and MLP, rotary on 6 of 16, lm_head bias
    "phi": ("phi-2", {}),
}
FP32 = dict(rtol=1e-4, atol=1e-5)
BF16 = dict(rtol=1.6e-2, atol=1e-2)


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def build(family: str, dtype=torch.float32) -> GPT:
    name, sizes = FAMILIES[family]
    torch.manual_seed(sorted(FAMILIES).index(family))   # each family its own weights
    return GPT(Config.from_name(name, **_TINY, **sizes)).to(dtype)


def graphs_dynamo_captures(model: GPT, run) -> int:
    """The graphs Dynamo captures when `run` calls the model compiled with a counting backend
    (what inductor gets): graph breaks and recompiles are Dynamo's, whatever the backend."""
    torch._dynamo.reset()
    counter = CompileCounter()
    run(torch.compile(model, backend=counter))
    torch._dynamo.reset()
    return counter.frame_count


def tokens(B=2, T=12, seed=1):
    return torch.randint(0, VOCAB, (B, T), generator=torch.Generator().manual_seed(seed))


def gradients(model: GPT) -> dict:
    grads = {n: p.grad for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    return grads


def assert_gradients_equal(model: GPT, expected: dict, tol: dict):
    for n, p in model.named_parameters():
        assert p.grad is not None, f"{n} got no gradient"
        torch.testing.assert_close(p.grad, expected[n], **tol, msg=lambda m: f"{n}.grad: {m}")


def training_step(model, idx):
    """LitGPT's pretraining step: the (compiled) model's logits, next-token cross entropy."""
    logits = model(idx[:, :-1])
    return logits, chunked_cross_entropy(logits, idx[:, 1:])


@pytest.mark.parametrize("family", FAMILIES)
def test_training_step_logits_loss_and_every_gradient(family):
    model = build(family).train()
    idx = tokens(T=13)
    expected_logits, expected = training_step(model, idx)
    expected.backward()
    expected_grads = gradients(model)
    graphs = graphs_dynamo_captures(model, lambda m: training_step(m, idx))
    backend = Backend()
    logits, loss = training_step(torch.compile(model, backend=backend), idx)
    loss.backward()
    torch.testing.assert_close(logits, expected_logits, **FP32)
    torch.testing.assert_close(loss, expected, **FP32)
    assert_gradients_equal(model, expected_grads, FP32)
    assert len(backend.graphs) == graphs
    assert_ran_on_triton(backend, "forward")
    assert_ran_on_triton(backend, "backward")


def decode(model, idx, steps=3):
    """Prefill the KV cache with idx, then feed back each greedy token at its position
    (`input_pos`, `input_pos_maxp1` as LitGPT's generate does): every step's logits."""
    model.set_kv_cache(batch_size=idx.shape[0])
    T = idx.shape[1]
    logits = [model(idx, torch.arange(T), input_pos_maxp1=T)]
    for pos in range(T, T + steps):
        token = logits[-1][:, -1:].argmax(-1)
        logits.append(model(token, torch.tensor([pos]), input_pos_maxp1=pos + 1))
    model.clear_kv_cache()
    return logits


@pytest.mark.parametrize("family", FAMILIES)
def test_kv_cache_decoding_equals_eager(family):
    """Prefill and decode steps write the cache buffers in place (`index_copy_`) and read them
    back: each step's logits equal eager's; the decode steps' changing position makes Dynamo
    recompile once with a dynamic size, which we run in symbolic mode."""
    model = build(family).eval()
    idx = tokens(T=8)
    with torch.no_grad():
        expected = decode(model, idx)
        graphs = graphs_dynamo_captures(model, lambda m: decode(m, idx))
        backend = Backend()
        got = decode(torch.compile(model, backend=backend), idx)
    for step, (g, e) in enumerate(zip(got, expected)):
        torch.testing.assert_close(g, e, **FP32, msg=lambda m: f"step {step}: {m}")
    assert len(backend.graphs) == graphs
    assert_ran_on_triton(backend, "forward")
    assert any(g.jitted.cache_mode == "symbolic values" for g in backend.graphs)


def test_greedy_generate_equals_eager():
    """`litgpt.generate.base.generate` (temperature 0, top_p 0: argmax) on the compiled model."""
    model = build("phi").eval()
    prompt = tokens(B=1, T=6)[0]

    def run(m):
        model.set_kv_cache(batch_size=1)
        out = generate(m, prompt, max_returned_tokens=11, temperature=0.0, top_p=0.0)
        model.clear_kv_cache()
        return out

    with torch.no_grad():
        expected = run(model)
        graphs = graphs_dynamo_captures(model, run)
        backend = Backend()
        got = run(torch.compile(model, backend=backend))
    assert torch.equal(got, expected), (got.tolist(), expected.tolist())
    assert len(backend.graphs) == graphs
    assert_ran_on_triton(backend, "forward")


@pytest.mark.parametrize("family", ["llama", "pythia"])
def test_bf16_weights_forward_and_backward(family):
    model = build(family, torch.bfloat16).train()
    idx = tokens(T=13)
    expected_logits, expected = training_step(model, idx)
    expected.backward()
    expected_grads = gradients(model)
    backend = Backend()
    logits, loss = training_step(torch.compile(model, backend=backend), idx)
    loss.backward()
    assert logits.dtype == torch.bfloat16
    torch.testing.assert_close(logits, expected_logits, **BF16)
    assert_gradients_equal(model, expected_grads, BF16)
    assert_ran_on_triton(backend, "backward")


@pytest.mark.parametrize("family", FAMILIES)
def test_ir_jit_runs_litgpt_like_eager(family):
    """LitGPT's forward reads no tensor value in Python, so `ir.jit` traces it whole: training
    loss and gradients, and KV-cache decoding (the cache written in place through the jit; one
    decode step: each new `input_pos_maxp1` is a new entry in constant mode)."""
    model = build(family).train()
    idx = tokens(T=13)
    expected_logits, expected = training_step(model, idx)
    expected.backward()
    expected_grads = gradients(model)
    jitted = ir.jit(model, executors=["triton"])
    logits, loss = training_step(jitted, idx)
    loss.backward()
    torch.testing.assert_close(logits, expected_logits, **FP32)
    torch.testing.assert_close(loss, expected, **FP32)
    assert_gradients_equal(model, expected_grads, FP32)
    assert [k for k in triton_exec.last_kernels(jitted) if k.direction == "backward"]
    model.eval()
    with torch.no_grad():
        expected_steps = decode(model, tokens(T=8), steps=1)
        got_steps = decode(jitted, tokens(T=8), steps=1)
    for step, (g, e) in enumerate(zip(got_steps, expected_steps)):
        torch.testing.assert_close(g, e, **FP32, msg=lambda m: f"step {step}: {m}")
