"""`torch.compile(..., backend="triton_exec")` (`ir.dynamo`): real transformers models, unmodified,
built from tiny configs with random weights (no download), captured by Dynamo and run on our
Triton kernels: logits, loss and every gradient equal to eager's, greedy `generate()` tokens
equal, as many graphs as Dynamo captures for any backend, Triton kernels in forward and
backward; the per-call guards, symbolic sizes, refusals and diagnostics of the backend."""
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch._dynamo
import transformers
from hypothesis import given, note, settings
from torch._dynamo.testing import CompileCounter

import ir
import triton_exec
from ir.dynamo import Backend
from ir.examples import GPT, GPTConfig, gpt_batch, gpt_loss
from programs import assert_matches_eager, programs

ROOT = Path(__file__).resolve().parent.parent
VOCAB, T = 128, 8
_SIZES = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
# name -> (config class, model class, config arguments): full, partial and interleaved rotary
MODELS = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {}),
    "mistral": ("MistralConfig", "MistralForCausalLM", {}),
    "gpt_neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM", {"rotary_pct": 0.5}),
    "phi": ("PhiConfig", "PhiForCausalLM", {"partial_rotary_factor": 0.5}),
    "gptj": ("GPTJConfig", "GPTJForCausalLM", {"rotary_dim": 8, "n_embd": 64, "n_layer": 1,
                                               "n_head": 4, "n_positions": 64}),
}


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def build(name: str, dtype=torch.float32):
    config_class, model_class, extra = MODELS[name]
    config = getattr(transformers, config_class)(**_SIZES, **extra)
    torch.manual_seed(0)
    return getattr(transformers, model_class)(config).to(dtype)


def tokens(B=2, seed=1):
    return torch.randint(0, VOCAB, (B, T), generator=torch.Generator().manual_seed(seed))


def graphs_dynamo_captures(fn, *args, **kwargs) -> int:
    """The graphs Dynamo captures from fn on these arguments with a counting backend: graph
    breaks are Dynamo's, whatever the backend (inductor's included), unless a backend fails."""
    torch._dynamo.reset()
    counter = CompileCounter()
    torch.compile(fn, backend=counter)(*args, **kwargs)
    torch._dynamo.reset()
    return counter.frame_count


def assert_ran_on_triton(backend: Backend, direction: str):
    assert backend.graphs and all(g.refused is None for g in backend.graphs)
    kernels = [k for k in triton_exec.last_kernels(backend) if k.direction == direction]
    assert kernels, f"no {direction} Triton kernel"


@pytest.mark.parametrize("name", MODELS)
def test_forward_with_padding_mask_and_cache(name):
    """Logits equal eager's (fp32) with a left-padded attention mask and the KV cache on."""
    model = build(name).eval()
    idx = tokens()
    mask = torch.ones_like(idx)
    mask[0, :3] = 0
    with torch.no_grad():
        expected = model(idx, attention_mask=mask).logits
        graphs = graphs_dynamo_captures(model, idx, attention_mask=mask)
        backend = Backend()
        got = torch.compile(model, backend=backend)(idx, attention_mask=mask).logits
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    assert len(backend.graphs) == graphs
    assert_ran_on_triton(backend, "forward")


@pytest.mark.parametrize("name", MODELS)
def test_training_step_loss_and_every_gradient(name):
    model = build(name).train()
    idx = tokens()
    expected = model(idx, labels=idx).loss
    expected.backward()
    expected_grads = {n: p.grad for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    backend = Backend()
    loss = torch.compile(model, backend=backend)(idx, labels=idx).loss
    loss.backward()
    torch.testing.assert_close(loss, expected, rtol=1e-4, atol=1e-5)
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.grad, expected_grads[n], rtol=1e-4, atol=1e-5,
                                   msg=lambda m: f"{name}: {n}.grad: {m}")
    assert_ran_on_triton(backend, "forward")
    assert_ran_on_triton(backend, "backward")


@pytest.mark.parametrize("name", MODELS)
def test_greedy_generate_equals_eager(name):
    """`model.compile` compiles the forward that `generate()` calls: prefill, then decode steps
    with the KV cache (where Dynamo recompiles for a new length and marks it dynamic, the graph
    is jitted in symbolic-values mode)."""
    model = build(name).eval()
    idx = tokens(B=1)
    with torch.no_grad():
        expected = model.generate(idx, max_new_tokens=4, do_sample=False, pad_token_id=0)
        backend = Backend()
        model.compile(backend=backend)
        got = model.generate(idx, max_new_tokens=4, do_sample=False, pad_token_id=0)
    assert torch.equal(got, expected)
    assert_ran_on_triton(backend, "forward")
    for graph in backend.graphs:
        dynamic = ir.dynamo.is_dynamic(graph.graph_module)
        assert graph.jitted.cache_mode == ("symbolic values" if dynamic else "constant values")


@pytest.mark.parametrize("name", ["llama", "phi"])
def test_bf16_weights_forward_and_backward(name):
    model = build(name, torch.bfloat16).train()
    idx = tokens()
    expected = model(idx, labels=idx)
    expected.loss.backward()
    expected_grads = {n: p.grad for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    backend = Backend()
    got = torch.compile(model, backend=backend)(idx, labels=idx)
    got.loss.backward()
    tol = dict(rtol=1.6e-2, atol=1e-2)
    torch.testing.assert_close(got.logits, expected.logits, **tol)
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.grad, expected_grads[n], **tol,
                                   msg=lambda m: f"{name}: {n}.grad: {m}")
    assert_ran_on_triton(backend, "backward")


def test_through_ir_jit_the_kv_cache_output_points_to_torch_compile():
    """ir.jit cannot return transformers' DynamicCache (not a pytree of tensors): the error names
    the output's path and the torch.compile backend, which handles it."""
    model = build("llama").eval()
    with torch.no_grad(), pytest.raises(
            TypeError, match=r"out\['past_key_values'\] is a DynamicCache(.|\n)*"
                             r"torch\.compile\(model, backend=\"triton_exec\"\)"):
        ir.jit(model)(tokens())


def test_the_project_gpt_trains_like_eager():
    model = GPT(GPTConfig(n_layer=1))
    idx, targets = gpt_batch(model.config, B=2, T=16)
    gpt_loss(model(idx), targets).backward()
    expected = {n: p.grad for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    backend = Backend()
    gpt_loss(torch.compile(model, backend=backend)(idx), targets).backward()
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.grad, expected[n], rtol=1e-4, atol=1e-5)
    assert_ran_on_triton(backend, "backward")


def rope(x, cos, sin):
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def rope_inputs(B, H=4, S=4, D=16):    # B never H or S: Dynamo would guard them equal
    x = torch.randn(B, H, S, D)
    cos, sin = torch.randn(2, S, D).unbind(0)
    return x, cos, sin


def test_dynamic_sizes_map_to_one_symbolic_entry():
    backend = Backend()
    compiled = torch.compile(rope, backend=backend, dynamic=True)
    for B in (3, 5, 6):
        args = rope_inputs(B)
        torch.testing.assert_close(compiled(*args), rope(*args))
    (graph,) = backend.graphs
    assert graph.jitted.cache_mode == "symbolic values"
    assert ir.cache_stats(graph.jitted).misses == 1


def test_mark_dynamic_maps_to_symbolic_values():
    backend = Backend()
    compiled = torch.compile(rope, backend=backend)
    args = rope_inputs(3)
    torch._dynamo.mark_dynamic(args[0], 0)
    compiled(*args)
    for B in (5, 6):
        args = rope_inputs(B)
        torch.testing.assert_close(compiled(*args), rope(*args))
    (graph,) = backend.graphs
    assert graph.jitted.cache_mode == "symbolic values"
    assert ir.cache_stats(graph.jitted).misses == 1
    # the dims Dynamo holds static are constants of the trace, and it guards them, not we
    entry = graph.last_entry
    x = dict(entry.traces[0].inputs)["l_x_"]
    assert isinstance(x.shape[0], ir.IntProxy) and x.shape[1:] == (4, 4, 16)
    assert len(ir.dynamo.thin_guards(entry, graph)) < len(entry.guards)


def test_automatic_dynamic_after_a_size_change_gives_one_symbolic_graph():
    backend = Backend()
    compiled = torch.compile(rope, backend=backend)
    for B in (3, 5, 6, 7):
        args = rope_inputs(B)
        torch.testing.assert_close(compiled(*args), rope(*args))
    assert [g.jitted.cache_mode for g in backend.graphs] == ["constant values",
                                                             "symbolic values"]
    assert ir.cache_stats(backend.graphs[1].jitted).misses == 1


def test_a_static_graph_checks_only_what_dynamo_does_not():
    """Dynamo checks dtypes, devices, ranks, sizes and strides of a static graph; the backend's
    per-call check keeps pointer alignment. A misaligned view that
    passes Dynamo's guards fails the thin check and compiles an entry of its own."""
    backend = Backend()
    compiled = torch.compile(rope, backend=backend)
    x, cos, sin = rope_inputs(2)
    torch.testing.assert_close(compiled(x, cos, sin), rope(x, cos, sin))
    (graph,) = backend.graphs
    ((check, entry),) = graph.fast
    guards = check.source.split("\n", 1)[1]
    assert "data_ptr()" in guards and "stride" not in guards and "shape" not in guards
    assert len(ir.dynamo.thin_guards(entry, graph)) < len(entry.guards)
    base = torch.randn(x.numel() + 1)
    shifted = base[1:].view(x.shape)    # same sizes and strides, 4 bytes off
    torch.testing.assert_close(compiled(shifted, cos, sin), rope(shifted, cos, sin))
    assert len(graph.fast) == 2 and ir.cache_stats(graph.jitted).misses == 2


def test_a_dynamic_graph_checks_only_what_dynamo_does_not():
    """Dynamo guards a dynamic graph's size relations (each size symbol >= 2, n <= x's last
    size), its inputs' stride expressions (contiguous here) and negative bits: the backend's
    per-call check keeps divisibility, alignment and bounds, a span checked as an element
    count, and still holds each entry's whole prologue (IR_CHECK_GUARDS)."""
    backend = Backend()
    compiled = torch.compile(ir.examples.rope, backend=backend, dynamic=True)
    for shape, n in (((2, 3, 4, 32), 8), ((5, 6, 7, 48), 16), ((3, 5, 9, 64), 16)):
        args = ir.examples.rope_inputs(*shape, n=n)
        torch.testing.assert_close(compiled(*args), ir.examples.rope(*args))
    (graph,) = backend.graphs
    ((check, entry),) = graph.fast
    guards = check.source.split("\n", 1)[1]
    assert "data_ptr()" in guards and "% 4 == 0" in guards
    for implied in (">=", "sum(", "is_neg", "_strides[3] == 1", "_strides[1] == 1"):
        assert implied not in guards, implied
    assert ir.cache_stats(graph.jitted).misses == 1


def shifted(t: torch.Tensor) -> torch.Tensor:
    """t's values at t's sizes and strides, one element further into a new storage: what
    Dynamo's guards (sizes, strides, dtype, ...) accept as t, with another pointer alignment."""
    if t.numel() == 0:
        return t
    span = sum((n - 1) * s for n, s in zip(t.shape, t.stride())) + 1
    out = torch.empty(span + 1, dtype=t.dtype).as_strided(t.shape, t.stride(), 1)
    return out.copy_(t)


@pytest.mark.parametrize("dynamic", [False, True])
@settings(max_examples=12)
@given(program=programs(max_ops=4))
def test_random_programs_through_torch_compile(dynamic, program):
    """Each graph Dynamo captures from a random program (non-contiguous inputs, offsets, every
    fusible op family) runs our kernels and matches eager, again from the cache, and again on
    inputs shifted by one element (Dynamo's guards pass, our alignment check decides). Under
    IR_CHECK_GUARDS every call the thin check accepts must pass the entry's whole prologue."""
    note(program.describe())
    torch._dynamo.reset()
    backend = Backend()
    compiled = torch.compile(program.fn, backend=backend, dynamic=dynamic)
    for _ in range(2):
        assert_matches_eager(program, compiled(*program.inputs))
    inputs = [shifted(t) if isinstance(t, torch.Tensor) else t for t in program.inputs]
    assert_matches_eager(program, compiled(*inputs))
    assert all(g.refused is None for g in backend.graphs)


def test_what_dynamo_records_for_torch_functions_still_fuses():
    """Dynamo records F.pad as torch._C._nn.pad and sizes as torch.sym_* calls: the backend
    maps them back, so a padded RoPE-like graph is one kernel, symbolic or not."""
    def fn(x):
        return torch.nn.functional.pad(x, (1, 2)) * 2 + 1

    for dynamic in (False, True):
        torch._dynamo.reset()
        backend = Backend()
        x = torch.randn(3, 5, 8)
        torch.testing.assert_close(torch.compile(fn, backend=backend, dynamic=dynamic)(x), fn(x))
        explanation = ir.diagnostics.explanation(backend.graphs[0].jitted,
                                                 backend.graphs[0].last_entry)
        assert len(explanation.fusion_groups) == 1 and not explanation.left_to_torch


def test_a_no_grad_block_inside_the_graph_computes_no_gradient():
    """Dynamo writes `with torch.no_grad():` as _set_grad_enabled calls in the graph (as the
    rotary embedding of every transformers model above): gradients flow as in eager."""
    def fn(x, w):
        y = x * 2
        with torch.no_grad():
            z = y * w + 1
        return y * z

    x, w = torch.randn(4, 8, requires_grad=True), torch.randn(4, 8, requires_grad=True)
    expected = fn(x, w)
    expected.sum().backward()
    expected_grad = x.grad
    x.grad = None
    backend = Backend()
    got = torch.compile(fn, backend=backend)(x, w)
    got.sum().backward()
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(x.grad, expected_grad)
    assert w.grad is None
    assert_ran_on_triton(backend, "backward")


def test_explain_lists_each_graph_groups_fallbacks_and_guards(caplog):
    backend = Backend(explain=True)
    with caplog.at_level(logging.WARNING, logger="ir.dynamo"):
        torch.compile(rope, backend=backend)(*rope_inputs(2))
    assert "Fusion groups (1)" in caplog.text
    text = backend.explain()
    assert "1 graphs" in text and "Fusion groups (1)" in text and "Guards of the entry" in text


@pytest.mark.parametrize("mode", ["constant values", "symbolic values"])
def test_cat_skips_legacy_empty_tensors_as_eager(mode):
    """transformers' KV cache starts as torch.tensor([]) and grows by torch.cat(..., dim=-2)."""
    def grow(cache, k, dim):
        return torch.cat([cache, k], dim=dim)

    jitted = ir.jit(grow, executors=["triton"], cache=mode)
    k = torch.randn(2, 3, 4)
    for cache in (torch.tensor([]), torch.tensor([], dtype=torch.float64)):
        expected = grow(cache, k, -2)
        got = jitted(cache, k, -2)
        assert got.dtype == expected.dtype and torch.equal(got, expected)


def test_options_are_checked():
    with pytest.raises(ValueError, match="cache must be"):
        Backend(cache="sometimes")
    with pytest.raises(ValueError, match="cache_limit"):
        Backend(cache_limit=0)
    with pytest.raises(ValueError, match="no executor named 'tritonn'"):
        Backend(executors=["tritonn"])


def test_found_by_name_through_the_entry_point():
    """`backend="triton_exec"` loads `ir.dynamo:backend` from the torch_dynamo_backends entry
    point group (pyproject.toml), without importing our package first."""
    program = textwrap.dedent("""
        import sys, torch
        assert "ir" not in sys.modules
        f = torch.compile(lambda x: torch.cat((x, x * 2), dim=-1) + 1, backend="triton_exec")
        x = torch.randn(3, 8)
        torch.testing.assert_close(f(x), torch.cat((x, x * 2), dim=-1) + 1)
        import ir, triton_exec
        assert [k.name for k in triton_exec.last_kernels(ir.dynamo.backend)]
    """)
    env = dict(os.environ, TRITON_INTERPRET="1")
    subprocess.run([sys.executable, "-c", program], check=True, cwd=ROOT, env=env, timeout=300)
