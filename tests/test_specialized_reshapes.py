"""A reshape whose target keeps a size that a later guard made a constant (symbolic mode: the
norms' keepdim reshape to (i0, ..., 1) of a tensor whose batch a comparison then fixed at 2,
found in timm's Swin): its dims are the tensor's, guarded equal, so a second reduction reading
the first in a looped row finds it at the same index (it asserted "read at another index inside
another loop"). Random chains of two row reductions over a runtime row, the batch fixed after
them; values equal eager's."""
import torch
import torch.nn.functional as F
from hypothesis import given, note, settings
from hypothesis import strategies as st

import ir
import triton_exec
from test_reductions import assert_close_as_contract

NORMS = {
    "layer_norm": lambda x: F.layer_norm(x, x.shape[-1:]),
    "rms_norm": lambda x: F.rms_norm(x, x.shape[-1:], eps=1e-6),
    "softmax": lambda x: torch.softmax(x, -1),
    "centered": lambda x: x - x.mean(-1, keepdim=True),
}


@settings(max_examples=8)
@given(st.sampled_from(sorted(NORMS)), st.sampled_from(sorted(NORMS)),
       st.lists(st.integers(1, 5), min_size=2, max_size=3), st.integers(2, 40))
def test_chained_row_reductions_after_the_batch_is_fixed(first, second, outer, row):
    note(f"{first} then {second}, {outer} x {row}")

    def fn(x):
        y = NORMS[second](NORMS[first](x))
        return y * 2 if x.shape[0] == outer[0] else y     # a guard fixes the batch
    x = torch.randn((*outer, row), generator=torch.Generator().manual_seed(row))
    jfn = ir.jit(fn, executors=["triton"], cache="symbolic values")
    assert_close_as_contract(jfn(x), fn(x), row)
    assert triton_exec.last_kernels(jfn)
