"""The seed's RoPE, as plain PyTorch functions: the demo's embedded default, also run by the tests
and the benchmarks. `rope` is the seed's `rope_one_entry`."""
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
