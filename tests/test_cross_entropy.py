"""`F.cross_entropy` fused (issue 28): random logits [N, C] (C from 1 to a few thousand, past a
block too) with class-index targets, some `ignore_index`, `label_smoothing`, every `reduction`,
in fp32/fp16/bf16 and both cache modes, against eager within the README's tolerance, loss and
the logits' gradient; the edge cases of eager (all -inf rows, every target ignored: NaN for
"mean", huge logits, NaN and +inf logits); with reduction "none", the loss is one kernel and the
logits' gradient one kernel, with "mean"/"sum" the forward 2 kernels; rows past ROW_LIMIT (a
loop over the row's blocks) with the edges in any block, read once, their per-row values loaded
once per row; a class weight falls back to torch, correctly."""
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, note, settings
from hypothesis import strategies as st

import ir
import triton_exec
from perf_modules import perf_module
from test_reductions import assert_close_as_contract, torch_reductions

FLOATS = [torch.float32, torch.float16, torch.bfloat16]


def program(reduction, smoothing, ignore_index=-100):
    def fn(x, t):
        return F.cross_entropy(x, t, reduction=reduction, label_smoothing=smoothing,
                               ignore_index=ignore_index)
    return fn


@st.composite
def cases(draw, max_classes=3000):
    n = draw(st.integers(1, 6))
    c = draw(st.one_of(st.integers(1, 40), st.integers(41, max_classes)))
    seed = draw(st.integers(0, 2 ** 16))
    g = torch.Generator().manual_seed(seed)
    dtype = draw(st.sampled_from(FLOATS))
    x = (torch.randn(n, c, generator=g) * draw(st.sampled_from([1.0, 8.0]))).to(dtype)
    t = torch.randint(0, c, (n,), generator=g)
    t[torch.rand(n, generator=g) < draw(st.sampled_from([0.0, 0.3, 1.0]))] = -100
    return (x, t, draw(st.sampled_from(["none", "sum", "mean"])),
            draw(st.sampled_from([0.0, 0.1])),
            draw(st.sampled_from(["constant values", "symbolic values"])))


def losses_match(x, t, reduction, smoothing, mode):
    """(our loss, eager's, our leaf, eager's leaf) of the loss program on x, after checking the
    losses equal at the contract's tolerance with no reduction left to torch."""
    fn = program(reduction, smoothing)
    jf = ir.jit(fn, executors=["triton"], cache=mode)
    leaf, ref = x.detach().clone().requires_grad_(), x.detach().clone().requires_grad_()
    out, expected = jf(leaf, t), fn(ref, t)
    assert_close_as_contract(out.detach(), expected.detach(), x.shape[-1])
    assert torch_reductions(jf) == []
    return out, expected, leaf, ref


@settings(max_examples=12)
@given(cases())
def test_random_cross_entropy_matches_eager(case):
    x, t, reduction, smoothing, mode = case
    note(f"{x.dtype} {tuple(x.shape)} {reduction} smoothing={smoothing} {mode} ignored "
         f"{int((t == -100).sum())}")
    out, expected, leaf, ref = losses_match(x, t, reduction, smoothing, mode)
    if reduction == "mean" and bool((t == -100).all()):
        return      # NaN: no gradient to compare
    g = torch.rand(expected.shape, generator=torch.Generator().manual_seed(1)).to(x.dtype)
    (gx,), (ge,) = torch.autograd.grad(out, leaf, g), torch.autograd.grad(expected, ref, g)
    assert_close_as_contract(gx, ge, 4 * x.shape[-1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_edge_rows_as_eager(dtype):
    big = torch.finfo(dtype).max
    x = torch.tensor([[-math.inf] * 4, [big, -big, big / 2, 0.0], [1.0, math.nan, 0.0, 2.0],
                      [-math.inf, 0.0, -math.inf, 1.0], [3.0, 1.0, -2.0, 0.5],
                      [math.inf, 1.0, 2.0, 0.0]]).to(dtype)     # +inf: NaN, as log_softmax
    t = torch.tensor([1, 0, 2, 0, -100, 1])
    for reduction in ("none", "sum", "mean"):
        for smoothing in (0.0, 0.2):
            fn = program(reduction, smoothing)
            got, expected = ir.jit(fn, executors=["triton"])(x, t), fn(x, t)
            torch.testing.assert_close(got, expected, equal_nan=True, rtol=1.6e-2, atol=1e-5)
    ignored = torch.full((6,), -100)
    for reduction in ("none", "sum", "mean"):     # mean over no target: NaN, as eager
        fn = program(reduction, 0.1)
        torch.testing.assert_close(ir.jit(fn, executors=["triton"])(x, ignored), fn(x, ignored),
                                   equal_nan=True)


def test_unreduced_loss_and_its_gradient_are_one_kernel_each():
    x = torch.randn(8, 5000, requires_grad=True)
    t = torch.randint(0, 5000, (8,))
    fn = program("none", 0.0)
    jf = ir.jit(fn, executors=["triton"])
    out = jf(x, t)
    (gx,) = torch.autograd.grad(out, x, torch.ones(8))
    (ge,) = torch.autograd.grad(fn(x, t), x, torch.ones(8))
    assert_close_as_contract(gx, ge, 5000)
    kernels = triton_exec.last_kernels(jf)
    assert [k.direction for k in kernels] == ["forward", "backward"]


def test_class_weight_falls_back_to_torch():
    x, t, w = torch.randn(4, 7), torch.randint(0, 7, (4,)), torch.rand(7)
    fn = lambda x, t, w: F.cross_entropy(x, t, weight=w)   # noqa: E731
    jf = ir.jit(fn, executors=["triton"])
    torch.testing.assert_close(jf(x, t, w), fn(x, t, w))
    assert any(e.prim.name == "opaque" and "cross_entropy" in str(e.params.get("fn_name"))
               for e in ir.last_traces(jf)[-1].eqns)


LONG = 16385    # past `lower_reduction.ROW_LIMIT`: the row is walked in blocks by a loop


@st.composite
def long_rows(draw):
    """Rows past ROW_LIMIT with the edges placed in chosen blocks: a leading run of -inf (the
    running max starts infinite), a later larger max (the running sum rescaled), NaN, +inf,
    the largest finite values."""
    n, c = draw(st.integers(1, 4)), draw(st.integers(LONG, LONG + 3000))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2 ** 16)))
    dtype = draw(st.sampled_from(FLOATS))
    x = torch.randn(n, c, generator=g) * draw(st.sampled_from([1.0, 8.0]))
    edge = draw(st.sampled_from(["none", "-inf run", "late max", "nan", "+inf", "huge"]))
    row, col = draw(st.integers(0, n - 1)), draw(st.integers(0, c - 1))
    if edge == "-inf run":
        x[row, :col] = -math.inf
    elif edge == "late max":
        x[row, col] = 60.0
    elif edge == "nan":
        x[row, col] = math.nan
    elif edge == "+inf":
        x[row, col] = math.inf
    elif edge == "huge":
        x[row, col], x[row, c - 1 - col] = torch.finfo(dtype).max, -torch.finfo(dtype).max
    t = torch.randint(0, c, (n,), generator=g)
    if draw(st.booleans()):
        t[row] = col
    t[torch.rand(n, generator=g) < draw(st.sampled_from([0.0, 0.3, 1.0]))] = -100
    return (x.to(dtype), t, edge, draw(st.sampled_from(["none", "sum", "mean"])),
            draw(st.sampled_from([0.0, 0.1])),
            draw(st.sampled_from(["constant values", "symbolic values"])))


@settings(max_examples=8)
@given(long_rows())
def test_long_rows_match_eager(case):
    """Rows walked in blocks (one pass: the online log-sum-exp and the target's logit loaded
    once per row) against eager, with the edges in any block, loss and the logits' gradient."""
    x, t, edge, reduction, smoothing, mode = case
    note(f"{x.dtype} {tuple(x.shape)} {edge} {reduction} smoothing={smoothing} {mode} "
         f"targets {t.tolist()}")
    out, expected, leaf, ref = losses_match(x, t, reduction, smoothing, mode)
    if edge in ("nan", "+inf", "huge") or (reduction == "mean" and bool((t == -100).all())):
        return      # NaN/inf gradients: not compared
    g = torch.rand(expected.shape, generator=torch.Generator().manual_seed(1)).to(x.dtype)
    (gx,), (ge,) = torch.autograd.grad(out, leaf, g), torch.autograd.grad(expected, ref, g)
    assert_close_as_contract(gx, ge, 4 * x.shape[-1])


@pytest.mark.parametrize("mode", ["constant values", "symbolic values"])
def test_long_rows_whose_max_is_below_minus_88_as_eager(mode):
    """The online log-sum-exp starts at shift 0 (the max -inf so far): rescaling its empty sum
    to a max below -88 overflows exp (0 * inf was NaN); the loss and gradient are eager's."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, LONG + 300, generator=g) - 200.0
    x[1, :LONG] = -math.inf         # the running max -inf for a whole block, then below -88
    t = torch.randint(LONG, LONG + 300, (3,), generator=g)
    out, expected, leaf, ref = losses_match(x, t, "mean", 0.0, mode)
    (gx,), (ge,) = torch.autograd.grad(out, leaf), torch.autograd.grad(expected, ref)
    assert_close_as_contract(gx, ge, 4 * x.shape[-1])


@pytest.mark.parametrize("classes", [300, LONG + 100])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_reduced_loss_is_a_row_kernel_and_a_final_sum(reduction, classes):
    """With reduction mean/sum the forward is 2 kernels: the rows' (max, log-sum-exp, target's
    logit and the per-row loss) and the final sum (and count); the gradient 1 kernel. The
    per-row loss is not pulled into the final sum's kernel (4 kernels before)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, classes, generator=g).bfloat16().requires_grad_()
    t = torch.randint(0, classes, (6,), generator=g)
    t[2] = -100
    fn = program(reduction, 0.1)
    jf = ir.jit(fn, executors=["triton"])
    out, expected = jf(x, t), fn(x, t)
    assert_close_as_contract(out, expected, classes)
    (gx,) = torch.autograd.grad(out, x)
    (ge,) = torch.autograd.grad(expected, x)
    assert_close_as_contract(gx, ge, 4 * classes)
    kernels = triton_exec.last_kernels(jf)
    assert [k.direction for k in kernels] == ["forward", "forward", "backward"]
    assert torch_reductions(jf) == []


def test_a_long_row_is_read_once_and_its_scalars_once_per_row():
    """A row past ROW_LIMIT: one loop over its blocks holds the max, the log-sum-exp (online)
    and nothing else, one load and no select per element; the target and its logit are loaded once per row, outside the loop (as
    [ROWS] tiles). Compiled for sm_90: every access at the width the analysis proved, and the
    loads narrower than 16 B are the per-row ones only (a few, not one per lane)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, LONG + 127, generator=g).bfloat16().requires_grad_()   # rows of 16 B
    t = torch.randint(0, LONG + 127, (4,), generator=g)
    jf = ir.jit(program("mean", 0.0), executors=["triton"])
    out = jf(x, t)
    torch.autograd.grad(out, x)
    rows, final, backward = triton_exec.last_kernels(jf)
    before, _, loop = rows.source.partition("for col_start")
    loop, _, after = loop.partition("\n    v")      # the loop's body: its indented lines
    assert rows.source.count("for col_start") == 1
    assert loop.count("tl.load(") == 1 and "tl.load(x_ptr" in loop
    # outside the row the load gives the max's -inf itself (no select per element), and the
    # terms are the exp2 instruction's
    assert "other=float('-inf')" in loop and "tl.where(" not in loop.split("block's max")[0]
    assert loop.count("libdevice.exp2(") == 2 and "libdevice.exp(" not in loop
    assert "[ROWS])" in after and "x_ptr" in after      # the target's logit: one per row
    for record in (rows, backward):
        assert record.vector_width == record.analysis_width
        assert max(w for label, w in record.analysis_width.items() if " x " in label) == 8
        narrow = sum(n for w, n in record.access_widths(arch=90)["ld"].items() if w < 16)
        assert narrow <= 16, (record.name, record.access_widths(arch=90))


LIGER_CE = 4.86     # Liger-Kernel 0.8.5's cross_entropy kernel, B/warp-instr, sm_90 offline, its
                    # two loops' code 4 times each, on Triton 3.6 / 3.9: 4.85 / 4.86
                    # (`python perf/reduction_cost.py "cross-entropy forward"`, perf/RESULTS.md)


def test_static_cost_at_llama_shapes():
    """Offline sm_90 at Llama-3-8B's vocabulary (1024 x 128,256, bf16, mean; no kernel runs):
    the forward is the rows' kernel (one loop over the row) and the final sum's, the gradient
    one kernel, each at least Liger's bytes per warp-instruction; the rows' loop computes its
    terms with the exp2 instruction (`softmax_exp`), whose code is a fraction of the three
    kernels' it replaced (1881 SASS per block of the row, 4 warps)."""
    cost = perf_module("reduction_cost")
    (_, _, fn, args, _), = [c for c in cost.cases() if c[1] == "cross-entropy forward"]
    rows, final = cost.ours(fn, args, backward=False)
    (gradient,) = cost.ours(fn, args, backward=True)
    if rows.cost.counted != "SASS":
        pytest.skip("no nvdisasm in this Triton: the counts would be PTX's, not comparable")
    assert rows.trips == 32 and 0 < rows.cost.loop_instructions < 1881 / 4, rows.cost
    for row in (rows, final, gradient):
        assert row.bytes_per_issued > LIGER_CE, (row.kernel, row.cost.summary())


def test_a_per_row_value_of_a_reduction_read_elsewhere_stays_with_its_sum():
    """The per-row value leaves the final sum's group only where its reductions have no other
    reader: a max that softmax (or `x - m`) also reads is stored by that group anyway, and the
    sum's kernel reads it (3 kernels, not 4)."""
    def with_softmax(x):
        return torch.softmax(x, -1), (x.amax(-1) * 2).sum()

    def shifted(x):
        m = x.amax(-1, keepdim=True)
        return x - m, (m * 2).sum()
    x = torch.randn(8, 50, generator=torch.Generator().manual_seed(0))
    for fn in (with_softmax, shifted):
        jf = ir.jit(fn, executors=["triton"])
        for got, expected in zip(jf(x), fn(x)):
            assert_close_as_contract(got, expected, 50)
        assert len(triton_exec.last_kernels(jf)) == 3, fn.__name__


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("scale", [1.0, 4.0])
def test_values_eager_holds_in_the_inputs_dtype_round_there(dtype, scale):
    """Eager materializes the target's log-probability and the label-smoothing sum in the
    input's dtype: over 16,385 classes the fp16 sum passes 65504 and the loss is inf there,
    as eager's; bf16 holds it, rounded."""
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(3, LONG + 1, generator=g) * scale).to(dtype)
    t = torch.randint(0, LONG + 1, (3,), generator=g)
    fn = program("none", 0.1)
    out, expected = ir.jit(fn, executors=["triton"])(x, t), fn(x, t)
    assert torch.equal(out.isinf(), expected.isinf())
    if dtype == torch.float16:
        assert bool(expected.isinf().all())
    finite = ~expected.isinf()
    assert_close_as_contract(out[finite], expected[finite], x.shape[-1])
