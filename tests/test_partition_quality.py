"""Partition quality in real RoPE code (issue 28, item 3), counted in kernels per call:

- q and k rotated in one launch when they share cos/sin, also with GQA (k has fewer heads: its
  shape nests in q's, `triton_exec.horizontal`), forward and fused backward, at the access
  widths of q's kernel alone: transformers' rotate-half RoPE, LitGPT's partial rotation, the
  README's RoPE; and random pairs of groups sharing inputs;
- a cheap producer read by two groups (M-RoPE's `cat` of cos/sin sections, as Qwen2-VL wrote it)
  recomputed in each, an expensive one stored once (`triton_exec.fusion.recomputed`);
- GQA's `repeat_kv` of k and v folded into the kernel that rotates q and k.

Every case checks values (bit for bit: data movement and `+ - *` round as eager's) and
gradients against eager.
"""
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, note, settings
from hypothesis import strategies as st

import ir
import triton_exec
from ir.examples import rope as readme_rope
from perf_modules import perf_module
from programs import TOLERANCES

MODES = ["constant values", "symbolic values"]


# ---- the RoPE forms, as their libraries write them ----------------------------------------

def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def hf_rope(q, k, cos, sin):
    """transformers' `apply_rotary_pos_emb` (Llama): cos/sin [B, T, D]."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


def litgpt_rope(q, k, cos, sin):
    """LitGPT's partial rotation: the first cos.shape[-1] columns rotated, the rest passed."""
    n = cos.size(-1)

    def apply(x):
        xr = x[..., :n]
        rotated = torch.cat((-xr[..., n // 2:], xr[..., : n // 2]), dim=-1)
        return torch.cat(((xr * cos + rotated * sin).to(x.dtype), x[..., n:]), dim=-1)
    return apply(q), apply(k)


def readme_qk(q, k, cos, sin):
    return readme_rope(q, cos, sin, cos.size(-1)), readme_rope(k, cos, sin, cos.size(-1))


def mrope(q, k, cos, sin):
    """Qwen2-VL's `apply_multimodal_rotary_pos_emb` (transformers 4.x): cos/sin [3, B, T, D],
    one section of the head per position kind (temporal, height, width), in Qwen2-VL's
    proportions (16, 24, 24 of 128)."""
    d = q.shape[-1]
    sections = [d // 8, 3 * d // 16, 3 * d // 16] * 2
    cos = torch.cat([m[i % 3] for i, m in enumerate(cos.split(sections, dim=-1))], dim=-1)
    sin = torch.cat([m[i % 3] for i, m in enumerate(sin.split(sections, dim=-1))], dim=-1)
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


def repeat_kv(x, n_rep: int):
    """transformers' `repeat_kv`: [B, Hkv, T, D] -> [B, Hkv * n_rep, T, D]."""
    b, h, t, d = x.shape
    return x[:, :, None, :, :].expand(b, h, n_rep, t, d).reshape(b, h * n_rep, t, d)


def hf_attention_inputs(q, k, v, cos, sin):
    q, k = hf_rope(q, k, cos, sin)
    return q, repeat_kv(k, q.shape[1] // k.shape[1]), repeat_kv(v, q.shape[1] // v.shape[1])


FORMS = {"transformers": (hf_rope, "btd"), "litgpt": (litgpt_rope, "partial"),
         "readme": (readme_qk, "partial"), "mrope": (mrope, "sections")}


def inputs(form, B=2, H=4, Hkv=2, T=8, D=16, dtype=torch.bfloat16, seed=0):
    g = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=g).to(dtype)
    cs_shape = {"btd": (B, T, D), "partial": (T, D // 2), "sections": (3, B, T, D)}[form]
    return randn(B, H, T, D), randn(B, Hkv, T, D), randn(*cs_shape), randn(*cs_shape)


def kernels(jfn, direction):
    return [k for k in triton_exec.last_kernels(jfn) if k.direction == direction]


def leaves(tensors, grad):
    return [t.detach().clone().requires_grad_(g) for t, g in zip(tensors, grad)]


def check_grads(fn, jfn, args, grad):
    """Gradients of every output against eager's, for the inputs marked in `grad`."""
    ours, eager = leaves(args, grad), leaves(args, grad)
    got, want = jfn(*ours), fn(*eager)
    g = torch.Generator().manual_seed(1)
    dys = [torch.randn(w.shape, generator=g).to(w.dtype) for w in want]
    wrt = [i for i, r in enumerate(grad) if r]
    got_g = torch.autograd.grad(got, [ours[i] for i in wrt], dys)
    want_g = torch.autograd.grad(want, [eager[i] for i in wrt], dys)
    rtol, atol = TOLERANCES[args[0].dtype]
    for a, b in zip(got_g, want_g):
        torch.testing.assert_close(a, b, rtol=rtol, atol=atol)


def widths_by_part(record, tensor_names) -> dict:
    """The analysis' width of each load of these tensors, by (tensor, part), and the stores'."""
    found = {}
    for a in record.lowered.accesses:
        if a.kind == "store" or a.tensor in tensor_names:
            found.setdefault((a.kind, a.tensor if a.kind == "load" else "out", a.what),
                             set()).add(a.width)
    return found


# ---- q and k in one launch ----------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("form", sorted(FORMS))
def test_q_and_k_sharing_cos_sin_are_one_launch_forward_and_backward(form, mode):
    fn, layout = FORMS[form]
    args = inputs(layout)
    jfn = ir.jit(fn, executors=["triton"], cache=mode)
    for got, want in zip(jfn(*args), fn(*args)):
        assert torch.equal(got, want)
    assert len(kernels(jfn, "forward")) == 1
    assert "_fusion_" in str(ir.last_traces(jfn)[-1]) and not any(
        "torch" in r for r in ir.explain(jfn, *args).as_dict()["left_to_torch"])
    check_grads(fn, jfn, args, (True, True, False, False))
    assert len(kernels(jfn, "backward")) == 1


@pytest.mark.parametrize("form", ["transformers", "litgpt"])
def test_one_launch_keeps_the_widths_of_q_alone(form):
    """Each access of q's part of the merged kernel is as wide as in q's kernel alone, and k's
    accesses as wide as q's: the nesting mask is along the rows, never along the columns."""
    fn, layout = FORMS[form]
    q, k, cos, sin = inputs(layout, H=8, Hkv=2, T=16, D=64)
    both = ir.jit(fn, executors=["triton"])
    both(q, k, cos, sin)
    alone = ir.jit(lambda q, cos, sin: fn(q, q, cos, sin)[0], executors=["triton"])
    alone(q, cos, sin)
    (merged,), (single,) = triton_exec.last_kernels(both), triton_exec.last_kernels(alone)
    q_widths = widths_by_part(single, {"q", "cos", "sin"})
    assert widths_by_part(merged, {"q", "cos", "sin"}) == q_widths
    k_widths = {(kind, "q" if t == "k" else t, what): w
                for (kind, t, what), w in widths_by_part(merged, {"k"}).items()}
    assert all(w == q_widths[key] for key, w in k_widths.items() if key in q_widths)
    assert merged.vector_width == merged.analysis_width    # what the sm_90 PTX does


@st.composite
def nested_pairs(draw):
    """Two groups reading one shared input broadcast to both, of shapes that nest or not."""
    rank = draw(st.integers(2, 4))
    D = draw(st.sampled_from([4, 8, 12, 16]))
    a = [draw(st.integers(1, 4)) for _ in range(rank - 1)]
    nest = draw(st.booleans())
    b = [draw(st.integers(1, s)) if nest else draw(st.integers(1, 4)) for s in a]
    shared = [s if s == t and draw(st.booleans()) else 1 for s, t in zip(a, b)] + [D]
    ops = draw(st.lists(st.sampled_from(["rotate", "scale", "pad", "cast", "partial"]),
                        min_size=2, max_size=2))
    dtype = draw(st.sampled_from([torch.float32, torch.bfloat16]))
    mode = draw(st.sampled_from(MODES))
    return tuple(a) + (D,), tuple(b) + (D,), tuple(shared), ops, dtype, mode


def _group(op, x, c):
    h = x.shape[-1] // 2
    if op == "rotate":
        return x * c + rotate_half(x) * c
    if op == "scale":
        return (x - c) * 2
    if op == "pad":
        return F.pad(x[..., 2:], (0, 2)) * c
    if op == "cast":
        return (x + c).float()
    return torch.cat((x[..., :h] * c[..., :h], x[..., h:]), dim=-1)


def _nests(a, b):
    return all(x <= y for x, y in zip(a, b)) or all(x >= y for x, y in zip(a, b))


@settings(max_examples=12)
@given(nested_pairs())
def test_random_pairs_of_groups_sharing_an_input(case):
    a_shape, b_shape, c_shape, (op_a, op_b), dtype, mode = case
    note(f"{a_shape} {op_a} / {b_shape} {op_b}, shared {c_shape}, {dtype}, {mode}")
    g = torch.Generator().manual_seed(0)
    x, y, c = (torch.randn(s, generator=g).to(dtype) for s in (a_shape, b_shape, c_shape))

    def fn(x, y, c):
        return _group(op_a, x, c), _group(op_b, y, c)
    jfn = ir.jit(fn, executors=["triton"], cache=mode)
    for got, want in zip(jfn(x, y, c), fn(x, y, c)):
        assert got.dtype == want.dtype and torch.equal(got, want)
    assert len(kernels(jfn, "forward")) == (1 if _nests(a_shape, b_shape) else 2)
    check_grads(fn, jfn, (x, y, c), (True, True, False))
    # the backward groups share no input where one gradient does not read c: with runtime
    # sizes, such groups stay apart (no guard relates their sizes)
    backward = len(kernels(jfn, "backward"))
    if _nests(a_shape, b_shape) and mode == "constant values":
        assert backward == 1
    assert backward <= 2


@pytest.mark.parametrize("reader", ["cumsum", "dropout"])
def test_readers_of_the_earlier_group_move_after_the_merged_launch(reader):
    """q's result is read by a torch call before k's group is computed: one launch for both
    moves that call after it where it is deterministic (cumsum); a random op (dropout) keeps
    its place in the order of random draws, and q and k stay two launches."""
    def fn(q, k, cos, sin):
        q2, _ = hf_rope(q, q, cos, sin)
        read = torch.cumsum(q2, -1) if reader == "cumsum" else F.dropout(q2, 0.5)
        _, k2 = hf_rope(k, k, cos, sin)
        return read, k2
    args = inputs("btd", dtype=torch.float32)
    jfn = ir.jit(fn, executors=["triton"])
    torch.manual_seed(0)
    got = jfn(*args)
    torch.manual_seed(0)
    for a, b in zip(got, fn(*args)):
        assert torch.equal(a, b)
    assert len(kernels(jfn, "forward")) == (1 if reader == "cumsum" else 2)


# ---- a cheap producer read by two groups --------------------------------------------------

def test_mrope_sections_are_recomputed_in_the_rope_kernel():
    q, k, cos, sin = inputs("sections")
    jfn = ir.jit(mrope, executors=["triton"])
    for got, want in zip(jfn(q, k, cos, sin), mrope(q, k, cos, sin)):
        assert torch.equal(got, want)
    (record,) = kernels(jfn, "forward")
    # the sections of cos and sin are read from the inputs, each piece once for q and k
    assert {a.tensor for a in record.lowered.accesses if a.kind == "load"} == {
        "q", "k", "cos", "sin"}


@pytest.mark.parametrize("cheap", [True, False])
def test_a_shared_producer_is_recomputed_only_when_cheap(cheap):
    """`a * b` of two full tensors reads twice what it writes: computed once (by its first
    reader's kernel, which stores it for the other: `fusion._stored_by`); `torch.cat` of two
    halves reads what it writes: recomputed in each consumer's kernel."""
    def fn(a, b, x, y):
        shared = torch.cat((a, b), dim=-1) if cheap else a * b
        return x + shared, (y * shared).sum(-1)
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(4, 4 if cheap else 8, generator=g) for _ in range(2))
    x, y = torch.randn(4, 8, generator=g), torch.randn(4, 8, generator=g)
    jfn = ir.jit(fn, executors=["triton"])
    for got, want in zip(jfn(a, b, x, y), fn(a, b, x, y)):
        torch.testing.assert_close(got, want)
    computing = [r for r in kernels(jfn, "forward")
                 if {"a", "b"} <= {t.tensor for t in r.lowered.accesses if t.kind == "load"}]
    assert len(computing) == (2 if cheap else 1)


# ---- GQA's repeat_kv -----------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_repeat_kv_of_k_and_v_is_folded_into_the_rope_kernel(mode):
    q, k, cos, sin = inputs("btd", H=4, Hkv=2)
    v = torch.randn(k.shape).to(k.dtype)
    jfn = ir.jit(hf_attention_inputs, executors=["triton"], cache=mode)
    got, want = jfn(q, k, v, cos, sin), hf_attention_inputs(q, k, v, cos, sin)
    for a, b in zip(got, want):
        assert torch.equal(a, b) and a.stride() == b.stride()
    # k's repeat is written by the kernel that rotates q and k; v's repeat joins it too, but in
    # symbolic mode v (an argument of its own sizes, sharing no input with q and k) stays a
    # kernel of its own: merging would guard its sizes against q's
    forward = kernels(jfn, "forward")
    assert len(forward) == (1 if mode == "constant values" else 2)
    assert any({"q", "k"} <= {a.tensor for a in r.lowered.accesses} for r in forward)
    check_grads(hf_attention_inputs, jfn, (q, k, v, cos, sin), (True, True, True, False, False))
    # the backward: the rotation's kernel and the sums of repeat_kv's gradients over the repeats
    # (k's and v's, fused column reductions), nothing left to torch
    assert len(kernels(jfn, "backward")) <= 3


def test_the_benchmark_counts_one_launch_per_rope_call_against_eager():
    """`perf/rope_partition.py`'s row for transformers' RoPE: one kernel each way, checked
    against eager, fewer launches than eager's."""
    module = perf_module("rope_partition")
    row = module.measure(*module.FORMS[0], with_cost=False)
    assert row["ok"] and (row["forward"], row["backward"]) == (1, 1)
    assert row["launches"][0] < row["eager"][0] and row["launches"][1] < row["eager"][1]


@pytest.mark.parametrize("whole", ["1", "0"])
def test_a_recomputed_value_reads_what_another_group_stores(whole, monkeypatch):
    """A cheap value recomputed in two groups (`t * 0.5`) reads a value one of them computes and
    stores (`fusion._stored_by`): that group outputs it for the other. The backward of this
    program has that shape (found by the Dynamo split property); before, the second group's
    backward read a value no kernel wrote."""
    monkeypatch.setenv("IR_WHOLE_BACKWARD", whole)

    def fn(x, w):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h = (x @ w) / 8 * 2 + 1
        h = (h.mT + x) * 0.5
        return torch.sin(h) * 0.5 + x
    g = torch.Generator().manual_seed(0)
    x, w = (torch.randn(4, 4, generator=g, requires_grad=True) for _ in range(2))
    jfn = ir.jit(fn, executors=["triton"])
    got, want = jfn(x, w), fn(x, w)
    torch.testing.assert_close(got, want)
    grad = torch.randn(4, 4, generator=g)
    for a, b in zip(torch.autograd.grad(got, (x, w), grad), torch.autograd.grad(want, (x, w), grad)):
        torch.testing.assert_close(a, b, rtol=1.6e-2, atol=1e-2)    # bf16 inside the block
