"""An int argument that a view, a reshape, an expand or a factory makes a tensor's size, called
with 0 or 1 in symbolic mode: that size is specialized (guarded) as an input tensor's size of 0 or
1 is, since broadcasting and the kernels' indexing depend on it; another value compiles another
entry. Random programs of such views feeding broadcasts and row reductions (a per-head RMSNorm,
as attention code writes `x.view(b, t, heads, -1)`), values and gradients against eager."""
import torch
from hypothesis import given, note, settings
from hypothesis import strategies as st

import ir
import triton_exec  # noqa: F401  (registers the "triton" executor)

TAILS = {
    "norm": lambda y, w: y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + 1e-6) * w,
    "softmax": lambda y, w: torch.softmax(y * w, dim=-1),
    "scale": lambda y, w: y * w + 1,
}
VIEWS = {
    "view": lambda x, n: x.view(x.shape[0], x.shape[1], n, -1),
    "reshape": lambda x, n: x.reshape(x.shape[0], -1, n, x.shape[-1] // n).transpose(1, 2),
    "unflatten": lambda x, n: x.unflatten(-1, (n, -1)),
    "expand": lambda x, n: x[:, :, None].expand(-1, -1, n, -1) * 0.5,
}


@settings(max_examples=16, deadline=None)
@given(view=st.sampled_from(sorted(VIEWS)), tail=st.sampled_from(sorted(TAILS)),
       heads=st.sampled_from([1, 2]), second=st.sampled_from([1, 2, 4]),
       seed=st.integers(0, 2 ** 16))
def test_an_int_argument_made_a_size_of_1_is_specialized(view, tail, heads, second, seed):
    def fn(x, k, w, n: int):
        q, k = VIEWS[view](x, n), VIEWS[view](k, n)
        return TAILS[tail](q, w) + TAILS[tail](k, w).sum(-1, keepdim=True)

    jfn = ir.jit(fn, executors=["triton"], cache="symbolic values")
    g = torch.Generator().manual_seed(seed)
    for n in (heads, second):
        note(f"{view} {tail} heads={n}")
        d = 8 if view == "expand" else 8 * n
        x, k = (torch.randn(2, 4, d, generator=g, requires_grad=True) for _ in range(2))
        w = torch.rand(8, generator=g) + 0.5
        got, expected = jfn(x, k, w, n), fn(x, k, w, n)
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
        grads = torch.autograd.grad(got.sum(), (x, k))
        torch.testing.assert_close(grads, torch.autograd.grad(expected.sum(), (x, k)),
                                   rtol=1e-5, atol=1e-5)
