"""The seed's RoPE functions, shared by the tests."""
import torch


def rope(x, cos, sin, n: int):
    """rope_one_entry of the seed: rotate the first n features of the head dim."""
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
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, H, T, hs, generator=g).to(dtype=dtype, device=device)
    cos = torch.randn(T, n, generator=g).to(dtype=dtype, device=device)
    sin = torch.randn(T, n, generator=g).to(dtype=dtype, device=device)
    return x, cos, sin, n
