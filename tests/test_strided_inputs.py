"""Kernels read the tensors torch makes inside a trace where torch lays them out, and write what a
torch call reads in the layout it reads, forward and backward: no torch copy (`clone`, `copy_`,
`contiguous`) runs. Generated programs (hypothesis) put between torch calls (linear, attention,
a channels-last conv, unfold) fused work on their results: a torch call's result laid out
otherwise than contiguous (SDPA's output and its q/k/v gradients laid out [B, T, H, D] under a
[B, H, T, D] shape, a channels-last conv's output and input gradient, unfold's overlapping
windows) read by a kernel (`triton_exec.strided`: a kernel lowered for that layout, read through
its strides, keyed by its guards in the launcher), and a kernel's result permuted and reshaped
into a linear (the backward of `linear(h).view(b, t, h, d).transpose(1, 2)`: the gradient's
reshape copies, fused into the kernel that computes it). Values and gradients equal eager's;
the copies are counted with a dispatch mode, as `perf/decoder_layer.py` counts its kernels.
Both cache modes. Each strided variant's access widths are what its compiled kernel does
(`test_record_widths`).
"""
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, note, settings
from hypothesis import strategies as st

import ir
import triton_exec
from perf_modules import perf_module
from programs import assert_close
from test_record_widths import check_widths

COPIES = ("clone", "copy_", "contiguous", "_to_copy")


# fused work on a [..., D] tensor (D even): what a model puts between two torch calls
def _rotate(t, c):
    half = t.shape[-1] // 2
    return t * c + torch.cat((-t[..., half:], t[..., :half]), dim=-1) * c.flip(-1)


FUSED = {
    "scale": lambda t, c: t * c,
    "silu": lambda t, c: F.silu(t) + c,
    "rotate": _rotate,
    "norm": lambda t, c: t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6) * c,
    "softmax": lambda t, c: torch.softmax(t * c, dim=-1),
}


def attention(x, w_q, w_kv, w_o, c, ops, heads: int):
    """Projections viewed as heads ([B, H, T, D], a transpose), fused work on q and k, SDPA
    (its output and gradients laid out [B, T, H, D]), fused work on its output, back to
    [B, T, H * D] (a copying reshape) into a linear."""
    b, t, _ = x.shape
    q = F.linear(x, w_q).view(b, t, heads, -1).transpose(1, 2)
    k, v = (F.linear(x, w_kv).view(b, t, heads, -1).transpose(1, 2) for _ in range(2))
    for op in ops:
        q, k = FUSED[op](q, c), FUSED[op](k, c)
    a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    for op in ops:
        a = FUSED[op](a, c)
    return F.linear(a.transpose(1, 2).reshape(b, t, -1), w_o)


def grouped(x, w_q, w_kv, w_o, c, ops, heads: int):
    """Grouped-query attention: k and v of half the heads (or one), repeated as transformers'
    `repeat_kv` does; their gradients are summed over the repeats (a column reduction) and
    permuted back to [B, T, H, D] for their linears."""
    b, t, d = x.shape
    kv = max(heads // 2, 1)
    q = F.linear(x, w_q).view(b, t, heads, -1).transpose(1, 2)
    k, v = (F.linear(x, w).view(b, t, kv, -1).transpose(1, 2)
            for w in (w_kv[:kv * (d // heads)], w_kv[-kv * (d // heads):]))
    for op in ops:
        k = FUSED[op](k, c)
    k, v = (u[:, :, None].expand(b, kv, heads // kv, t, d // heads).reshape(b, heads, t, -1)
            for u in (k, v))
    a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return F.linear(a.transpose(1, 2).reshape(b, t, -1), w_o)


def conv(x, w_q, w_kv, w_o, c, ops, heads: int):
    """A channels-last conv (its output and its input's gradient laid out NHWC under an NCHW
    shape) with fused work after it, then a linear over the last dim."""
    b, t, d = x.shape
    image = F.linear(x, w_q).view(b, t, -1, heads).permute(0, 3, 1, 2)    # channels last
    y = F.conv2d(image, w_kv.view(heads, heads, -1)[..., :9].reshape(heads, heads, 3, 3),
                 padding=1)
    for op in ops:
        y = FUSED[op](y, c)
    return F.linear(y.transpose(1, 2).reshape(b, t, -1), w_o)


def windows(x, w_q, w_kv, w_o, c, ops, heads: int):
    """unfold's overlapping windows of a linear's result (strides that overlap) with fused work
    on them, summed over the windows."""
    y = F.linear(x, w_q + w_kv).unfold(1, 2, 1)     # [B, T - 1, H * D, 2]
    y = y.transpose(-1, -2)                      # [B, T - 1, 2, H * D]
    for op in ops:
        y = FUSED[op](y, c.flatten()[:y.shape[-1]])
    return F.linear(y.sum(2), w_o)


PROGRAMS = {"attention": attention, "conv": conv, "grouped": grouped, "windows": windows}
MOVEMENT = {"copy", "permute", "reshape", "broadcast_in_dim", "slice"}


@st.composite
def strided_programs(draw, kind):
    heads = draw(st.sampled_from([1, 2]))
    head = draw(st.sampled_from([4, 8, 16]))
    b, t = draw(st.integers(1, 2)), draw(st.sampled_from([3, 4, 8]))
    ops = draw(st.lists(st.sampled_from(sorted(FUSED)), min_size=1, max_size=2))
    return kind, ops, b, t, heads, head


def _inputs(kind, b, t, heads, head, seed):
    g = torch.Generator().manual_seed(seed)
    d = heads * head

    def rand(*shape):
        return (torch.randn(*shape, generator=g) / shape[-1] ** 0.5).requires_grad_()
    c = torch.rand(b, 1, t, head, generator=g) + 0.5
    if kind == "conv":
        c = torch.rand(1, heads, 1, head, generator=g) + 0.5
    return [rand(b, t, d), rand(d, d), rand(d, d), rand(d, d), c]


def _step(fn, inputs, ops, heads, g):
    leaves = [a.detach().requires_grad_(a.requires_grad) for a in inputs]
    out = fn(*leaves, ops, heads)
    grads = torch.autograd.grad(out, [a for a in leaves if a.requires_grad], g)
    return [out.detach(), *grads]


@pytest.mark.parametrize("kind", sorted(PROGRAMS))
@settings(max_examples=4)
@given(data=st.data(), seed=st.integers(0, 2 ** 16))
def test_kernels_read_torch_layouts_without_copies(kind, data, seed):
    kind, ops, b, t, heads, head = data.draw(strided_programs(kind))
    mode = data.draw(st.sampled_from(["constant values", "symbolic values"]))
    note(f"{kind}: ops {ops}, B={b} T={t} H={heads} D={head}, {mode}")
    fn = PROGRAMS[kind]
    inputs = _inputs(kind, b, t, heads, head, seed)
    g = torch.randn(b, t if kind != "windows" else t - 1, heads * head,
                    generator=torch.Generator().manual_seed(seed + 1))
    expected = _step(fn, inputs, ops, heads, g)
    jfn = ir.jit(fn, executors=["triton"], cache=mode)
    assert_close(_step(jfn, inputs, ops, heads, g), expected)        # compiles
    counting = perf_module("decoder_layer")
    copies = counting.AtenOps(lambda name: name in COPIES)
    with copies, counting.launches_unseen():       # the interpreter's own copies uncounted
        got = _step(jfn, inputs, ops, heads, g)
    assert_close(got, expected)
    assert not copies.ops, f"torch copies ran: {dict(copies.ops)}"


def test_strided_variants_keep_honest_widths():
    """The SDPA's gradients of the attention program are read by strided variants; each access
    width the analysis states is what the compiled (sm_90) kernel does."""
    inputs = _inputs("attention", 2, 8, 2, 16, 0)
    jfn = ir.jit(attention, executors=["triton"])
    g = torch.randn(2, 8, 32)
    _step(jfn, inputs, ["rotate"], 2, g)
    variants = [v for k in triton_exec.last_kernels(jfn) for v in k.variants]
    assert variants, "no kernel read a torch-made tensor through its strides"
    for v in variants:
        check_widths(v)


@pytest.mark.parametrize("heads", [4, 8])
def test_permuted_gradient_stored_by_its_producer(heads):
    """The repeat sums of k's and v's gradients (a column reduction, with k's RoPE-like work)
    write the gradient permuted back to [B, T, H, D] for the linear: no kernel only copies."""
    inputs = _inputs("grouped", 2, 8, heads, 8, 0)
    jfn = ir.jit(grouped, executors=["triton"])
    g = torch.randn(2, 8, heads * 8)
    assert_close(_step(jfn, inputs, ["rotate"], heads, g),
                 _step(grouped, inputs, ["rotate"], heads, g))
    (traces,) = ir.last_backward_traces(jfn).values()
    bodies = [[b.prim.name for b in e.params["body"]] for e in traces[-1].eqns
              if e.prim.kind == "fusion"]
    assert any("copy" in names and "sum" in names for names in bodies), bodies
    assert not [names for names in bodies if set(names) <= MOVEMENT], bodies
