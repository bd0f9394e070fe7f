"""Shared pieces of the eager-semantics tests (`test_semantics_*.py`, one module per class of
behaviour): the executor x cache-mode grid, inputs laid out as the program generator lays them
out, an outcome of a call (its result, or the type of exception it raised), and exact comparison
(bits for floats, where the contract is bit-exactness)."""
from __future__ import annotations

import os

import torch
from hypothesis import strategies as st

import ir
import triton_exec  # noqa: F401  (registers the "triton" executor)
from programs import layout_tensors

EXECUTORS = ("triton", "torch")
MODES = ("constant values", "symbolic values")
GRID = [(e, m) for e in EXECUTORS for m in MODES]
# Examples per semantics property (each draws its executor and cache mode); SEMANTICS_EXAMPLES
# raises it for a soak.
EXAMPLES = int(os.environ.get("SEMANTICS_EXAMPLES", "30"))
grid = st.sampled_from(GRID)


def jit(fn, executor: str, mode: str):
    return ir.jit(fn, executors=[executor], cache=mode)


def outcome(fn, *args):
    """fn(*args), or the type of the exception it raised."""
    try:
        return fn(*args)
    except Exception as e:    # noqa: BLE001  (the type is what is compared)
        return type(e)


def clones(args):
    return [a.clone() if isinstance(a, torch.Tensor) else a for a in args]


@st.composite
def laid_out(draw, values: torch.Tensor) -> torch.Tensor:
    """values, laid out contiguous, at an offset, permuted or strided (a fresh buffer)."""
    return draw(layout_tensors(tuple(values.shape), values.dtype, None)).copy_(values)


def assert_bits_equal(actual, expected) -> None:
    """Same type, shape, dtype and bits (floats: NaN where eager has NaN, signed zeros kept)."""
    if isinstance(expected, (tuple, list)):
        assert type(actual) is type(expected), f"{type(actual)} != {type(expected)}"
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_bits_equal(a, e)
        return
    assert isinstance(actual, torch.Tensor), f"expected a tensor, got {actual!r}"
    assert actual.shape == expected.shape and actual.dtype == expected.dtype, (
        f"{actual.dtype}{list(actual.shape)} != {expected.dtype}{list(expected.shape)}")
    if expected.is_floating_point():
        same = (actual == expected) & (torch.signbit(actual) == torch.signbit(expected))
        same |= actual.isnan() & expected.isnan()
        assert bool(same.all()), f"differs at {(~same).nonzero().tolist()[:8]}:\n{actual}\n{expected}"
    else:
        assert torch.equal(actual, expected), f"\n{actual}\n{expected}"
