"""One backward for the whole computation trace (`ir.whole_backward`): random programs mixing
fusible ops with opaque calls (matmul, ops without a grad rule) give eager's gradients; gradient
accumulation and the elementwise work between two groups are in the backward trace, fused; the
small GPT's backward has no `add` of autograd's engine; retain_graph, unused outputs, inputs
without grad, no_grad regions and double backward behave as in eager; what cannot be made sound
falls back to a backward per fusion group, with the reason in `ir.explain`."""
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import ir
import triton_exec  # noqa: F401  (registers the "triton" executor)
from ir.autodiff import DoubleBackwardError
from perf_modules import perf_module
from programs import programs
from test_training_programs import FUSIBLE, check_training

WHOLE = "one for the whole trace"


def backward_of(jfn) -> str:
    return ir.last_entry(jfn).extra.get("backward", "")


@pytest.mark.parametrize("mode", ["constant values", "symbolic values"])
@settings(max_examples=20)
@given(program=programs(max_ops=5, op_names=FUSIBLE + ("matmul", "refused"),
                        main_dtypes=(torch.float32,)),
       data=st.data())
def test_programs_with_opaque_calls_train_as_eager(program, data, mode):
    jfn = check_training(program, data, mode)
    how = backward_of(jfn)
    # the only refusals a program of these ops may meet: it returns a view, or there is nothing
    # to fuse or to differentiate
    assert how.startswith(WHOLE) or any(
        reason in how for reason in ("a view)", "no input needs grad", "nothing fused")), how


def mlp(x, w1, w2, w3, b):
    """Three projections reading one value (gradient accumulation), a broadcast bias (a
    broadcast-gradient sum) and elementwise work between them."""
    h = F.silu(x @ w1.mT + b) * (x @ w2.mT)
    return torch.cumsum(h, -1) @ w3.mT + x


def mlp_inputs(requires_grad=(True,) * 5):
    g = torch.Generator().manual_seed(0)
    shapes = [(2, 4, 16), (32, 16), (32, 16), (16, 32), (32,)]
    return [(torch.randn(s, generator=g) / 4).requires_grad_(r)
            for s, r in zip(shapes, requires_grad)]


def test_accumulation_and_work_between_groups_are_in_one_backward_trace():
    jfn = ir.jit(mlp, executors=["triton"])
    ours, ref = mlp_inputs(), mlp_inputs()
    out, expected = jfn(*ours), mlp(*ref)
    torch.testing.assert_close(out, expected)
    g = torch.randn_like(out)
    torch.testing.assert_close(torch.autograd.grad(out, ours, g),
                               torch.autograd.grad(expected, ref, g))
    assert backward_of(jfn).startswith(WHOLE)
    (traces,) = ir.last_backward_traces(jfn).values()
    executed = traces[-1]
    # x's gradient sums four contributions (three projections and the residual): in kernels,
    # never a torch add; the autograd graph of the output is one Function
    assert not [e for e in executed.eqns if e.prim.name == "add" and e.executor.name == "torch"]
    assert any(e.prim.kind == "fusion" and "add" in [b.prim.name for b in e.params["body"]]
               for e in executed.eqns)
    assert type(out.grad_fn).__name__ == "_WholeFunctionBackward"
    assert "(t" in str(executed) and "vjp_cumsum" in str(executed)     # readable, one program


def test_retain_graph_unused_outputs_and_inputs_without_grad_as_in_eager():
    def f(x, w, y):
        h = x @ w.mT
        return torch.sigmoid(h) * y, torch.flip(h, (0,)) + 1

    jfn = ir.jit(f, executors=["triton"])
    g = torch.Generator().manual_seed(1)
    base = [torch.randn(4, 8, generator=g), torch.randn(8, 8, generator=g),
            torch.randn(4, 8, generator=g)]
    ours = [t.clone().requires_grad_(r) for t, r in zip(base, (True, True, False))]
    ref = [t.clone().requires_grad_(r) for t, r in zip(base, (True, True, False))]
    (a, b), (ea, eb) = jfn(*ours), f(*ref)
    assert backward_of(jfn).startswith(WHOLE)
    ga = torch.randn(4, 8, generator=g)
    for _ in range(2):      # retain_graph: twice, and the opaque call's graph is kept too
        a.backward(ga, retain_graph=True)
        ea.backward(ga, retain_graph=True)
    torch.testing.assert_close([t.grad for t in ours[:2]], [t.grad for t in ref[:2]])
    assert ours[2].grad is None
    a.backward(ga)          # frees the graph, as eager's
    ea.backward(ga)
    with pytest.raises(RuntimeError, match="second time"):
        a.backward(ga)
    with pytest.raises(RuntimeError, match="second time"):
        ea.backward(ga)
    # b unused: only a's gradient; an input only b depends on gets None, as in eager
    x = base[0].clone().requires_grad_()
    (a, b), (ea, eb) = jfn(x, base[1], base[2]), f(x, base[1], base[2])
    torch.testing.assert_close(torch.autograd.grad(b, x, torch.ones(4, 8)),
                               torch.autograd.grad(eb, x, torch.ones(4, 8)))
    y = base[2].clone().requires_grad_()
    (a, b), (ea, eb) = jfn(x, base[1], y), f(x, base[1], y)
    assert torch.autograd.grad(b, (x, y), torch.ones(4, 8), allow_unused=True)[1] is None


def test_no_grad_region_and_double_backward():
    def f(x, w):
        with torch.no_grad():
            scale = (x @ w).amax()
        return torch.tanh(x @ w) * scale

    jfn = ir.jit(f, executors=["triton"])
    x, w = torch.randn(4, 4, requires_grad=True), torch.randn(4, 4, requires_grad=True)
    out, expected = jfn(x, w), f(x, w)
    assert backward_of(jfn).startswith(WHOLE)
    torch.testing.assert_close(torch.autograd.grad(out.sum(), (x, w), retain_graph=True),
                               torch.autograd.grad(expected.sum(), (x, w)))
    with pytest.raises(DoubleBackwardError, match="create_graph=True"):
        torch.autograd.grad(out.sum(), x, create_graph=True)


def test_what_cannot_be_made_sound_falls_back_with_a_reason():
    def written(x, buf):
        buf.add_(1)
        return torch.sigmoid(x) * buf

    def view(x):
        return (x * 2).reshape(-1)[1:]

    for fn, args, reason in [
            (written, (torch.randn(4, requires_grad=True), torch.zeros(4)), "in place"),
            (view, (torch.randn(4, 4, requires_grad=True),), "a view")]:
        jfn = ir.jit(fn, executors=["triton"])
        ref = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
        out, expected = jfn(*args), fn(*ref)
        torch.testing.assert_close(out, expected)
        torch.testing.assert_close(torch.autograd.grad(out.sum(), args[0]),
                                   torch.autograd.grad(expected.sum(), ref[0]))
        assert reason in backward_of(jfn)
        assert "Backward: per fusion group (" in str(ir.explain(jfn, *args))


def test_the_small_gpt_backward_has_fewer_kernels_and_no_accumulation_add(monkeypatch):
    counts = perf_module("kernel_counts").counts
    from ir.examples import GPTConfig
    config = GPTConfig(n_layer=1)
    whole = counts(config)
    monkeypatch.setenv("IR_WHOLE_BACKWARD", "0")
    per_group = counts(config)
    assert "add" not in whole["backward"][1] and "add" in per_group["backward"][1]
    assert whole["backward"][0] < per_group["backward"][0]
    assert sum(map(len, (whole["backward"][1],))) + whole["backward"][0] < \
        len(per_group["backward"][1]) + per_group["backward"][0]


def test_the_torch_executor_keeps_eager_autograd_and_double_backward():
    def f(x):
        return torch.sin(x @ x) * 2

    jfn = ir.jit(f, executors=["torch"])
    x = torch.randn(3, 3, requires_grad=True)
    (g,) = torch.autograd.grad(jfn(x).sum(), x, create_graph=True)
    (e,) = torch.autograd.grad(f(x).sum(), x, create_graph=True)
    torch.testing.assert_close(torch.autograd.grad(g.sum(), x), torch.autograd.grad(e.sum(), x))
    assert "nothing fused" in backward_of(jfn)
