"""A cache entry keeps no tensor of the call that built it alive: after `del` of the inputs and
outputs, weak references to them are dead while the jitted function, its entries and its kernel
records live (and still answer)."""

import gc
import weakref

import ir
import pytest
import torch
import triton_exec


def program(x, pair, n: int):
    y, z = pair
    return (x[:, 1:] * 2 + y[1:]).exp() - z[:n].sum(), x.shape[0] * x


@pytest.mark.parametrize("mode", ["constant values", "symbolic values"])
@pytest.mark.parametrize("executor", ["torch", "triton"])
def test_inputs_and_outputs_die_with_their_names(executor, mode):
    j = ir.jit(program, executors=[executor], cache=mode)
    x, y, z = torch.randn(4, 8), torch.randn(8), torch.randn(5)
    outs = j(x, (y, z), 3)
    refs = [weakref.ref(t) for t in (x, y, z, *outs)]
    del x, y, z, outs
    gc.collect()
    assert [r() for r in refs] == [None] * len(refs)
    entry = ir.last_entry(j)
    assert j.entries and entry in [e for es in j.entries.values() for e in es]
    if executor == "triton":
        record = triton_exec.last_kernels(j)[0]
        assert "ld.global" in record.ptx()     # the record still compiles from the facts it kept
    x, y, z = torch.randn(4, 8), torch.randn(8), torch.randn(5)
    torch.testing.assert_close(j(x, (y, z), 3), program(x, (y, z), 3))
    assert ir.cache_stats(j).hits == 1
