"""softmax, log_softmax and logsumexp over one dim that is not the innermost (issue 28: timm's
selective-kernel `attn.softmax(dim=1)`, segmentation heads over channels): random shapes of 2 to
4 dims, the reduced dim drawn among the outer ones, fp32/fp16/bf16, laid-out inputs, both cache
modes, against eager within the README's reduction tolerance, forward and gradient; each is one
kernel forward and one backward (a column plan that stores the result in a last loop over the
rows), its output new contiguous memory with eager's shape, strides and dtype; all -inf, +inf
and NaN slices and empty dims as eager; a reduced dim longer than a row block is walked by the
loops of the same kernel."""
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, note, settings
from hypothesis import strategies as st

import ir
import triton_exec
from semantics import laid_out
from test_reductions import EDGE_ROWS, assert_close_as_contract, torch_reductions

OPS = {
    "softmax": lambda x, dim, keep: torch.softmax(x, dim),
    "log_softmax": lambda x, dim, keep: F.log_softmax(x, dim=dim),
    "logsumexp": lambda x, dim, keep: torch.logsumexp(x, dim, keepdim=keep),
}
FLOATS = [torch.float32, torch.float16, torch.bfloat16]
MODES = ["constant values", "symbolic values"]


def program(op, dim, keep):
    def fn(x):
        return OPS[op](x, dim, keep)
    return fn


def fused_as_one(x, dim, mode) -> bool:
    """Whether the op is claimed as one kernel: a column plan walks the dims after `dim` flat,
    which it refuses where several are of runtime size (symbolic mode)."""
    return mode == "constant values" or x.ndim - dim - 1 == 1


@st.composite
def outer_cases(draw, max_size=300):
    ndim = draw(st.integers(2, 4))
    budget = 2000                   # elements at most: the interpreter runs every lane
    shape = []
    for _ in range(ndim):
        size = draw(st.one_of(st.integers(1, 8), st.integers(9, max_size)))
        size = max(1, min(size, budget // max(1, math.prod(shape)) // 2 ** (ndim - len(shape) - 1)))
        shape.append(size)
    dtype = draw(st.sampled_from(FLOATS))
    x = draw(laid_out(torch.randn(shape, generator=torch.Generator().manual_seed(
        draw(st.integers(0, 2 ** 16)))).to(dtype)))
    return (draw(st.sampled_from(sorted(OPS))), draw(st.integers(0, ndim - 2)),
            draw(st.booleans()), x, draw(st.sampled_from(MODES)))


def counts(jf) -> tuple:
    kernels = triton_exec.last_kernels(jf)
    return (sum(k.direction == "forward" for k in kernels),
            sum(k.direction == "backward" for k in kernels))


@settings(max_examples=30)
@given(outer_cases())
def test_random_outer_dim_softmax_family_matches_eager(case):
    op, dim, keep, x, mode = case
    note(f"{op} dim={dim} keep={keep} {x.dtype} {tuple(x.shape)} strides {x.stride()} {mode}")
    fn = program(op, dim, keep)
    jf = ir.jit(fn, executors=["triton"], cache=mode)
    got, expected = jf(x), fn(x)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    assert got.stride() == expected.stride()
    assert_close_as_contract(got, expected, x.shape[dim])
    if fused_as_one(x, dim, mode):
        assert counts(jf) == (1, 0) and torch_reductions(jf) == []


@settings(max_examples=20)
@given(outer_cases(max_size=120))
def test_random_outer_dim_softmax_family_gradients_match_eager(case):
    op, dim, keep, x, mode = case
    note(f"{op} dim={dim} keep={keep} {x.dtype} {tuple(x.shape)} {mode}")
    fn = program(op, dim, keep)
    jf = ir.jit(fn, executors=["triton"], cache=mode)
    leaf, ref = x.detach().clone().requires_grad_(), x.detach().clone().requires_grad_()
    out, expected = jf(leaf), fn(ref)
    g = torch.randn(expected.shape, generator=torch.Generator().manual_seed(1)).to(x.dtype)
    (gx,), (ge,) = torch.autograd.grad(out, leaf, g), torch.autograd.grad(expected, ref, g)
    assert out.stride() == expected.stride() and gx.stride() == ge.stride()
    assert_close_as_contract(out.detach(), expected.detach(), x.shape[dim])
    # a gradient sums the slice once more: twice the forward's tolerance
    assert_close_as_contract(gx / 2, ge / 2, 4 * x.shape[dim])
    if fused_as_one(x, dim, mode):
        assert counts(jf) == (1, 1) and torch_reductions(jf) == []


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("op", sorted(OPS))
def test_channel_softmax_is_one_kernel_each_way(op, mode):
    """[B, C, T] over C (timm's selective-kernel attention): 4 + 2 kernels before."""
    x = torch.randn(4, 6, 33, requires_grad=True)
    fn = program(op, 1, False)
    jf = ir.jit(fn, executors=["triton"], cache=mode)
    out = jf(x)
    (gx,), (ge,) = (torch.autograd.grad(y, x, torch.ones_like(y)) for y in (out, fn(x)))
    assert counts(jf) == (1, 1)
    assert out.stride() == fn(x).stride()
    assert_close_as_contract(out, fn(x), 6)
    assert_close_as_contract(gx, ge, 6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("op", sorted(OPS))
def test_edge_slices_as_eager(op, dtype):
    """Each edge row of test_reductions along dim 1 of a [6, 5, 3] tensor (all -inf, +inf, huge
    logits, NaN, ...)."""
    rows = torch.tensor(list(EDGE_ROWS.values())).clamp(torch.finfo(dtype).min,
                                                         torch.finfo(dtype).max)
    x = rows[:, :, None].expand(-1, -1, 3).contiguous().to(dtype)
    x[:, :, 1] = x[:, :, 1].flip(1)
    fn = program(op, 1, False)
    jf = ir.jit(fn, executors=["triton"])
    got, expected = jf(x), fn(x)
    assert counts(jf) == (1, 0)
    assert torch.equal(got.isnan(), expected.isnan()), (got, expected)
    assert torch.equal(got.isinf() & (got > 0), expected.isinf() & (expected > 0))
    assert torch.equal(got.isinf() & (got < 0), expected.isinf() & (expected < 0))
    finite = expected.isfinite()
    assert_close_as_contract(got[finite], expected[finite], 5)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", [(3, 0, 4), (0, 5, 4), (3, 5, 0), (3, 0)])
def test_empty_dims_as_eager(shape, mode):
    x = torch.randn(shape)
    for op in sorted(OPS):
        fn = program(op, 1, False)
        got, expected = ir.jit(fn, executors=["triton"], cache=mode)(x), fn(x)
        assert got.shape == expected.shape and got.dtype == expected.dtype
        assert got.stride() == expected.stride()
        torch.testing.assert_close(got, expected, equal_nan=True)


@pytest.mark.parametrize("dtype, mode", [(torch.float32, "symbolic values"),
                                         (torch.bfloat16, "constant values")])
def test_a_long_reduced_dim_is_looped_in_one_kernel(dtype, mode):
    x = torch.randn(2, 16385 + 1000, 5).to(dtype)
    x[1, 17000, 3] = math.inf
    for op in sorted(OPS):
        fn = program(op, 1, False)
        jf = ir.jit(fn, executors=["triton"], cache=mode)
        got = jf(x)
        assert counts(jf) == (1, 0) and "for row_start" in triton_exec.last_kernels(jf)[0].source
        assert_close_as_contract(got, fn(x), x.shape[1])


def test_accesses_have_their_proven_widths():
    """Loads and stores of the [ROWS, COLS] tiles along the kept columns at the widths the
    analysis proves, as the sm_90 compile does them (the per-column values kept for the
    backward, [1, COLS] tiles of fewer elements than the threads' vectors, are left out)."""
    x = torch.randn(2, 200, 64, requires_grad=True)
    jf = ir.jit(program("softmax", 1, False), executors=["triton"])
    torch.autograd.grad(jf(x), x, torch.ones(2, 200, 64))
    for record in triton_exec.last_kernels(jf):
        lowered = record.lowered
        per_column = {f" {out.name} " for k, out in enumerate(lowered.outputs)
                      if tuple(lowered.output_shape(k)) != tuple(x.shape)}
        compiled, proven = ({label: w for label, w in widths.items()
                             if not any(name in label for name in per_column)}
                            for widths in (record.vector_width, record.analysis_width))
        assert compiled == proven and set(proven.values()) == {4}, record.source
