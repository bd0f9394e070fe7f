"""Grad mode: without it (torch.no_grad(), torch.inference_mode()) or with no input needing grad,
everything fusible fuses whatever the inputs' requires_grad; the grad mode is part of the cache
key, so an entry never serves the other mode."""
import pytest
import torch
import torch.nn.functional as F

import ir
import triton_exec
from ir.examples import rope, rope_inputs
from programs import assert_close

MODES = ["constant values", "symbolic values"]


def layer(x, w, b):
    """A small model-like forward: weights that need grad in training."""
    y = F.pad(x, (1, 1)) * w + b
    return torch.cat((y, -y), dim=-1)


def layer_inputs(requires_grad: bool):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 6, generator=g)
    w = torch.randn(8, generator=g).requires_grad_(requires_grad)
    b = torch.randn(8, generator=g).requires_grad_(requires_grad)
    return x, w, b


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("no_grad", [torch.no_grad, torch.inference_mode])
def test_no_grad_with_weights_that_need_grad_fuses_as_detached(mode, no_grad):
    detached = ir.jit(layer, executors=["triton"], cache=mode)
    with no_grad():
        detached(*layer_inputs(False))
    expected_kernels = len(triton_exec.last_kernels(detached))
    assert expected_kernels == 1
    jfn = ir.jit(layer, executors=["triton"], cache=mode)
    args = layer_inputs(True)
    with no_grad():
        out = jfn(*args)
    assert len(triton_exec.last_kernels(jfn)) == expected_kernels
    assert not out.requires_grad
    with torch.no_grad():
        assert_close(out, layer(*args))


@pytest.mark.parametrize("mode", MODES)
def test_rope_under_no_grad_with_requires_grad_inputs(mode):
    x, cos, sin, n = rope_inputs(dtype=torch.bfloat16)
    jfn = ir.jit(rope, executors=["triton"], cache=mode)
    with torch.no_grad():
        out = jfn(x.requires_grad_(), cos.requires_grad_(), sin, n)
        expected = rope(x, cos, sin, n)
    assert len(triton_exec.last_kernels(jfn)) == 1
    torch.testing.assert_close(out, expected, rtol=2e-2, atol=4e-2)


def test_an_entry_never_serves_the_other_grad_mode():
    jfn = ir.jit(layer, executors=["triton"])
    args = layer_inputs(True)
    with torch.no_grad():
        jfn(*args)
    no_grad_entry = ir.last_entry(jfn)
    out = jfn(*args)                            # grad mode: another entry
    assert ir.last_entry(jfn) is not no_grad_entry
    assert ir.cache_stats(jfn).misses == 2
    assert out.requires_grad
    with torch.no_grad():
        jfn(*args)
        assert ir.last_entry(jfn) is no_grad_entry
    assert ir.cache_stats(jfn).hits == 1
    # the printed prologue checks the mode too
    assert "if torch.is_grad_enabled(): return False" in str(ir.last_prologue(jfn))


def test_no_grad_entry_serves_any_requires_grad():
    jfn = ir.jit(layer, executors=["triton"])
    with torch.no_grad():
        jfn(*layer_inputs(True))
        jfn(*layer_inputs(False))
    assert (ir.cache_stats(jfn).misses, ir.cache_stats(jfn).hits) == (1, 1)


def test_grad_mode_without_inputs_that_need_grad_fuses():
    jfn = ir.jit(layer, executors=["triton"])
    out = jfn(*layer_inputs(False))
    assert len(triton_exec.last_kernels(jfn)) == 1 and not out.requires_grad
