"""Training through fused groups: the seed RoPE's backward is one Triton kernel with the forward's
access widths, saves only cos and sin, double backward is refused clearly, retain_graph works,
and a small model trains as eager for 5 SGD steps with the backward kernels running."""
import pytest
import torch
import torch.nn.functional as F

import ir
import triton_exec
from ir.autodiff import DoubleBackwardError
from ir.examples import rope, rope_inputs, rope_qkv

MODES = ["constant values", "symbolic values"]
BF16 = dict(rtol=2e-2, atol=4e-2)


def leaves(*tensors, grad=(True,)):
    grads = list(grad) + [False] * (len(tensors) - len(grad))
    return [t.detach().clone().requires_grad_(g) for t, g in zip(tensors, grads)]


def saved_bytes(fn, *args):
    """Bytes of the tensors autograd saves while fn(*args) runs, and fn's result."""
    packed = []

    def pack(t):
        packed.append(t)
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(*args)
    return sum(t.numel() * t.element_size() for t in packed), out


def kernels(jfn, direction):
    return [k for k in triton_exec.last_kernels(jfn) if k.direction == direction]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rope_backward_is_one_kernel_that_saves_only_cos_and_sin(mode, dtype):
    x, cos, sin, n = rope_inputs(B=2, H=4, T=16, hs=32, n=8, dtype=dtype)
    jfn = ir.jit(rope, executors=["triton"], cache=mode)
    (xa, ca, sa), (xb, cb, sb) = leaves(x, cos, sin), leaves(x, cos, sin)
    nbytes, out = saved_bytes(jfn, xa, ca, sa, n)
    assert nbytes <= cos.nbytes + sin.nbytes
    expected = rope(xb, cb, sb, n)
    tol = BF16 if dtype == torch.bfloat16 else {}
    torch.testing.assert_close(out, expected, **tol)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to(dtype)
    (gx,) = torch.autograd.grad(out, xa, g)
    (ex,) = torch.autograd.grad(expected, xb, g)
    torch.testing.assert_close(gx, ex, **tol)
    assert len(kernels(jfn, "forward")) == 1 and len(kernels(jfn, "backward")) == 1
    (traces,) = ir.last_backward_traces(jfn).values()
    executed = traces[-1]
    assert [e.prim.kind for e in executed.eqns if e.prim.kind != "host"] == ["fusion"]
    tensors = [v.name for _, v in executed.inputs if isinstance(v, ir.TensorProxy)]
    assert tensors[:2] == ["cos", "sin"] and len(tensors) == 3     # and the output's gradient


def test_rope_backward_accesses_are_16_byte_where_the_forwards_are():
    x, cos, sin, n = rope_inputs(B=2, H=4, T=16, hs=32, n=8, dtype=torch.bfloat16)
    jfn = ir.jit(rope, executors=["triton"])
    jfn(*leaves(x, cos, sin), n)
    (fwd,), (bwd,) = kernels(jfn, "forward"), kernels(jfn, "backward")
    f_widths, b_widths = fwd.access_widths(arch=90), bwd.access_widths(arch=90)
    assert set(b_widths["st"]) == set(f_widths["st"]) == {16}
    assert set(b_widths["ld"]) == set(f_widths["ld"]) == {16, 8}
    # cos and the incoming gradient: 16-byte loads; what the rotation moves by half of n (sin
    # and the gradient there, as x in the forward) 8-byte ones
    widths = {a.label: a.width * 2 for a in bwd.lowered.accesses if a.kind == "load"}
    assert all(w == 16 for label, w in widths.items() if "cos" in label)
    assert all(w == 8 for label, w in widths.items() if "sin" in label)


@pytest.mark.parametrize("mode", MODES)
def test_rope_on_a_fused_qkv_tensor(mode):
    B, T, H, hs, n = 2, 16, 4, 32, 8
    g = torch.Generator().manual_seed(0)
    qkv = torch.randn(B, T, 3 * H * hs, generator=g).bfloat16()
    cos, sin = torch.randn(2, T, n, generator=g).bfloat16().unbind(0)
    jfn = ir.jit(rope_qkv, executors=["triton"], cache=mode)
    (a, ca, sa), (b, cb, sb) = leaves(qkv, cos, sin), leaves(qkv, cos, sin)
    q, k = jfn(a, ca, sa, H, H, hs, n)
    eq, ek = rope_qkv(b, cb, sb, H, H, hs, n)
    gq, gk = (torch.randn(q.shape, generator=g).bfloat16() for _ in range(2))
    (got,) = torch.autograd.grad((q, k), a, (gq, gk))
    (want,) = torch.autograd.grad((eq, ek), b, (gq, gk))
    torch.testing.assert_close(got, want, **BF16)
    # q and k are one kernel (in symbolic mode n_head and n_groups are two runtime sizes: the
    # kernel guards n_groups <= n_head); their backward to qkv is one kernel either way
    assert len(kernels(jfn, "forward")) == 1
    assert len(kernels(jfn, "backward")) == 1


@pytest.mark.parametrize("mode", MODES)
def test_rope_on_a_fused_qkv_tensor_with_grouped_kv_heads(mode):
    # q and k of different shapes: one forward kernel (k's heads nest in q's), one
    # differentiable unit, so qkv's gradient (the sum of q's and k's parts) is one backward
    # kernel, not two and an add
    B, T, H, G, hs, n = 2, 16, 4, 2, 32, 8
    g = torch.Generator().manual_seed(0)
    qkv = torch.randn(B, T, (H + 2 * G) * hs, generator=g).bfloat16()
    cos, sin = torch.randn(2, T, n, generator=g).bfloat16().unbind(0)
    jfn = ir.jit(rope_qkv, executors=["triton"], cache=mode)
    (a, ca, sa), (b, cb, sb) = leaves(qkv, cos, sin), leaves(qkv, cos, sin)
    nbytes, (q, k) = saved_bytes(jfn, a, ca, sa, H, G, hs, n)
    assert nbytes <= cos.nbytes + sin.nbytes
    eq, ek = rope_qkv(b, cb, sb, H, G, hs, n)
    torch.testing.assert_close((q, k), (eq, ek), **BF16)
    gq, gk = torch.randn(q.shape, generator=g).bfloat16(), torch.randn(k.shape,
                                                                       generator=g).bfloat16()
    (got,) = torch.autograd.grad((q, k), a, (gq, gk), retain_graph=True)
    (want,) = torch.autograd.grad((eq, ek), b, (gq, gk), retain_graph=True)
    torch.testing.assert_close(got, want, **BF16)
    assert len(kernels(jfn, "forward")) == 1 and len(kernels(jfn, "backward")) == 1
    # only k's gradient asked for: q's part contributes nothing
    (got_k,) = torch.autograd.grad(k, a, gk)
    (want_k,) = torch.autograd.grad(ek, b, gk)
    torch.testing.assert_close(got_k, want_k, **BF16)


def test_inputs_without_grad_get_no_gradient_work():
    x, cos, sin, n = rope_inputs()
    jfn = ir.jit(rope, executors=["triton"])
    jfn(*leaves(x, cos, sin, grad=(False, True)), n)      # only cos needs grad
    (traces,) = ir.last_backward_traces(jfn).values()
    assert len(traces[-1].outputs) == 1         # cos's gradient, nothing for x or sin
    # the broadcast's gradient is a sum over batch and heads: torch runs it
    assert any("sum" in str(e.prim) or ".sum(" in line
               for e in traces[-1].eqns for line in [str(traces[-1])])


def test_double_backward_is_a_clear_error():
    jfn = ir.jit(lambda x: F.pad(x, (1, 1)) * x.sum(-1, keepdim=True) + 1, executors=["triton"])
    x = torch.randn(3, 4, requires_grad=True)
    out = jfn(x)
    with pytest.raises(DoubleBackwardError, match="create_graph=True"):
        torch.autograd.grad(out.sum(), x, create_graph=True)


def test_retain_graph_twice():
    x, cos, sin, n = rope_inputs()
    jfn = ir.jit(rope, executors=["triton"])
    (xa, ca, sa), (xb, cb, sb) = leaves(x, cos, sin, grad=(True, True)), leaves(
        x, cos, sin, grad=(True, True))
    out, expected = jfn(xa, ca, sa, n), rope(xb, cb, sb, n)
    g = torch.randn_like(out)
    for _ in range(2):
        out.backward(g, retain_graph=True)
        expected.backward(g, retain_graph=True)
    torch.testing.assert_close(xa.grad, xb.grad)
    torch.testing.assert_close(ca.grad, cb.grad)


def block(h, cos, sin, scale, bias):
    """RoPE, then pad and cat with learned scale and bias: the jitted part of the model."""
    r = rope(h, cos, sin, 8)
    p = F.pad(r, (4, 4)) * scale + bias
    return torch.cat((p, r[..., :8]), dim=-1)


class Model(torch.nn.Module):
    def __init__(self, block_fn):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.proj = torch.nn.Linear(32, 32)
        self.scale = torch.nn.Parameter(torch.rand(40, generator=g) + 0.5)
        self.bias = torch.nn.Parameter(torch.randn(40, generator=g) * 0.1)
        self.block = block_fn

    def forward(self, x, cos, sin):
        return self.block(self.proj(x), cos, sin, self.scale, self.bias)


@pytest.mark.parametrize("mode", MODES)
def test_a_training_loop_matches_eager(mode):
    torch.manual_seed(0)
    jblock = ir.jit(block, executors=["triton"], cache=mode)
    ours, eager = Model(jblock), Model(block)
    eager.load_state_dict(ours.state_dict())
    x, cos, sin, _ = rope_inputs(B=2, H=2, T=8, hs=32, n=8)
    target = torch.randn(2, 2, 8, 48, generator=torch.Generator().manual_seed(2))
    backward_calls = []
    for step in range(5):
        losses = []
        for model in (ours, eager):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            opt.zero_grad()
            loss = ((model(x, cos, sin) - target) ** 2).mean()
            if model is ours and step == 0:     # count the fused backward's runs
                for eqn in ir.last_traces(jblock)[-1].eqns:
                    if "unit" in eqn.params:
                        unit = eqn.params["unit"]
                        unit.backward = _counted(unit.backward, backward_calls)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert losses[0] == pytest.approx(losses[1], rel=1e-5, abs=1e-6), step
    for (name, p), (_, q) in zip(ours.named_parameters(), eager.named_parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-5, msg=name)
    assert len(kernels(jblock, "backward")) >= 1
    assert len(backward_calls) == 5 * len(ir.last_backward_traces(jblock))
    assert ir.cache_stats(jblock).misses == 1


def _counted(fn, calls):
    def counted(*args):
        calls.append(1)
        return fn(*args)
    return counted


def test_an_input_only_unused_outputs_depend_on_gets_no_gradient():
    # found by hypothesis: t3 and t0 are one kernel with two outputs; asking for t3's gradient
    # only, x1 (which only t0 depends on) gets None, as in eager, not zeros
    def f(x0, x1):
        return x0 + x0, x0 + x1

    jfn = ir.jit(f, executors=["triton"])
    a0, a1 = leaves(torch.randn(4), torch.randn(4), grad=(True, True))
    t3, t0 = jfn(a0, a1)
    assert len(kernels(jfn, "forward")) == 1
    g0, g1 = torch.autograd.grad(t3, (a0, a1), torch.ones(4), allow_unused=True)
    assert g1 is None
    torch.testing.assert_close(g0, torch.full((4,), 2.0))


def test_every_fusible_prim_has_a_grad_rule():
    from ir.ops.registry import GRAD_RULES
    from ir.prims import COMPARE, PRIMS
    from triton_exec.rules import RULES
    non_differentiable = {PRIMS[name] for name in (*COMPARE, "full")}   # bool out; no input
    missing = [prim for prim in RULES
               if prim not in non_differentiable and prim not in GRAD_RULES]
    assert not missing


def test_a_training_entry_keeps_no_tensor_alive():
    import gc
    import weakref
    x, cos, sin, n = rope_inputs()
    jfn = ir.jit(rope, executors=["triton"])
    x, cos = x.requires_grad_(), cos.requires_grad_()
    out = jfn(x, cos, sin, n)
    out.backward(torch.ones_like(out))
    refs = [weakref.ref(t) for t in (x, cos, sin, out)]
    del x, cos, sin, out
    gc.collect()
    assert all(r() is None for r in refs)
