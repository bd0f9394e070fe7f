"""Horizontal fusion of outputs that nest, in a domain whose innermost dim is 2 (found in timm's
CoaT: its conv position encoding's [B, C, 2, 2] add merged with the [B, 17, 8, 2] factor
attention): pair tiling walks the dim before the pair with COLS, so an output smaller along it
was stored at the larger one's offsets (out of bounds: heap corruption under the interpreter).
Random nesting pairs of independent elementwise groups with a trailing dim of 2: values equal
eager's, in one kernel."""
import torch
from hypothesis import given, note, settings
from hypothesis import strategies as st

import ir
import triton_exec


@st.composite
def nesting_pairs(draw):
    rank = draw(st.integers(3, 4))
    a = [draw(st.integers(2, 9)) for _ in range(rank - 1)]
    b = [draw(st.integers(1, s)) for s in a]
    if a == b:
        b[-1] -= 1
    dtype = draw(st.sampled_from([torch.float32, torch.bfloat16]))
    return tuple(a) + (2,), tuple(b) + (2,), dtype


@settings(max_examples=10)
@given(nesting_pairs())
def test_nesting_outputs_with_a_trailing_pair_dim_match_eager(case):
    a_shape, b_shape, dtype = case
    note(f"{a_shape} / {b_shape} {dtype}")
    g = torch.Generator().manual_seed(0)
    x, y = (torch.randn(s, generator=g).to(dtype) for s in (a_shape, b_shape))

    def fn(x, y):
        return x * 2, y + 1
    jfn = ir.jit(fn, executors=["triton"])
    for got, want in zip(jfn(x, y), fn(x, y)):
        assert got.dtype == want.dtype and torch.equal(got, want)
    assert len(triton_exec.last_kernels(jfn)) == 1
