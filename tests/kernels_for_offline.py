"""Tiny Triton kernels that tests/test_offline.py compiles offline to check PTX access widths."""

import triton
import triton.language as tl


@triton.jit
def masked_copy(src_ptr, dst_ptr, n_div_v, V: tl.constexpr, BLOCK: tl.constexpr):
    """Copy the first ``n_div_v * V`` elements; the bound is a multiple of V by construction."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_div_v * V
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


@triton.jit
def masked_copy_reversed_less(src_ptr, dst_ptr, n_div_v, V: tl.constexpr, BLOCK: tl.constexpr):
    """``masked_copy`` with the mask written ``c > idx`` (a form AxisInfo handles)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = n_div_v * V > offs
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


@triton.jit
def masked_copy_less_equal(src_ptr, dst_ptr, n_div_v, V: tl.constexpr, BLOCK: tl.constexpr):
    """``masked_copy`` with the same mask written ``idx <= c - 1`` (a form AxisInfo does not handle)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs <= n_div_v * V - 1
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


@triton.jit
def unmasked_copy(src_ptr, dst_ptr, BLOCK: tl.constexpr):
    """Copy one BLOCK-element tile per program, no mask."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs))


@triton.jit
def _doubled(x):
    return x * 2


@triton.jit
def doubling_copy(src_ptr, dst_ptr, BLOCK: tl.constexpr):
    """Copy through a ``@triton.jit`` helper (an InterpretedFunction under TRITON_INTERPRET=1)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst_ptr + offs, _doubled(tl.load(src_ptr + offs)))
