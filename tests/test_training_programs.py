"""Random fusible programs in training: some inputs need grad (a random subset, odd layouts),
random upstream gradients reach some of the outputs (others stay unused), and both the outputs
and `torch.autograd.grad` through the fused forward and backward kernels match eager PyTorch, in
both cache modes, on the first call and on the cached entry."""
import pytest
import torch
from hypothesis import event, given, note, settings
from hypothesis import strategies as st

import ir
import triton_exec
from programs import TOLERANCES, assert_matches_eager, layout_tensors, loosest, programs

FUSIBLE = ("arith", "unary", "max_min", "where", "compare", "cast", "index", "cat", "stack",
           "pad", "reshape", "split_merge", "expand", "layout", "clamp", "pow", "div",
           "masked_fill", "split")
# Where a gradient jumps (a select, a clamp, |x|, relu at 0, max/min ties), an fp32 kernel and
# eager's low-precision rounding may fall on different sides of the jump: low-precision
# programs use only ops whose gradient is continuous.
SMOOTH = ("arith", "unary", "compare", "cast", "index", "cat", "stack", "pad", "reshape",
          "split_merge", "expand", "layout", "pow", "div", "masked_fill", "split")
KINKS = ("abs(", "relu", "where(", "clamp", "clip(", "maximum(", "minimum(")


def leaf(t: torch.Tensor, requires_grad: bool) -> torch.Tensor:
    """t itself (same storage, strides, offset) as a leaf that needs grad or not."""
    return t.detach().requires_grad_(requires_grad) if requires_grad else t


def grad_tolerance(dtype, rounding, expected):
    rtol, atol = TOLERANCES[loosest([dtype] + list(rounding))]
    if dtype != torch.float32 or rounding != (torch.float32,):
        # eager rounds every op of the backward to the low precision, we round once: the error
        # scales with the gradient's size, not each element's
        atol = atol * max(1.0, expected.abs().max().item() if expected.numel() else 0.0)
    return rtol, atol


def check_training(program, data, mode):
    note(program.describe())
    tensors = [a for a in program.inputs if isinstance(a, torch.Tensor)]
    ints = program.inputs[len(tensors):]
    floats = [k for k, t in enumerate(tensors) if t.dtype.is_floating_point]
    needing = data.draw(st.sets(st.sampled_from(floats), min_size=1) if floats else st.just(set()),
                        label="inputs that need grad")
    wanted = [k in needing for k in range(len(tensors))]
    jfn = ir.jit(program.fn, executors=["triton"], cache=mode)
    for call in range(2):       # a miss, then the cached entry
        ours = [leaf(t, w) for t, w in zip(tensors, wanted)]
        ref = [leaf(t, w) for t, w in zip(tensors, wanted)]
        out = jfn(*ours, *ints)
        expected = program.fn(*ref, *ints)
        with torch.no_grad():
            assert_matches_eager(program, out)
        outs = out if isinstance(out, tuple) else (out,)
        exp_outs = expected if isinstance(expected, tuple) else (expected,)
        assert [o.requires_grad for o in outs] == [e.requires_grad for e in exp_outs]
        rounding = (program.rounding if isinstance(program.rounding, tuple)
                    else (program.rounding,) * len(outs))
        differentiable = [k for k, e in enumerate(exp_outs) if e.requires_grad]
        inputs = [k for k, w in enumerate(wanted) if w]
        if not differentiable or not inputs:
            event("no gradient to compare")
            continue
        event(f"gradients compared, {len(ir.last_backward_traces(jfn))} fused backward(s)")
        if call == 0:
            used = [k for k in differentiable if data.draw(st.booleans(), label="gets a grad")]
            used = used or differentiable[:1]
            gen = torch.Generator().manual_seed(data.draw(st.integers(0, 2**16), label="seed"))
            upstream = [data.draw(layout_tensors(exp_outs[k].shape, exp_outs[k].dtype, gen),
                                  label="upstream grad") for k in used]
        note(f"call {call}: inputs needing grad {inputs}, grads for outputs {used}")
        got = torch.autograd.grad([outs[k] for k in used], [ours[k] for k in inputs], upstream,
                                  allow_unused=True)
        want = torch.autograd.grad([exp_outs[k] for k in used], [ref[k] for k in inputs],
                                   upstream, allow_unused=True)
        for k, g, e in zip(inputs, got, want):
            assert (g is None) == (e is None), f"input {k}: gradient {g} where eager has {e}"
            if e is not None:
                assert g.dtype == e.dtype and g.shape == e.shape
                rtol, atol = grad_tolerance(e.dtype, [rounding[j] for j in used], e)
                torch.testing.assert_close(g, e, rtol=rtol, atol=atol, equal_nan=True,
                                           msg=lambda m: f"grad of input {k}: {m}")
    if any(wanted):
        assert ir.cache_stats(jfn).hits >= 1 or mode == "no caching"
    for traces in ir.last_backward_traces(jfn).values():
        for trace in traces:
            compile(str(trace), "<backward trace>", "exec")
    return jfn


@pytest.mark.parametrize("mode", ["constant values", "symbolic values"])
@settings(max_examples=40)
@given(program=programs(max_ops=5, op_names=FUSIBLE, main_dtypes=(torch.float32,)),
       data=st.data())
def test_fp32_programs_train_as_eager(program, data, mode):
    check_training(program, data, mode)


@pytest.mark.parametrize("mode", ["constant values", "symbolic values"])
@settings(max_examples=30)
@given(program=programs(max_ops=5, op_names=SMOOTH, main_dtypes=(torch.bfloat16,)),
       data=st.data())
def test_bf16_programs_train_as_eager(program, data, mode):
    if any(k in program.source for k in KINKS):     # a unary op may still be one of these
        return
    check_training(program, data, mode)


@settings(max_examples=15)
@given(program=programs(max_ops=4, op_names=("index", "cat", "pad", "arith"), int_args=True,
                        main_dtypes=(torch.float32, torch.bfloat16)),
       data=st.data())
def test_programs_with_int_arguments_train_as_eager(program, data):
    check_training(program, data, "symbolic values")


def test_backward_kernels_ran():
    """The property tests above are about fused backward kernels: this one shows one ran."""
    def f(x, w):
        return torch.cat((F_pad(x) * w, x[:, :2]), dim=-1)

    jfn = ir.jit(f, executors=["triton"])
    x, w = torch.randn(3, 4, requires_grad=True), torch.randn(6, requires_grad=True)
    out = jfn(x, w)
    kinds = [k.direction for k in triton_exec.last_kernels(jfn)]
    assert kinds.count("forward") == 1 and kinds.count("backward") >= 1
    g = torch.randn_like(out)
    got = torch.autograd.grad(out, (x, w), g)
    x2, w2 = x.detach().requires_grad_(), w.detach().requires_grad_()
    want = torch.autograd.grad(f(x2, w2), (x2, w2), g)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


def F_pad(x):
    return torch.nn.functional.pad(x, (1, 1))


VIEWS = ("x.reshape(-1)", "x[:, 1:]", "x.t()", "x.unsqueeze(0)", "x.flatten()", "x[1]",
         "x.expand(2, 2, 3)")
CONSUMERS = ("v * 2", "v.half()", "v.sin() + 1", "torch.cat((v, v), -1)", "F_pad(v)",
             "(x * 3).sum() + v", "v.unsqueeze(-1) * 2")


@settings(max_examples=20)
@given(view=st.sampled_from(VIEWS), consumers=st.lists(st.sampled_from(CONSUMERS), min_size=2,
                                                        max_size=3, unique=True),
       data=st.data())
def test_a_view_that_several_groups_recompute_gets_its_gradient_once(view, consumers, data):
    """Groups that each recompute the same view of an input (`t0 = reshape(x)` in both) and are
    joined into one differentiable unit: the view's gradient reaches the input once."""
    namespace = {"torch": torch, "F_pad": F_pad}
    body = "\n".join(f"    o{k} = {c}" for k, c in enumerate(consumers))
    outs = ", ".join(f"o{k}" for k in range(len(consumers)))
    exec(f"def f(x):\n    v = {view}\n{body}\n    return {outs}\n", namespace)
    f = namespace["f"]
    x = torch.randn(2, 3, generator=torch.Generator().manual_seed(0))
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    got, want = ir.jit(f, executors=["triton"])(xa), f(xb)
    used = sorted(data.draw(st.sets(st.integers(0, len(consumers) - 1), min_size=1)))
    gen = torch.Generator().manual_seed(1)
    gs = [torch.randn(want[k].shape, generator=gen).to(want[k].dtype) for k in used]
    note(f"{view}; {consumers}; grads of outputs {used}")
    (ga,) = torch.autograd.grad([got[k] for k in used], xa, gs)
    (gb,) = torch.autograd.grad([want[k] for k in used], xb, gs)
    torch.testing.assert_close(ga, gb)
