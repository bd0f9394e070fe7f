"""A row reduction whose result is read through a permute that moves its rows onto the columns of
a value of the row's shape (found in timm's ConvNeXt: LayerNorm2d's backward, `permute(0, 3, 1,
2)` of the normalized NHWC gradient times the layer scale, at C == H == W). The row plan computes
such a value at the tile's columns, so the reduction would be asked for rows that vary along the
columns: it gave wrong values (forward: `softmax(x, -1).permute(0, 2, 1) * g` on a square x;
backward: every gradient before the norm). Random programs of square dims (the permuted shape
equals the row's, so the shape checks pass): a reduction, a permute, elementwise work; values
and gradients equal eager's."""
import itertools

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, note, settings
from hypothesis import strategies as st

import ir
import triton_exec
from test_reductions import assert_close_as_contract

REDUCTIONS = {
    "softmax": lambda x: torch.softmax(x, -1),
    "layer_norm": lambda x: F.layer_norm(x, x.shape[-1:]),
    "centered": lambda x: x - x.mean(-1, keepdim=True),
    "amax": lambda x: x.amax(-1, keepdim=True) * x,
}


def program(reduction, perm):
    def fn(x, g, s):
        return REDUCTIONS[reduction](x).permute(perm) * g + s
    return fn


@st.composite
def cases(draw):
    rank = draw(st.sampled_from([3, 4]))
    n = draw(st.sampled_from([4, 5, 8] if rank == 3 else [4, 5]))
    perm = draw(st.sampled_from([p for p in itertools.permutations(range(rank))
                                 if p[-1] != rank - 1]))
    shape = (n,) * rank
    seed = draw(st.integers(0, 2 ** 16))
    return draw(st.sampled_from(sorted(REDUCTIONS))), perm, shape, seed


@settings(max_examples=12)
@given(cases())
def test_reduction_read_through_a_permute_matches_eager(case):
    reduction, perm, shape, seed = case
    note(f"{reduction} permute{perm} {shape}")
    gen = torch.Generator().manual_seed(seed)
    x, s = torch.randn(shape, generator=gen), torch.randn(shape, generator=gen)
    g = torch.randn(shape[-1], generator=gen)
    fn = program(reduction, perm)
    leaves = [t.clone().requires_grad_() for t in (x, g, s)]
    refs = [t.clone().requires_grad_() for t in (x, g, s)]
    jf = ir.jit(fn, executors=["triton"])
    out, expected = jf(*leaves), fn(*refs)
    assert_close_as_contract(out.detach(), expected.detach(), shape[-1])
    go = torch.randn(shape, generator=gen)
    for a, b in zip(torch.autograd.grad(out, leaves, go), torch.autograd.grad(expected, refs, go)):
        assert_close_as_contract(a / 2, b / 2, 4 * shape[-1])
    assert triton_exec.last_kernels(jf)


@pytest.mark.parametrize("size", [8, 6])
def test_layer_norm_2d_after_a_permuted_layer_scale_has_eager_gradients(size):
    """ConvNeXt's block tail (`linear(...).permute(0, 3, 1, 2) * gamma + shortcut`) then timm's
    LayerNorm2d and a strided conv, as in its stage 1 downsample: one whole-trace backward."""
    def fn(s, w2, gamma, w, b, cw):
        y = F.linear(s.permute(0, 2, 3, 1), w2).permute(0, 3, 1, 2) * gamma.reshape(1, -1, 1, 1) + s
        z = F.layer_norm(y.permute(0, 2, 3, 1), (size,), w, b).permute(0, 3, 1, 2)
        return F.conv2d(z, cw, stride=2)

    gen = torch.Generator().manual_seed(0)
    shapes = [(2, size, size, size), (size, size), (size,), (size,), (size,), (size, size, 2, 2)]
    leaves = [torch.randn(s, generator=gen).requires_grad_() for s in shapes]
    refs = [t.detach().clone().requires_grad_() for t in leaves]
    jf = ir.jit(fn, executors=["triton"])
    out, expected = jf(*leaves), fn(*refs)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)
    go = torch.randn(expected.shape, generator=gen)
    for a, b in zip(torch.autograd.grad(out, leaves, go), torch.autograd.grad(expected, refs, go)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
