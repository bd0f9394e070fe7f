"""Partition of a whole-trace backward (issue 28: the decoder layer's backward in <= 8 kernels),
as general rules checked on random programs against eager, values and gradients:

- a value several groups read, none of which can store it for the others (a column sum and a row
  reduction: a norm's weight gradient and input gradient reading the accumulated gradient
  `a + b`), is recomputed in each reader where that moves no more bytes than a kernel of its
  own (`triton_exec.recompute`), else stored by one kernel;
- independent groups reading the same inputs are one launch even where a vector-Jacobian
  product of the backward sits between them (SiLU's backward, split by the up projection's
  gradient: `ir.passes.repeatable`); groups with reductions over the same dims too (a layer
  norm's weight and bias gradients, GQA's sums over the repeats of k's and v's gradients:
  `triton_exec.row_groups.mergeable`);
- the decoder layer of `perf/decoder_layer.py`: backward in at most 8 Triton kernels (11 before),
  and at most 6 forward and 8 backward memory-bound kernels as that benchmark counts them.
"""
import pytest
import torch
import torch.nn.functional as F
from hypothesis import example, given, note, settings
from hypothesis import strategies as st

import ir
import triton_exec
from perf_modules import perf_module
from programs import TOLERANCES


def kernels(jfn, direction):
    return [k for k in triton_exec.last_kernels(jfn) if k.direction == direction]


def check_values_and_grads(fn, jfn, args, dtype):
    """fn and jfn on copies of args (all needing grad): outputs and gradients within dtype's
    tolerance (a reduction's sum order, README's "Numerical contract"); None where eager's is."""
    rtol, atol = TOLERANCES[dtype]
    ours = [a.detach().clone().requires_grad_() for a in args]
    ref = [a.detach().clone().requires_grad_() for a in args]
    got, want = jfn(*ours), fn(*ref)
    got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=rtol, atol=atol)
    g = torch.Generator().manual_seed(1)
    cts = [torch.randn(w.shape, generator=g).to(w.dtype) for w in want]
    for a, b in zip(torch.autograd.grad(got, ours, cts, allow_unused=True),
                    torch.autograd.grad(want, ref, cts, allow_unused=True)):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b, rtol=rtol, atol=atol)


# ---- a value read by reduction groups of different kinds ---------------------------------

READERS = {       # name -> (the reader, the dims it reduces)
    "row sum": (lambda s, y: (s * y).sum(-1), "row"),
    "row amax": (lambda s, y: (s + y).amax(-1), "row"),
    "column sum": (lambda s, y: (s - y).sum(0), "column"),
    "column mean": (lambda s, y: torch.maximum(s, y).mean(0), "column"),
}       # each reads s through an op of its own: s is the one value they share


def reads_per_write(n: int) -> int:
    """Bytes read per byte written by the shared value of `shared_by`: `a * 2`, or n full
    summands."""
    return 1 if n == 1 else n


def shared_by(n: int, readers: list):
    def fn(y, *summands):
        s = summands[0] * 2 if n == 1 else sum(summands[1:], summands[0])
        return tuple(READERS[r][0](s, y) for r in readers)
    return fn


@settings(max_examples=6)
@example(n=2, readers=["column sum", "row sum"], rows=5, cols=16, dtype=torch.float32,
         mode="constant values")
@example(n=4, readers=["column mean", "row amax", "row sum"], rows=3, cols=4,
         dtype=torch.bfloat16, mode="symbolic values")
@given(n=st.integers(1, 4), readers=st.lists(st.sampled_from(sorted(READERS)), min_size=2,
                                              max_size=3, unique=True),
       rows=st.integers(1, 9), cols=st.sampled_from([4, 16, 24]),
       dtype=st.sampled_from([torch.float32, torch.bfloat16]),
       mode=st.sampled_from(["constant values", "symbolic values"]))
def test_a_value_read_by_reduction_groups_is_recomputed_where_it_pays(n, readers, rows, cols,
                                                                      dtype, mode):
    note(f"{n} summands read by {readers}, [{rows}, {cols}] {dtype}, {mode}")
    fn = shared_by(n, readers)
    g = torch.Generator().manual_seed(0)
    args = [torch.randn(rows, cols, generator=g).to(dtype) for _ in range(n + 1)]
    jfn = ir.jit(fn, executors=["triton"], cache=mode)
    check_values_and_grads(fn, jfn, args, dtype)
    # one kernel per kind of reduction (the readers reducing the same dims are one launch, the
    # others groups apart), and one more for the shared value only where the k readers reading
    # its inputs would read more than a kernel writing it once: (k - 1) R > (k + 1) W
    k = len(readers)
    stored = (k - 1) * reads_per_write(n) > k + 1
    assert len(kernels(jfn, "forward")) == len({READERS[r][1] for r in readers}) + stored


# ---- a norm's backward reading an accumulated gradient; an activation split by a vjp -------

ACTIVATIONS = {"silu": F.silu, "gelu": F.gelu, "tanh": torch.tanh, "sigmoid": torch.sigmoid}


def hand_rms_norm(x, w, b):
    """transformers' LlamaRMSNorm (b unused)."""
    variance = x.float().pow(2).mean(-1, keepdim=True)
    return w * (x.float() * torch.rsqrt(variance + 1e-6)).to(x.dtype)


NORMS = {
    "hand-written RMSNorm": (hand_rms_norm, 1),
    "F.rms_norm": (lambda x, w, b: F.rms_norm(x, (x.shape[-1],), w, 1e-6), 1),
    "F.layer_norm": (lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b), 2),
}


def gated_block(norm: str, act: str, projections: int):
    """x + (act(h W0^T) * h W1^T * ...) Wd^T, h = norm(x): the norm's output read by
    `projections` matmuls, so its gradient accumulates their gradients."""
    def fn(x, w, b, wd, *ws):
        h = NORMS[norm][0](x, w, b)
        gate = ACTIVATIONS[act](h @ ws[0].mT)
        for wi in ws[1:]:
            gate = gate * (h @ wi.mT)
        return x + gate @ wd.mT
    return fn


@settings(max_examples=6)
@example(norm="hand-written RMSNorm", act="silu", projections=2, rows=4, d=16, hidden=48)
@example(norm="F.layer_norm", act="gelu", projections=3, rows=3, d=8, hidden=16)
@given(norm=st.sampled_from(sorted(NORMS)), act=st.sampled_from(sorted(ACTIVATIONS)),
       projections=st.integers(1, 3), rows=st.integers(1, 6), d=st.sampled_from([8, 16, 32]),
       hidden=st.sampled_from([16, 48]))
def test_a_norm_and_gated_activation_backward_fuses_across_vjps(norm, act, projections, rows,
                                                                d, hidden):
    note(f"{norm}, {act}, {projections} projections, [2, {rows}, {d}] hidden {hidden}")
    fn = gated_block(norm, act, projections)
    g = torch.Generator().manual_seed(0)
    args = [torch.randn(2, rows, d, generator=g), torch.randn(d, generator=g),
            torch.randn(d, generator=g), torch.randn(d, hidden, generator=g) / 4,
            *[torch.randn(hidden, d, generator=g) / 4 for _ in range(projections)]]
    jfn = ir.jit(fn, executors=["triton"])
    check_values_and_grads(fn, jfn, args, torch.float32)
    assert ir.last_entry(jfn).extra["backward"].startswith("one for the whole trace")
    # the activation's backward: one kernel (its parts around the vjps merged); the norm's: the
    # column sums of its weights' gradients (one kernel) and the input gradient's row
    # reduction, each recomputing the accumulated gradient unless storing it moves fewer bytes
    readers = NORMS[norm][1] + 1
    stored = (readers - 1) * projections > readers + 1
    assert len(kernels(jfn, "backward")) == 3 + stored


# ---- the decoder layer ----------------------------------------------------------------------

def test_the_decoder_layer_backward_is_at_most_8_kernels():
    module = perf_module("decoder_layer")
    torch.manual_seed(0)
    layer = module.DecoderLayer()
    x, cos, sin = module.layer_inputs()
    jlayer = ir.jit(layer, executors=["triton"])
    params = list(layer.parameters())
    leaf = x.clone().requires_grad_()
    out, expected = jlayer(leaf, cos, sin), layer(x.requires_grad_(), cos, sin)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
    for a, b in zip(torch.autograd.grad(out, [leaf] + params, g),
                    torch.autograd.grad(expected, [x] + params, g)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert len(kernels(jlayer, "backward")) <= 8


def test_the_decoder_layer_memory_bound_kernels_as_perf_counts_them():
    """perf/decoder_layer.py's count (Triton kernels and the memory-bound ATen ops left to
    PyTorch): at most 6 forward and 8 backward (no reduction of its tiny layer is split)."""
    module = perf_module("decoder_layer")
    torch.manual_seed(0)
    layer = module.DecoderLayer()
    with module.launches_unseen():      # the interpreter's own torch calls uncounted
        counts = module.count(ir.jit(layer, executors=["triton"]), layer,
                              module.layer_inputs())
    assert counts["forward"][0] + sum(counts["forward"][1].values()) <= 6
    assert counts["backward"][0] + sum(counts["backward"][1].values()) <= 8


@pytest.mark.parametrize("between", ["matmul", "view"])
@pytest.mark.parametrize("reads", ["a part", "all"])
def test_unrelated_groups_merge_only_where_nothing_waits(between, reads):
    """Two independent groups reading no input in common are one launch where nothing but free
    work (a view) runs between them, or where the tensors the earlier one reads last take no
    more bytes than its result: else its launch, waiting for the later one's across a matmul,
    would hold them meanwhile (a model's backward would hold every layer's)."""
    def fn(x, y, w):
        u = torch.cumsum(x, -1)                     # read last by the first group
        a = torch.sin(u[:, :4] if reads == "a part" else u) * 2
        m = torch.matmul(a, w[:a.shape[-1]]) if between == "matmul" else a.mT
        return m, torch.cos(y[:, :a.shape[-1]]) * 3
    g = torch.Generator().manual_seed(0)
    args = [torch.randn(4, 8, generator=g), torch.randn(4, 8, generator=g),
            torch.randn(8, 8, generator=g)]
    jfn = ir.jit(fn, executors=["triton"])
    for got, want in zip(jfn(*args), fn(*args)):
        torch.testing.assert_close(got, want)
    waits = between == "matmul" and reads == "a part"
    assert len(kernels(jfn, "forward")) == (2 if waits else 1)
