"""Interleaved RoPE (GPT-J / Meta-Llama layout: rotate the pairs (x[2i], x[2i+1])) fuses into one
kernel per q/k, forward and backward, whose loads read pairs as contiguous vectors (>= 8 bytes in
the sm_90 PTX) and split them in registers (pair tiling, `triton_exec.codegen.Pairs`); results and
gradients match eager in fp32 and bf16, in both cache modes, over shapes and layouts."""
import pytest
import torch
from hypothesis import given, note, settings
from hypothesis import strategies as st

import ir
import triton_exec
from programs import TOLERANCES


def rope_pairs(x, cos, sin):
    """The complex-multiply form: cos and sin are [T, D/2], one angle per pair."""
    xp = x.unflatten(-1, (-1, 2))
    x0, x1 = xp[..., 0], xp[..., 1]
    return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2)


def rope_every_two(x, cos, sin):
    """GPT-J's rotate_every_two: cos and sin are [T, D], each angle repeated for its pair."""
    x1, x2 = x[..., ::2], x[..., 1::2]
    rotated = torch.stack((-x2, x1), dim=-1).flatten(-2)
    return x * cos + rotated * sin


def rope_qk(rope):
    def qk(q, k, cos, sin):
        return rope(q, cos, sin), rope(k, cos, sin)
    return qk


FORMS = {"pairs": (rope_pairs, 2), "every_two": (rope_every_two, 1)}   # (fn, D // angles)


def inputs(form, b, h, hk, t, d, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, t, d, generator=g).to(dtype)
    k = torch.randn(b, hk, t, d, generator=g).to(dtype)
    angles = torch.randn(t, d // 2, generator=g)
    if FORMS[form][1] == 1:
        angles = angles.repeat_interleave(2, dim=-1)
    return q, k, angles.cos().to(dtype), angles.sin().to(dtype)


def close(a, b, dtype, scale=1.0):
    rtol, atol = TOLERANCES[dtype]
    torch.testing.assert_close(a, b, rtol=rtol, atol=atol * scale)


@pytest.mark.parametrize("mode", ["constant values", "symbolic values"])
@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize("dtype,min_load", [(torch.float32, 16), (torch.bfloat16, 8)])
def test_one_kernel_per_q_and_k_with_vector_loads(form, dtype, min_load, mode):
    q, k, cos, sin = inputs(form, 2, 4, 2, 16, 32, dtype)
    fn = rope_qk(FORMS[form][0])
    jfn = ir.jit(fn, executors=["triton"], cache=mode)
    for got, want in zip(jfn(q, k, cos, sin), fn(q, k, cos, sin)):
        close(got.float(), want.float(), dtype)
    records = triton_exec.last_kernels(jfn)
    assert len(records) == 1             # q and k in one kernel (k's heads nest in q's)
    left = ir.explain(jfn, q, k, cos, sin).as_dict()["left_to_torch"]
    assert all("view" in str(r) for r in left), left      # the final flatten: a free view
    for record in records:
        widths = record.access_widths()
        assert min(widths["ld"]) >= min_load, (widths, record.source)
        assert set(widths["st"]) == {16}
        assert "tl.split" in record.source and "tl.join" in record.source
        # the record says what the PTX does, access by access
        assert record.vector_width == record.analysis_width


@pytest.mark.parametrize("form", sorted(FORMS))
def test_backward_is_one_kernel_with_vector_loads(form):
    q, _, cos, sin = inputs(form, 2, 4, 2, 16, 32, torch.float32)
    rope = FORMS[form][0]
    jfn = ir.jit(rope, executors=["triton"])
    x = q.clone().requires_grad_()
    out = jfn(x, cos, sin)
    g = torch.randn_like(out)
    (got,) = torch.autograd.grad(out, x, g)
    x2 = q.clone().requires_grad_()
    (want,) = torch.autograd.grad(rope(x2, cos, sin), x2, g)
    torch.testing.assert_close(got, want)
    backward = [r for r in triton_exec.last_kernels(jfn) if r.direction == "backward"]
    assert len(backward) == 1
    widths = backward[0].access_widths()
    assert min(widths["ld"]) == 16 and set(widths["st"]) == {16}, backward[0].source


@st.composite
def rope_cases(draw):
    form = draw(st.sampled_from(sorted(FORMS)))
    dtype = draw(st.sampled_from([torch.float32, torch.bfloat16]))
    b, h, t = draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(1, 9))
    d = 2 * draw(st.integers(1, 20))
    layout = draw(st.sampled_from(["contiguous", "qkv slice", "transposed"]))
    return form, dtype, (b, h, t, d), layout, draw(st.integers(0, 2 ** 16))


def laid_out(q, layout):
    """q itself, or the same values as a view of a wider buffer (a fused qkv's q part, or the
    [B, T, H, D] layout transposed to [B, H, T, D])."""
    if layout == "qkv slice":
        wide = torch.zeros(q.shape[:-1] + (3 * q.shape[-1],), dtype=q.dtype)
        view = wide[..., q.shape[-1]: 2 * q.shape[-1]]
    elif layout == "transposed":
        view = torch.zeros(q.shape[0], q.shape[2], q.shape[1], q.shape[3],
                           dtype=q.dtype).transpose(1, 2)
    else:
        return q.clone()
    return view.copy_(q)


@settings(max_examples=12)
@given(case=rope_cases())
def test_rope_matches_eager_forward_and_grads(case):
    form, dtype, (b, h, t, d), layout, seed = case
    rope = FORMS[form][0]
    q, _, cos, sin = inputs(form, b, h, 1, t, d, dtype, seed)
    q = laid_out(q, layout)
    note(f"{form} {dtype} {tuple(q.shape)} stride={q.stride()}")
    for mode in ("constant values", "symbolic values"):
        jfn = ir.jit(rope, executors=["triton"], cache=mode)
        x = q.detach().requires_grad_()
        out = jfn(x, cos, sin)
        x2 = q.detach().requires_grad_()
        want = rope(x2, cos, sin)
        close(out.float(), want.float(), dtype)
        g = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed)).to(dtype)
        (got_grad,) = torch.autograd.grad(out, x, g)
        (want_grad,) = torch.autograd.grad(want, x2, g)
        close(got_grad.float(), want_grad.float(), dtype, scale=4.0)
        assert sum(r.direction == "forward" for r in triton_exec.last_kernels(jfn)) == 1
