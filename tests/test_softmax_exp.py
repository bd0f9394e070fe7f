"""The softmax family's exp(x - max), the prim `softmax_exp`: in the kernels of softmax,
log_softmax, logsumexp and cross_entropy (forward and gradient) it is the GPU's exp2 instruction
of (x - max) * log2(e) (`kernel_math.exp2`), where a `torch.exp` the program writes stays
libdevice's. With the instruction at its error bound (the interpreter's exp2 moved 2 ulps either
way) the results stay within the reductions' tolerance of eager's (README: Numerical contract),
on rows whose values spread far (x - max down to -100, where the terms flush to 0), forward and
gradient."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, note, settings
from hypothesis import strategies as st

import ir
import triton_exec
from triton_exec import kernel_math
from test_reductions import assert_close_as_contract

FAMILY = {
    "softmax": lambda x, t: torch.softmax(x, -1),
    "log_softmax": lambda x, t: torch.log_softmax(x, -1),
    "logsumexp": lambda x, t: torch.logsumexp(x, -1),
    "cross_entropy": lambda x, t: F.cross_entropy(x, t),
}


def kernel_sources(fn, x, t) -> list[str]:
    jf = ir.jit(fn, executors=["triton"])
    leaf = x.detach().clone().requires_grad_()
    out = jf(leaf, t)
    torch.autograd.grad(out, leaf, torch.ones_like(out))
    return [r.source for r in triton_exec.last_kernels(jf)], ir.last_traces(jf)[0]


@pytest.mark.parametrize("name", sorted(FAMILY))
def test_the_family_computes_its_terms_with_exp2(name):
    x, t = torch.randn(4, 50), torch.randint(0, 50, (4,))
    sources, trace = kernel_sources(FAMILY[name], x, t)
    assert "prims.softmax_exp(" in str(trace)
    with_exp = [s for s in sources if "libdevice.exp" in s]
    assert with_exp and all("libdevice.exp2(" in s and "libdevice.exp(" not in s
                            for s in with_exp), sources


def test_an_exp_the_program_writes_stays_libdevices():
    def handwritten(x, t):
        return torch.exp(x - x.amax(-1, keepdim=True)).sum(-1)
    sources, trace = kernel_sources(handwritten, torch.randn(4, 50), None)
    assert "softmax_exp" not in str(trace)
    assert any("libdevice.exp(" in s for s in sources) and not any("exp2" in s for s in sources)


def test_fp64_keeps_the_exact_exp():
    sources, trace = kernel_sources(FAMILY["softmax"], torch.randn(4, 50, dtype=torch.float64),
                                    None)
    assert "softmax_exp" not in str(trace)


def exp2_two_ulps_off(direction: str):
    """`kernel_math.exp2` under the interpreter at the instruction's error bound: a finite
    nonzero result moved 2 ulps up, down, or ("mixed") up where the argument's fp32 bits are
    even and down where odd (errors that do not cancel in a ratio); flushed to 0 below 2^-126."""
    def moved(a):
        exact = np.exp2(a)
        if direction == "mixed":
            towards = np.where(a.view(np.int32) % 2 == 0, np.float32(np.inf), np.float32(-np.inf))
        else:
            towards = np.float32(np.inf if direction == "up" else -np.inf)
        off = np.nextafter(np.nextafter(exact, towards), towards)
        kept = np.where(np.isfinite(exact) & (exact != 0), off, exact)
        return np.where(np.abs(kept) < np.finfo(np.float32).tiny, np.float32(0), kept)
    return kernel_math._instruction("exp2", "", moved)


@st.composite
def spread_rows(draw):
    n, c = draw(st.integers(1, 5)), draw(st.one_of(st.integers(1, 40), st.integers(41, 3000)))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2 ** 16)))
    x = torch.randn(n, c, generator=g) * draw(st.sampled_from([1.0, 8.0, 30.0]))
    far = torch.rand(n, c, generator=g) < draw(st.sampled_from([0.0, 0.2]))
    x = torch.where(far, x.amax(-1, keepdim=True) - 100 * torch.rand(n, c, generator=g), x)
    return (x.to(draw(st.sampled_from([torch.float32, torch.bfloat16, torch.float16]))),
            torch.randint(0, c, (n,), generator=g))


@settings(max_examples=16, deadline=None)
@given(name=st.sampled_from(sorted(FAMILY)), case=spread_rows(),
       direction=st.sampled_from(["up", "down", "mixed"]),
       mode=st.sampled_from(["constant values", "symbolic values"]))
def test_within_the_reduction_tolerance_with_exp2_at_its_error_bound(name, case, direction,
                                                                       mode):
    x, t = case
    note(f"{name} {x.dtype} {tuple(x.shape)} exp2 towards {direction} {mode}")
    fn = FAMILY[name]
    leaf, ref = x.detach().clone().requires_grad_(), x.detach().clone().requires_grad_()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(kernel_math, "exp2", exp2_two_ulps_off(direction))
        jf = ir.jit(fn, executors=["triton"], cache=mode)
        out, expected = jf(leaf, t), fn(ref, t)
        g = torch.randn(expected.shape, generator=torch.Generator().manual_seed(1)).to(x.dtype)
        (gx,), (ge,) = torch.autograd.grad(out, leaf, g), torch.autograd.grad(expected, ref, g)
    assert_close_as_contract(out.detach(), expected.detach(), x.shape[-1])
    # a gradient sums the row once more: twice the forward's tolerance
    assert_close_as_contract(gx / 2, ge / 2, 4 * x.shape[-1])
