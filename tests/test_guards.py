"""Guard soundness, one class of defect per test: a cache entry serves only the inputs its
kernels are valid for (inner-dim merges, tuple arguments, negative-bit views, prologue order,
int arguments used as values, values whose repr is not Python, the alignment class). The
generated property over layout sequences is in test_soundness.py."""
import enum

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import ir
import triton_exec

MODES = ["constant values", "symbolic values"]


def call(j, fn, *args):
    torch.testing.assert_close(j(*args), fn(*args), rtol=1e-6, atol=1e-6, equal_nan=True)


def double(x):
    return x * 2


def load_widths(j) -> list:
    return [a.width for k in triton_exec.last_kernels(j) for a in k.lowered.accesses
            if a.kind == "load"]


# ---- 1. inner-dim merge: strides must compose, innermost as assumed ---------------------------

@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("first, second", [
    (lambda: torch.arange(96.).view(4, 24)[:, ::3], lambda: torch.arange(96.).view(4, 24)[:, :8]),
    (lambda: torch.tensor(3.).expand(4, 8), lambda: torch.arange(32.)[::4].expand(4, 8)),
    (lambda: torch.arange(64.).view(8, 8)[:, :4], lambda: torch.arange(32.).view(8, 4)),
])
def test_merged_inner_dims_serve_only_composing_strides(mode, first, second):
    j = ir.jit(double, executors=["triton"], cache=mode)
    call(j, double, first())
    call(j, double, second())


def test_merge_guard_is_the_composition():
    j = ir.jit(double, executors=["triton"])
    x = torch.arange(96.).view(4, 24)[:, ::3]
    call(j, double, x)
    assert "x_strides[0] == x_strides[1] * 8" in str(ir.last_prologue(j))


# ---- 2. tuple items paired with their proxies by position -------------------------------------

def unpack_tuple(t):
    c, x, y = t
    return y * c + 1


@pytest.mark.parametrize("mode", MODES)
def test_tuple_items_keep_their_positions(mode):
    j = ir.jit(unpack_tuple, executors=["triton"], cache=mode)
    x, y = torch.randn(4, 8), torch.randn(4, 16)
    call(j, unpack_tuple, (2.0, x, y[:, ::2]))
    call(j, unpack_tuple, (2.0, x, y[:, ::2]))
    assert ir.cache_stats(j).hits == 1        # the building call passes its own prologue


def test_debug_switch_refuses_an_entry_that_rejects_its_call():
    j = ir.jit(double, executors=["torch"])
    call(j, double, torch.randn(3))
    entry = j.history[0]
    entry.prologue.fn = lambda *args: False     # as a guard wrongly derived would
    with pytest.raises(AssertionError, match="rejects its arguments"):
        j(torch.randn(3))


# ---- 3. views with the negative bit -----------------------------------------------------------

def neg_views():
    z = torch.randn(4, 8, dtype=torch.complex64)
    yield z.conj().imag
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.int32):
        yield torch._neg_view(torch.arange(32).view(4, 8).to(dtype))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("view", range(5))
def test_negative_bit_views_are_resolved(mode, view):
    x = list(neg_views())[view]
    assert x.is_neg()
    j = ir.jit(double, executors=["triton"], cache=mode)
    call(j, double, x)
    call(j, double, x.resolve_neg())         # the plain tensor: another entry
    call(j, double, x)
    assert ir.cache_stats(j).misses == 2


# ---- 5. prologue order: a prologue never raises -----------------------------------------------

def sliced_by_quotient(x, k: int, m: int):
    return x[:, : (8 // k) % m] * 2


def test_a_divisor_is_checked_before_the_division():
    j = ir.jit(sliced_by_quotient, executors=["triton"], cache="symbolic values")
    x = torch.randn(4, 8)
    call(j, sliced_by_quotient, x, 2, 3)
    prologue = ir.last_prologue(j)
    assert prologue(x, 0, 3) is False and prologue(x, 2, 0) is False
    source = str(prologue)
    assert source.index("k != 0") < source.index("8 // k")


SIZE_OPS = ["+", "-", "*", "//", "%"]


@st.composite
def size_expressions(draw, depth=3):
    """A Python expression over the int arguments k, m and the size n of x."""
    if depth == 0 or draw(st.booleans()):
        return draw(st.sampled_from(["k", "m", "n", "2", "3", "-1"]))
    op = draw(st.sampled_from(SIZE_OPS))
    return f"({draw(size_expressions(depth - 1))} {op} {draw(size_expressions(depth - 1))})"


@st.composite
def quotients(draw):
    """A size expression divided (// or %) by one that can be 0 for other k and m."""
    divisor = draw(st.sampled_from(["k", "m", "(k - m)", "(m * k - 2)", "(k % m)"]))
    op = draw(st.sampled_from(["//", "%"]))
    return f"({draw(size_expressions())} {op} {divisor})"


@settings(max_examples=25)
@given(expr=quotients(), k=st.integers(1, 5), m=st.integers(1, 5),
       others=st.lists(st.tuples(st.integers(-3, 3), st.integers(-3, 3)), min_size=5,
                       max_size=5))
def test_prologues_never_raise(expr, k, m, others):
    source = f"def f(x, k, m):\n    n = x.shape[-1]\n    return x[:, : {expr}] + 1\n"
    ns = {}
    exec(source, ns)
    f = ns["f"]
    x = torch.randn(3, 6)
    try:
        f(x, k, m)
    except ZeroDivisionError:     # eager raises too: nothing to trace
        return
    j = ir.jit(f, executors=["triton"], cache="symbolic values")
    call(j, f, x, k, m)
    prologue = ir.last_prologue(j)
    for k2, m2 in others:
        accepted = prologue(x, k2, m2)
        assert accepted in (True, False)
        if accepted:
            torch.testing.assert_close(j(x, k2, m2), f(x, k2, m2))


# ---- 6. int arguments used as values in symbolic mode -----------------------------------------

VALUE_USES = {
    "pad value": lambda x, n: F.pad(x, (2, 2), value=n),
    "full_like": lambda x, n: torch.full_like(x, n) + x,
    "where": lambda x, n: torch.where(x > 0, x, n),
    "where int": lambda x, n: torch.where(x > 0, x.int(), n),
    "alpha": lambda x, n: x.add(x, alpha=n),
}


@pytest.mark.parametrize("use", sorted(VALUE_USES))
def test_int_arguments_as_values_reach_the_kernel(use):
    fn = VALUE_USES[use]
    j = ir.jit(fn, executors=["triton"], cache="symbolic values")
    x = torch.randn(4, 8)
    for n in (3, -7, 5):
        call(j, fn, x, n)
    assert (ir.cache_stats(j).misses, ir.cache_stats(j).hits) == (1, 2)


# ---- 7. values whose repr is not Python -------------------------------------------------------

class Heads(enum.IntEnum):
    TWO = 2


class Scale(float, enum.Enum):
    HALF = 0.5


def scaled(x, h):
    return x * h


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("value", [Heads.TWO, Scale.HALF, np.float64(1.5)])
def test_number_subclasses_are_written_as_numbers(mode, value):
    j = ir.jit(scaled, executors=["triton"], cache=mode)
    x = torch.randn(4, 8)
    call(j, scaled, x, value)
    call(j, scaled, x, value)
    assert ir.cache_stats(j).hits == 1
    call(j, scaled, x, value.value if isinstance(value, enum.Enum) else float(value))
    assert ir.cache_stats(j).misses == 2      # the plain number is another type, another entry


def test_render_refuses_objects_without_a_literal():
    from ir.trace import render
    assert render(Heads.TWO) == "2" and render(np.float64(0.5)) == "0.5"
    with pytest.raises(TypeError):
        render(object())


# ---- issue 11, item 11: the alignment order ---------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_an_aligned_call_after_a_misaligned_one_gets_wide_accesses(mode):
    j = ir.jit(double, executors=["triton"], cache=mode)
    base = torch.randn(8 * 32 + 1)
    misaligned = base[1:].view(8, 32)
    call(j, double, misaligned)
    assert load_widths(j) == [1]
    call(j, double, torch.randn(8, 32))
    assert load_widths(j) == [4]
    call(j, double, misaligned)               # each class hits its own entry
    assert load_widths(j) == [1]
    call(j, double, torch.randn(8, 32))
    assert (ir.cache_stats(j).misses, ir.cache_stats(j).hits) == (2, 2)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("narrow, wide", [
    (lambda: torch.randn(8, 64)[:, ::2], lambda: torch.randn(8, 32)),            # inner stride
    (lambda: torch.randn(8, 34)[:, :32], lambda: torch.randn(8, 36)[:, :32]),    # row stride
])
def test_a_call_without_the_narrowing_layout_gets_its_own_wide_entry(mode, narrow, wide):
    j = ir.jit(double, executors=["triton"], cache=mode)
    call(j, double, narrow())
    narrow_widths = load_widths(j)
    call(j, double, wide())
    assert load_widths(j) > narrow_widths
    call(j, double, narrow())
    assert load_widths(j) == narrow_widths and ir.cache_stats(j).misses == 2


def contiguous_then_cast(x):
    t = x.contiguous()      # torch returns x itself: a view with x's negative bit
    return t.half(), t


@pytest.mark.parametrize("mode", MODES)
def test_a_torch_made_view_of_a_negative_bit_argument_is_resolved(mode):
    j = ir.jit(contiguous_then_cast, executors=["triton"], cache=mode)
    x = torch.rand(4, 8) + 1
    call(j, contiguous_then_cast, x)
    call(j, contiguous_then_cast, torch._neg_view(-x))
