"""Copies as kernels: a materializing copy (`.contiguous()` of a view that is not contiguous, a
reshape of a view that cannot view, clone) is a fusible op with its grad rule. Alone it is one
kernel; with elementwise work before or after it, one kernel with that work. Pure views stay free
(no kernel, eager's aliasing): `.contiguous()` of a contiguous view returns that view, a reshape
that can view returns a view. Over random permutes, reshapes and layouts, in both cache modes:
the jit copies exactly where eager copies, values bit for bit, gradients equal eager's; Swin's
window partition and reverse without padding are one kernel at 16-byte accesses (sm_90 PTX)."""
import pytest
import torch
from hypothesis import event, given, note, settings
from hypothesis import strategies as st

import ir
import triton_exec
from semantics import EXAMPLES, laid_out

MODES = ("constant values", "symbolic values")
NEIGHBOURS = {
    "alone": (lambda x: x, lambda y: y),
    "before": (lambda x: x * 2 + 1, lambda y: y),
    "after": (lambda x: x, lambda y: y - 3),
}


def storage(t):
    return t.untyped_storage().data_ptr()


@st.composite
def copy_cases(draw):
    """(shape, perm, how): a permute of a rank 2-4 tensor, then `.contiguous()` or a reshape
    merging its last two dims (which views or copies, as the layout decides)."""
    rank = draw(st.integers(2, 4))
    shape = tuple(draw(st.sampled_from([1, 2, 3, 4, 8])) for _ in range(rank))
    perm = tuple(draw(st.permutations(range(rank))))
    how = draw(st.sampled_from(["contiguous", "reshape"]))
    return shape, perm, how


def _program(perm, how, neighbour):
    before, after = NEIGHBOURS[neighbour]

    def program(x):
        y = before(x).permute(perm)
        y = (y.contiguous() if how == "contiguous"
             else y.reshape(*y.shape[:-2], y.shape[-2] * y.shape[-1]))
        return after(y)
    return program


@settings(max_examples=EXAMPLES)
@given(case=copy_cases(), neighbour=st.sampled_from(sorted(NEIGHBOURS)),
       mode=st.sampled_from(MODES), data=st.data())
def test_the_jit_copies_where_eager_copies(case, neighbour, mode, data):
    shape, perm, how = case
    x = data.draw(laid_out(torch.randn(shape)))
    fn = _program(perm, how, neighbour)
    note(f"{shape} stride {x.stride()} perm {perm} {how} {neighbour} {mode}")
    jfn = ir.jit(fn, executors=["triton"], cache=mode)
    x.requires_grad_()
    expected, result = fn(x), jfn(x)
    assert torch.equal(result, expected) and result.shape == expected.shape
    copies = storage(expected) != storage(x)
    kernels = [k for k in triton_exec.last_kernels(jfn) if k.direction == "forward"]
    event(f"{how} {neighbour}: " + ("copies" if copies else "views"))
    if neighbour == "alone" and not copies:     # a view: eager's, no kernel
        assert kernels == []
        assert result.data_ptr() == expected.data_ptr() and result.stride() == expected.stride()
    else:           # new memory: one kernel, the copy fused with its neighbour
        assert len(kernels) == 1, [k.source for k in kernels]
        assert storage(result) != storage(x)
        assert result.is_contiguous() or not expected.is_contiguous()   # a view of new memory
    dy = torch.randn(expected.shape)
    (want,) = torch.autograd.grad(expected, x, dy)
    (got,) = torch.autograd.grad(result, x, dy)
    assert torch.equal(got, want)


def _explained_groups(jfn, *args) -> str:
    text = str(ir.explain(jfn, *args))
    return text.split("Left to torch")[0]


@pytest.mark.parametrize("mode", MODES)
def test_permute_contiguous_is_one_kernel_named_a_copy(mode):
    x = torch.randn(2, 8, 16)
    fn = lambda x: x.permute(0, 2, 1).contiguous()       # noqa: E731
    jfn = ir.jit(fn, executors=["triton"], cache=mode)
    assert torch.equal(jfn(x), fn(x))
    (record,) = triton_exec.last_kernels(jfn)
    assert "2 ops: permute, copy" in _explained_groups(jfn, x)
    assert "free on PyTorch" not in str(ir.explain(jfn, x))
    fused = lambda x: (x.permute(0, 2, 1).contiguous() + 1) * x.permute(0, 2, 1)   # noqa: E731
    jfused = ir.jit(fused, executors=["triton"], cache=mode)
    torch.testing.assert_close(jfused(x), fused(x), rtol=0, atol=0)
    assert len(triton_exec.last_kernels(jfused)) == 1


def partition(x, w: int):
    """Swin's window partition without padding: [B, H, W, C] -> [B * H/w * W/w, w, w, C]."""
    B, H, W, C = x.shape
    x = x.view(B, H // w, w, W // w, w, C)
    return x.permute(0, 1, 3, 2, 4, 5).reshape(-1, w, w, C)


def reverse(windows, w: int, H: int, W: int):
    """Swin's window reverse: [B * H/w * W/w, w, w, C] -> [B, H, W, C]."""
    C = windows.shape[-1]
    x = windows.view(-1, H // w, W // w, w, w, C)
    return x.permute(0, 1, 3, 2, 4, 5).reshape(-1, H, W, C)


SWIN = {
    "partition": lambda x: partition(x, 4),
    "partition then scale": lambda x: partition(x, 4) * 0.5,
    "norm-like then partition": lambda x: partition(x * 2 + 1, 4),
    "reverse": lambda x: reverse(partition(x, 4) * 0.5, 4, 8, 8) + x,
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", sorted(SWIN))
def test_swin_windows_are_one_kernel_at_16_bytes(name, dtype):
    fn = SWIN[name]
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 8, 8, 32, generator=g).to(dtype).requires_grad_()
    jfn = ir.jit(fn, executors=["triton"])
    expected, result = fn(x), jfn(x)
    torch.testing.assert_close(result, expected, rtol=0, atol=0)
    dy = torch.randn(expected.shape, generator=g).to(dtype)
    (want,) = torch.autograd.grad(expected, x, dy)
    (got,) = torch.autograd.grad(result, x, dy)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    (record,) = [r for r in triton_exec.last_kernels(jfn) if r.direction == "forward"]
    assert "copy" in _explained_groups(jfn, x)
    widths = record.access_widths(arch=90)
    assert set(widths["ld"]) == {16} and set(widths["st"]) == {16}, widths
    assert record.vector_width == record.analysis_width
    assert min(record.analysis_width.values()) * x.element_size() == 16


def test_views_stay_free_and_alias_as_in_eager():
    """`.contiguous()` of a contiguous view and a reshape that can view: no kernel, eager's
    view (the input itself for the identity)."""
    x = torch.randn(4, 1, 8)
    for fn in (lambda x: x.contiguous(), lambda x: x.permute(1, 0, 2).contiguous(),
               lambda x: x[1:].reshape(-1), lambda x: x.transpose(0, 1).reshape(4, 8)):
        jfn = ir.jit(fn, executors=["triton"])
        expected, result = fn(x), jfn(x)
        assert triton_exec.last_kernels(jfn) == []
        assert result.data_ptr() == expected.data_ptr() and result.stride() == expected.stride()
        assert (result is x) == (expected is x)


@pytest.mark.parametrize("mode", MODES)
def test_a_reshape_of_a_transposed_input_is_a_copy_kernel(mode):
    """Eager's reshape of an input whose layout cannot view copies: one kernel, new memory; the
    entry is guarded on that layout, so a contiguous input gets eager's view, no kernel."""
    fn = lambda x: x.reshape(-1)        # noqa: E731
    jfn = ir.jit(fn, executors=["triton"], cache=mode)
    x = torch.randn(8, 4).t()
    result = jfn(x)
    assert torch.equal(result, fn(x)) and storage(result) != storage(x)
    (record,) = triton_exec.last_kernels(jfn)
    contiguous = torch.randn(4, 8)
    result = jfn(contiguous)
    assert torch.equal(result, fn(contiguous)) and result.data_ptr() == contiguous.data_ptr()
    assert triton_exec.last_kernels(jfn) == []
