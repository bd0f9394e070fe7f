"""Symbolic shapes through the ops left to torch (`ir.ops.opaque`): in "symbolic values" mode
an op models use (linear, matmul, reductions over dims, softmax, norms, embedding, attention,
losses, ...) gets its output shape as size expressions, so one cache entry serves every batch and
sequence size; each op's result feeds a fused kernel, which reads the shape the rule gave. An op
without a rule still works by specializing its sizes, and says so."""

import logging
import math

import ir
import pytest
import torch
import torch.nn.functional as F
import triton_exec
from hypothesis import given, settings, strategies as st

SYMBOLIC = "symbolic values"
NO_RULE = "(no symbolic shape rule)"


def _f32(*shape):
    return torch.randn(*shape)


def _long(high, *shape):
    return torch.randint(0, high, shape)


# name -> (function of the tensors, the tensors from sizes a, b, c, d, e); `option` draws the op's
# own options (dims, keepdim, ...), fixed for every call of one example.
def _cases(option):
    keep = option("keepdim", st.booleans())
    dim3 = option("dim", st.integers(-3, 2))
    dims = option("dims", st.sampled_from([(0, 2), (-1, 1), (0,), (0, 1, 2)]))
    causal = option("is_causal", st.booleans())
    red = option("reduction", st.sampled_from(["none", "mean", "sum"]))
    return {
        "linear": (lambda x, w, b: F.linear(x, w, b),
                   lambda a, b, c, d, e: (_f32(a, b, c), _f32(d, c), _f32(d))),
        "linear_no_bias": (lambda x, w: F.linear(x, w),
                           lambda a, b, c, d, e: (_f32(a, c), _f32(d, c))),
        "matmul": (lambda x, y: x @ y, lambda a, b, c, d, e: (_f32(a, b, c), _f32(c, d))),
        "matmul_broadcast": (lambda x, y: torch.matmul(x, y),
                             lambda a, b, c, d, e: (_f32(a, 1, b, c), _f32(d, c, e))),
        "matmul_vector": (lambda x, y, v: (x @ v, v @ y),
                          lambda a, b, c, d, e: (_f32(a, b, c), _f32(a, c, d), _f32(c))),
        "bmm": (lambda x, y: torch.bmm(x, y), lambda a, b, c, d, e: (_f32(a, b, c), _f32(a, c, d))),
        "mm": (lambda x, y: x.mm(y), lambda a, b, c, d, e: (_f32(a, b), _f32(b, c))),
        "sum": (lambda x: x.sum(dim3, keepdim=keep), lambda a, b, c, d, e: (_f32(a, b, c),)),
        "mean": (lambda x: torch.mean(x, dims, keep), lambda a, b, c, d, e: (_f32(a, b, c),)),
        "amax": (lambda x: x.amax(dims, keep), lambda a, b, c, d, e: (_f32(a, b, c),)),
        "amin": (lambda x: torch.amin(x, dim3, keepdim=keep),
                 lambda a, b, c, d, e: (_f32(a, b, c),)),
        "var": (lambda x: x.var(dim3, keepdim=keep), lambda a, b, c, d, e: (_f32(a, b, c),)),
        "std": (lambda x: torch.std(x, dims, correction=0, keepdim=keep),
                lambda a, b, c, d, e: (_f32(a, b, c),)),
        "var_mean": (lambda x: torch.var_mean(x, dim3, keepdim=keep),
                     lambda a, b, c, d, e: (_f32(a, b, c),)),
        "max_dim": (lambda x: tuple(x.max(dim3, keepdim=keep)),
                    lambda a, b, c, d, e: (_f32(a, b, c),)),
        "logsumexp": (lambda x: torch.logsumexp(x, dim3, keep),
                      lambda a, b, c, d, e: (_f32(a, b, c),)),
        "softmax": (lambda x: torch.softmax(x, dim3), lambda a, b, c, d, e: (_f32(a, b, c),)),
        "log_softmax": (lambda x: F.log_softmax(x, dim=dim3),
                        lambda a, b, c, d, e: (_f32(a, b, c),)),
        "cumsum": (lambda x: x.cumsum(dim3), lambda a, b, c, d, e: (_f32(a, b, c),)),
        "layer_norm": (lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b),
                       lambda a, b, c, d, e: (_f32(a, b, c), _f32(c), _f32(c))),
        "rms_norm": (lambda x, w: F.rms_norm(x, (x.size(-1),), w, 1e-6),
                     lambda a, b, c, d, e: (_f32(a, b, c), _f32(c))),
        "embedding": (lambda i, w: F.embedding(i, w),
                      lambda a, b, c, d, e: (_long(c, a, b), _f32(c, d))),
        "sdpa": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                 lambda a, b, c, d, e: (_f32(a, 2, b, e), _f32(a, 2, c, e), _f32(a, 2, c, d))),
        "sdpa_mask": (lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
                      lambda a, b, c, d, e: (_f32(a, 2, b, e), _f32(a, 2, c, e), _f32(a, 2, c, d),
                                             _f32(b, c))),
        "dropout_eval": (lambda x: F.dropout(x, 0.25, training=False),
                         lambda a, b, c, d, e: (_f32(a, b, c),)),
        "cross_entropy": (lambda x, t: F.cross_entropy(x, t, reduction=red),
                          lambda a, b, c, d, e: (_f32(a, c), _long(c, a))),
        "mse_loss": (lambda x, y: F.mse_loss(x, y, reduction=red),
                     lambda a, b, c, d, e: (_f32(a, b), _f32(a, b))),
        "addmm": (lambda x, y, z: torch.addmm(x, y, z),
                  lambda a, b, c, d, e: (_f32(c), _f32(a, b), _f32(b, c))),
        "baddbmm": (lambda x, y, z: torch.baddbmm(x, y, z, alpha=0.5),
                    lambda a, b, c, d, e: (_f32(b, d), _f32(a, b, c), _f32(a, c, d))),
        "sdpa_gqa": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
                     lambda a, b, c, d, e: (_f32(a, 4, b, e), _f32(a, 2, c, e),
                                            _f32(a, 2, c, d))),
        "nll_loss": (lambda x, t: F.nll_loss(x.log_softmax(1), t, reduction=red),
                     lambda a, b, c, d, e: (_f32(a, c, b), _long(c, a, b))),
        "argmax": (lambda x: (x.argmax(dim3, keep), x.amax(dim3, keep)),
                   lambda a, b, c, d, e: (_f32(a, b, c),)),
        "max_binary": (lambda x, y: torch.max(x, y), lambda a, b, c, d, e: (_f32(a, 1, c),
                                                                          _f32(b, 1))),
        "topk_sort": (lambda x: (*torch.topk(x, 3, dim3), *x.sort(dim3)),
                      lambda a, b, c, d, e: (_f32(a, b, c),)),
        "remainder": (lambda x, y: torch.remainder(x, y.abs() + 1),
                      lambda a, b, c, d, e: (_f32(a, 1, c), _f32(b, 1))),
        "einsum": (lambda q, k: torch.einsum("bhqd,bhkd->bhqk", q, k),
                   lambda a, b, c, d, e: (_f32(a, 2, b, d), _f32(a, 2, c, d))),
        "index": (lambda x, i: x[i], lambda a, b, c, d, e: (_f32(a, b), _long(a, c, d))),
        "index_inner": (lambda x, i, j: x[..., i, j],
                        lambda a, b, c, d, e: (_f32(e, a, b), _long(a, c, d), _long(b, d))),
        "index_apart": (lambda x, i, j: x[i, :, j],
                        lambda a, b, c, d, e: (_f32(a, e, b), _long(a, c, d), _long(b, d))),
        "gather_index_select": (lambda x, i: (x.gather(1, i), x.index_select(1, i[0]),
                                              torch.take_along_dim(x, i, 1)),
                                lambda a, b, c, d, e: (_f32(a, b), _long(b, a, c))),
        "repeat": (lambda x: (x.repeat(2, 1, 3), x.repeat_interleave(2, dim=1),
                              torch.outer(x[0, 0], x[:, 0, 0])),
                   lambda a, b, c, d, e: (_f32(a, b, c),)),
        "new_one_hot": (lambda x, i: (x.new_zeros(x.shape) + x.new_ones((x.shape[1],)),
                                      F.one_hot(i, x.shape[1]).float()),
                        lambda a, b, c, d, e: (_f32(a, b), _long(b, c, d))),
        "conv_pool": (lambda x, w, b: (F.conv2d(x, w, b, stride=2, padding=1),
                                       F.conv1d(x[:, :, 0], w[:, :, 0], padding="same"),
                                       F.max_pool2d(x, 3, 2, 1), F.avg_pool2d(x, 2),
                                       F.adaptive_avg_pool2d(x, (2, None)),
                                       *F.max_pool2d(x, 2, return_indices=True)),
                      lambda a, b, c, d, e: (_f32(a, 2, b, c), _f32(4, 2, 3, 3), _f32(4))),
        "norms": (lambda x, w, b: (F.group_norm(x, 2, w, b), F.batch_norm(x, b, w.abs()),
                                   torch.linalg.vector_norm(x, 2, (1, 2), keep),
                                   x.norm(dim=dim3, keepdim=keep), F.glu(x, 1),
                                   F.cosine_similarity(x, x[:1] + 1, dim3)),
                  lambda a, b, c, d, e: (_f32(a, 4, b, c), _f32(4), _f32(4))),
        "pad_interpolate": (lambda x: (F.pad(x, (1, 2, 0, 3), mode="reflect"),
                                       F.pad(x, (2, 1, 1, 0), mode="replicate"),
                                       F.interpolate(x, scale_factor=2),
                                       F.interpolate(x, size=(3, x.shape[-1]), mode="bilinear")),
                            lambda a, b, c, d, e: (_f32(a, 2, b, c),)),
        "view_dtype": (lambda x: (x.view(torch.int32).float(), x.view(torch.int16).float(),
                                  x.view(torch.int64).float()),
                       lambda a, b, c, d, e: (_f32(a, b, c),)),
        "cummax_argsort": (lambda x: (*x.cummax(dim3), x.argsort(dim3)),
                           lambda a, b, c, d, e: (_f32(a, b, c),)),
        # fused ops (prims, whose shapes are symbolic by construction)
        "gelu": (lambda x: F.gelu(x, approximate="tanh"), lambda a, b, c, d, e: (_f32(a, b, c),)),
        "silu": (lambda x: F.silu(x), lambda a, b, c, d, e: (_f32(a, b, c),)),
        "masked_fill": (lambda x, m: x.masked_fill(m > 0, 0.5),
                        lambda a, b, c, d, e: (_f32(a, b, 2 * c), _f32(b, 1))),  # 16 | bools
        "clamp_pow": (lambda x: x.clamp(-0.5, 0.5) + x.abs() ** 1.5,
                      lambda a, b, c, d, e: (_f32(a, b),)),
        "chunk_split": (lambda x: (*x.chunk(2, -1), *x.split(x.shape[0] // 2)),
                        lambda a, b, c, d, e: (_f32(a, b, c),)),
        # unbind pins the size of its dim (the number of outputs): here a literal 2
        "unbind_stack": (lambda x, y: torch.stack((*torch.stack((x, y)).unbind(0), x), dim=1),
                         lambda a, b, c, d, e: (_f32(a, c), _f32(a, c))),
        "flatten_reshape": (lambda x: (x.flatten(1), x.reshape(x.shape[0], -1, 4),
                                       x.view(-1, x.shape[-1])),
                            lambda a, b, c, d, e: (_f32(a, b, c),)),
    }


CASES = sorted(_cases(lambda name, strategy: None))


def _fused_after(op):
    """The op's result(s) fed to a fused kernel, which launches over the shape the rule gave."""
    def f(*args):
        out = op(*args)
        outs = out if isinstance(out, tuple) else (out,)
        return tuple(o * 2 + 1 if o.dtype.is_floating_point else o + 1 for o in outs)
    return f


# multiples of 8: the vectorization analysis's divisibility guards hold for each of them (sizes of
# 0 and 1 are specialized by design)
sizes = st.tuples(*[st.sampled_from([8, 16, 24])] * 5)


@settings(max_examples=4)
@given(data=st.data())
@pytest.mark.parametrize("case", CASES)
def test_each_rule_serves_many_sizes_from_one_entry(case, data):
    op, make = _cases(lambda name, strategy: data.draw(strategy, label=name))[case]
    f = _fused_after(op)
    jfn = ir.jit(f, executors=["triton"], cache=SYMBOLIC)
    for call in range(3):
        args = make(*data.draw(sizes, label=f"sizes of call {call}"))
        for got, want in zip(jfn(*args), f(*args), strict=True):
            assert got.shape == want.shape
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert ir.cache_stats(jfn).misses == 1
    assert _pinned(jfn, *args) == []


def _pinned(jfn, *args):
    """The arguments' sizes the entry for args specialized, less the literal 1s (specialized by
    design); a relation such as `i1 % i5 == 0` (GQA's heads) is a guard, not a pinned size."""
    return [s for s in ir.explain(jfn, *args).specialized
            if s["value"] != 1 and ".shape[" in s["of"]]


def test_dropout_in_training_draws_what_eager_draws_at_every_size():
    def f(x):
        return F.dropout(x, 0.5) * 2

    jfn = ir.jit(f, executors=["triton"], cache=SYMBOLIC)
    for shape in [(2, 16, 8), (3, 32, 8), (5, 24, 8)]:
        x = torch.randn(shape)
        torch.manual_seed(3)
        got = jfn(x)
        torch.manual_seed(3)
        torch.testing.assert_close(got, f(x))
    assert ir.cache_stats(jfn).misses == 1


@pytest.mark.parametrize("draw", ["bernoulli_", "bernoulli"])
def test_drop_path_draws_what_eager_draws_at_every_size(draw):
    """timm's drop path: a per-sample mask drawn by `bernoulli_` on `new_empty` (or
    `torch.bernoulli` of probabilities) has its input's shape: one entry for every batch."""
    def f(x):
        shape = (x.shape[0],) + (1,) * (x.ndim - 1)
        mask = (x.new_empty(shape).bernoulli_(0.75) if draw == "bernoulli_"
                else torch.bernoulli(torch.full(shape, 0.75)))
        return x * mask / 0.75

    jfn = ir.jit(f, executors=["triton"], cache=SYMBOLIC)
    # an odd batch first: the mask's kernel stores [batch] (its trailing 1s merged), and a runtime
    # innermost extent is guarded by the power of two dividing it (README "Cache modes")
    for shape in [(3, 16, 8), (2, 16, 8), (5, 24, 8)]:
        x = torch.randn(shape)
        torch.manual_seed(3)
        got = jfn(x)
        torch.manual_seed(3)
        torch.testing.assert_close(got, f(x))
    assert ir.cache_stats(jfn).misses == 1


def test_a_relation_the_op_needs_is_guarded_and_eager_raises_when_it_fails():
    def f(x, w):
        return F.linear(x, w) + 1

    jfn = ir.jit(f, executors=["triton"], cache=SYMBOLIC)
    jfn(torch.randn(3, 8), torch.randn(4, 8))
    prologue = str(ir.last_prologue(jfn))
    assert "== 8" not in prologue and "== 4" not in prologue and "== 3" not in prologue
    guards = ir.explain(jfn, torch.randn(3, 8), torch.randn(4, 8)).guards
    assert any("== " in g and "x.shape[1]" in g and "w.shape[1]" in g for g in guards)
    with pytest.raises(RuntimeError) as ours:
        jfn(torch.randn(3, 8), torch.randn(4, 6))
    with pytest.raises(RuntimeError) as eager:
        f(torch.randn(3, 8), torch.randn(4, 6))
    assert str(ours.value) == str(eager.value)


def test_an_op_without_a_rule_specializes_and_says_so(caplog):
    def f(x, y):
        return torch.kron(x, y) * 2 + torch.softmax(x, -1).sum()

    jfn = ir.jit(f, executors=["triton"], cache=SYMBOLIC)
    with caplog.at_level(logging.INFO, logger="ir.recompiles"):
        for n in (3, 4, 4):
            x, y = torch.randn(n, 5), torch.randn(2, 2)
            torch.testing.assert_close(jfn(x, y), f(x, y))
    assert ir.cache_stats(jfn).misses == 2      # one entry per value of the pinned sizes
    records = [r.getMessage() for r in caplog.records
               if "no symbolic shape rule" in r.getMessage()]
    assert len(records) == 2
    assert records[0].startswith("f: torch.kron has no symbolic shape rule")
    assert "x.shape[0] = 3, x.shape[1] = 5, y.shape[0] = 2, y.shape[1] = 2" in records[0]
    found = ir.explain(jfn, x, y)
    assert {(s["of"], s["cause"]) for s in found.specialized} == {
        (size, "torch.kron " + NO_RULE) for size in
        ("x.shape[0]", "x.shape[1]", "y.shape[0]", "y.shape[1]")}
    assert f"x.shape[0] = 4 (i0): torch.kron {NO_RULE}" in str(found)


def test_a_rule_that_disagrees_with_torch_falls_back_to_specializing(monkeypatch, caplog):
    from ir.ops.registry import SHAPE_RULES
    monkeypatch.setitem(SHAPE_RULES, torch.cumsum, lambda x, dim: [x.shape[:-1]])

    def f(x):
        return torch.cumsum(x, -1) + 1

    jfn = ir.jit(f, executors=["triton"], cache=SYMBOLIC)
    with caplog.at_level(logging.WARNING, logger="ir.recompiles"):
        x = torch.randn(3, 4)
        torch.testing.assert_close(jfn(x), f(x))
    assert "the shape rule of torch.cumsum gave [(3,)] where torch gives [(3, 4)]" in caplog.text
    assert {s["cause"] for s in ir.explain(jfn, x).specialized} == {"torch.cumsum " + NO_RULE}


# ---- models: one entry for every (batch, sequence) size ------------------------------------------

C, HEADS, VOCAB, MAX_T = 16, 2, 11, 32
D = C // HEADS
torch.manual_seed(0)
EMBED = torch.randn(VOCAB, C)
W_QKV, W_OUT = torch.randn(3 * C, C) / 4, torch.randn(C, C) / 4
NORM_W, NORM_B = torch.rand(C) + 0.5, torch.randn(C) / 10
W_UP, W_DOWN = torch.randn(4 * C, C) / 4, torch.randn(C, 2 * C) / 4
_ANGLES = torch.arange(MAX_T)[:, None] * torch.exp(-math.log(100) * torch.arange(D // 2) / D)
COS, SIN = torch.cat([_ANGLES.cos()] * 2, -1), torch.cat([_ANGLES.sin()] * 2, -1)


def rope(x, cos, sin):
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def swiglu_slices(x):
    h = F.linear(x, W_UP)
    half = h.shape[-1] // 2
    return F.linear(F.silu(h[..., :half]) * h[..., half:], W_DOWN)


def swiglu_chunk(x):
    a, b = F.linear(x, W_UP).chunk(2, dim=-1)
    return F.linear(F.silu(a) * b, W_DOWN)


def block(idx, targets):
    """linear -> softmax -> layer_norm -> sdpa -> RoPE -> SwiGLU, with reductions and a loss."""
    B, T = idx.shape
    x = F.embedding(idx, EMBED)
    x = F.layer_norm(x, (C,), NORM_W, NORM_B)
    qkv = F.linear(x, W_QKV)
    q, k, v = qkv[..., :C], qkv[..., C:2 * C], qkv[..., 2 * C:]
    q, k, v = (t.view(B, T, HEADS, D).transpose(1, 2) for t in (q, k, v))
    cos, sin = COS[:T], SIN[:T]
    q, k = rope(q, cos, sin), rope(k, cos, sin)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    x = x + F.linear(y.transpose(1, 2).reshape(B, T, C), W_OUT)
    x = x + swiglu_slices(F.rms_norm(x, (C,), NORM_W))
    scores = torch.softmax(x @ x.transpose(-1, -2) / math.sqrt(C), dim=-1)
    x = x - x.mean(-1, keepdim=True) + (scores @ x) * x.var(1, keepdim=True)
    logits = F.linear(x, EMBED)
    loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
    return logits.log_softmax(-1), loss


@pytest.mark.parametrize("model", [block, swiglu_slices, swiglu_chunk])
def test_a_model_compiles_once_for_every_batch_and_sequence_size(model):
    jfn = ir.jit(model, executors=["triton"], cache=SYMBOLIC)
    for B, T in [(2, 16), (3, 32), (5, 24)]:
        if model is block:
            args = (torch.randint(0, VOCAB, (B, T)), torch.randint(0, VOCAB, (B, T)))
        else:
            args = (torch.randn(B, T, C),)
        got, want = jfn(*args), model(*args)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert (ir.cache_stats(jfn).misses, ir.cache_stats(jfn).hits) == (1, 2)
    assert triton_exec.last_kernels(jfn)
    # the channel sizes are pinned by `(C,)` in the norms (as eager requires); no batch or
    # sequence size is, and no op lacks a rule
    pinned = _pinned(jfn, *args)
    assert not [s for s in pinned if s["of"].split(".")[0] in ("idx", "targets", "x")], pinned
    assert not [s for s in pinned if s["cause"].endswith(NO_RULE)], pinned


def trainable(x, w_qkv, w_out, w_up, w_down, norm_w):
    """Attention with RoPE and a SwiGLU MLP whose weights are arguments that need grad."""
    B, T, _ = x.shape
    h = F.rms_norm(x, x.shape[-1:], norm_w)
    q, k, v = (t.view(B, T, HEADS, D).transpose(1, 2)
               for t in F.linear(h, w_qkv).chunk(3, dim=-1))
    q, k = rope(q, COS[:T], SIN[:T]), rope(k, COS[:T], SIN[:T])
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).flatten(2)
    x = x + F.linear(y, w_out)
    a, b = F.linear(F.layer_norm(x, x.shape[-1:]), w_up).chunk(2, dim=-1)
    return x + F.linear(F.gelu(a, approximate="tanh") * b, w_down)


def test_training_through_the_rules_compiles_once_with_eager_grads():
    gen = torch.Generator().manual_seed(1)
    weights = [torch.randn(shape, generator=gen) / 4 for shape in
               [(3 * C, C), (C, C), (4 * C, C), (C, 2 * C)]] + [torch.rand(C, generator=gen) + 0.5]
    jfn = ir.jit(trainable, executors=["triton"], cache=SYMBOLIC)
    for B, T in [(2, 16), (3, 32), (5, 24)]:
        x = torch.randn(B, T, C, generator=gen)
        ours = [t.clone().requires_grad_() for t in (x, *weights)]
        eager = [t.clone().requires_grad_() for t in (x, *weights)]
        out, expected = jfn(*ours), trainable(*eager)
        torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)
        grad = torch.randn(out.shape, generator=gen)
        for got, want in zip(torch.autograd.grad(out, ours, grad),
                             torch.autograd.grad(expected, eager, grad)):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert (ir.cache_stats(jfn).misses, ir.cache_stats(jfn).hits) == (1, 2)
    assert not [s for s in _pinned(jfn, *ours) if s["of"].startswith("x.")]
