"""Examples as plain PyTorch, run by the demo, the tests and the benchmarks: the seed's RoPE
(`rope` is the seed's `rope_one_entry`, the demo's embedded default) and a small LitGPT-style
`GPT` module."""
from __future__ import annotations

import dataclasses

import torch


def rope(x, cos, sin, n: int):
    """Rotates the first n features of the head dim of x [..., T, head] by cos/sin [T, n]."""
    xr = x[..., :n]
    x1, x2 = xr[..., : n // 2], xr[..., n // 2:]
    roped = xr * cos + torch.cat((-x2, x1), dim=-1) * sin
    return torch.cat((roped.to(x.dtype), x[..., n:]), dim=-1)


def rope_qkv(qkv, cos, sin, n_head: int, n_groups: int, hs: int, n: int):
    """RoPE of q and k sliced out of a fused qkv tensor [B, T, hs * (n_head + 2 * n_groups)]."""
    B, T, _ = qkv.shape
    q = qkv[..., : n_head * hs].reshape(B, T, n_head, hs).transpose(1, 2)
    k = qkv[..., n_head * hs: (n_head + n_groups) * hs].reshape(B, T, n_groups, hs).transpose(1, 2)
    return rope(q, cos, sin, n), rope(k, cos, sin, n)


def rope_inputs(B=2, H=4, T=16, hs=32, n=8, dtype=torch.float32, device="cpu", seed=0):
    """(x [B, H, T, hs], cos [T, n], sin [T, n], n), random with a fixed seed."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, H, T, hs, generator=g).to(dtype=dtype, device=device)
    cos = torch.randn(T, n, generator=g).to(dtype=dtype, device=device)
    sin = torch.randn(T, n, generator=g).to(dtype=dtype, device=device)
    return x, cos, sin, n


# ---- a small LitGPT-style GPT ----------------------------------------------------------------

@dataclasses.dataclass
class GPTConfig:
    """The sizes of `GPT` (LitGPT's names); the defaults are tiny, for tests through the Triton
    interpreter. `rotary_percentage` of each head's features are rotated (partial RoPE)."""
    vocab_size: int = 64
    block_size: int = 64            # the longest sequence (the RoPE cache's length)
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64
    intermediate_size: int = 128    # the SwiGLU MLP's hidden size
    rotary_percentage: float = 0.5
    norm_eps: float = 1e-5

    @property
    def head_size(self) -> int:
        return self.n_embd // self.n_head

    @property
    def rope_n_elem(self) -> int:
        return int(self.rotary_percentage * self.head_size)


class RMSNorm(torch.nn.Module):
    """LitGPT's RMSNorm: normalized in fp32, scaled by a learned weight."""

    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        norm_x = torch.mean(x * x, dim=-1, keepdim=True)
        return (x * torch.rsqrt(norm_x + self.eps)).to(dtype) * self.weight


def apply_rope(x, cos, sin):
    """LitGPT's RoPE of all of x's last dim (the rotated half's layout: GPT-NeoX's)."""
    half = x.size(-1) // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return (x * cos + rotated * sin).to(x.dtype)


def rope_cache(seq_len: int, n_elem: int, base: int = 10000):
    """(cos, sin), each [seq_len, n_elem]."""
    theta = 1.0 / base ** (torch.arange(0, n_elem, 2).float() / n_elem)
    angles = torch.outer(torch.arange(seq_len).float(), theta).repeat(1, 2)
    return torch.cos(angles), torch.sin(angles)


class CausalSelfAttention(torch.nn.Module):
    """A fused qkv linear, partial RoPE on q and k, causal scaled_dot_product_attention."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.qkv = torch.nn.Linear(config.n_embd, 3 * config.n_embd, bias=False)
        self.proj = torch.nn.Linear(config.n_embd, config.n_embd, bias=False)

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        n_head, hs, n = self.config.n_head, self.config.head_size, self.config.rope_n_elem
        q, k, v = self.qkv(x).split(C, dim=-1)
        q, k, v = (t.view(B, T, n_head, hs).transpose(1, 2) for t in (q, k, v))
        q = torch.cat((apply_rope(q[..., :n], cos, sin), q[..., n:]), dim=-1)
        k = torch.cat((apply_rope(k[..., :n], cos, sin), k[..., n:]), dim=-1)
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class SwiGLU(torch.nn.Module):
    """LitGPT's LLaMAMLP: silu(fc_1(x)) * fc_2(x), projected back."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.fc_1 = torch.nn.Linear(config.n_embd, config.intermediate_size, bias=False)
        self.fc_2 = torch.nn.Linear(config.n_embd, config.intermediate_size, bias=False)
        self.proj = torch.nn.Linear(config.intermediate_size, config.n_embd, bias=False)

    def forward(self, x):
        return self.proj(torch.nn.functional.silu(self.fc_1(x)) * self.fc_2(x))


class Block(torch.nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.norm_1 = RMSNorm(config.n_embd, config.norm_eps)
        self.attn = CausalSelfAttention(config)
        self.norm_2 = RMSNorm(config.n_embd, config.norm_eps)
        self.mlp = SwiGLU(config)

    def forward(self, x, cos, sin):
        x = x + self.attn(self.norm_1(x), cos, sin)
        return x + self.mlp(self.norm_2(x))


class GPT(torch.nn.Module):
    """A small LitGPT-style decoder: token embedding, pre-norm blocks (RMSNorm, attention with a
    fused qkv linear and partial RoPE, SwiGLU MLP, residuals), a final norm and the LM head.
    `forward(idx)` maps token ids [B, T] to logits [B, T, vocab_size]."""

    def __init__(self, config: GPTConfig | None = None):
        super().__init__()
        self.config = config = config or GPTConfig()
        self.wte = torch.nn.Embedding(config.vocab_size, config.n_embd)
        self.blocks = torch.nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = RMSNorm(config.n_embd, config.norm_eps)
        self.lm_head = torch.nn.Linear(config.n_embd, config.vocab_size, bias=False)
        cos, sin = rope_cache(config.block_size, config.rope_n_elem)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, idx):
        T = idx.size(1)
        cos, sin = self.cos[:T], self.sin[:T]
        x = self.wte(idx)
        for block in self.blocks:
            x = block(x, cos, sin)
        return self.lm_head(self.ln_f(x))


def gpt_loss(logits, targets):
    """Next-token cross entropy of logits [B, T, V] against targets [B, T]."""
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())


def gpt_batch(config: GPTConfig, B: int, T: int, device="cpu", seed=0):
    """(idx, targets): random token ids [B, T] with a fixed seed."""
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, config.vocab_size, (B, T + 1), generator=g).to(device)
    return tokens[:, :-1], tokens[:, 1:]
