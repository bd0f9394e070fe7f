"""Tensors the tracer never receives: factories with no tensor argument (`torch.ones(8,
device=x.device)`, `torch.tensor(2.0)`, `torch.arange(n)`, `torch.full`) are prims of the trace,
and tensors captured from a closure or a global are implicit inputs, read from their source at
every call and guarded like arguments."""

import functools
import ir
import pytest
import torch
import triton_exec
from hypothesis import given, settings, strategies as st

MODES = ["constant values", "symbolic values"]

# factory call sources over x (2-d) and its sizes a, b; each broadcasts against x
FACTORIES = [
    "torch.ones(b, device=x.device)", "torch.zeros(a, 1)", "torch.ones((a, b), dtype={dtype})",
    "torch.full((b,), {value})", "torch.full((1, b), {value}, dtype={dtype}, device=x.device)",
    "torch.tensor({value})", "torch.tensor({value}, dtype={dtype})", "torch.arange(b)",
    "torch.arange(b, dtype={dtype})", "torch.arange(0, 2 * a, 2).reshape(a, 1)",
    "torch.arange(1, b + 1)", "torch.arange(0.5, b * 0.5 + 0.25, 0.5)",
    "torch.empty(a, b).fill_(0) if False else torch.zeros(a, b)",
]


@pytest.mark.parametrize("mode", MODES)
@settings(max_examples=40)
@given(data=st.data())
def test_generated_factory_calls_match_eager(mode, data):
    calls = data.draw(st.lists(st.sampled_from(FACTORIES), min_size=1, max_size=3), label="calls")
    dtype = data.draw(st.sampled_from(["torch.float32", "torch.float16", "torch.int32"]))
    value = data.draw(st.sampled_from(["2", "-1.5", "True", "0.25"]))
    terms = " + ".join(f"({c.format(dtype=dtype, value=value)})" for c in calls)
    ns = {"torch": torch}
    exec(f"def f(x):\n    a, b = x.shape\n    return x * 2 + {terms}\n", ns)
    f = ns["f"]
    j = ir.jit(f, executors=["torch"], cache=mode)
    for shape in [(3, 4), (5, 6)]:
        x = torch.randn(*shape)
        torch.testing.assert_close(j(x), f(x), msg=lambda m: f"{terms}: {m}")
    if mode == "symbolic values" and "0.5" not in terms:
        assert ir.cache_stats(j).misses == 1     # factories of symbolic sizes specialize nothing


def test_factories_fuse_with_the_triton_executor():
    def f(x):
        return x * torch.ones(x.shape[-1], device=x.device) + torch.full((1,), 2.0) + \
            torch.tensor(0.5)

    for mode in MODES:
        j = ir.jit(f, executors="triton", cache=mode)
        x = torch.randn(4, 8)
        torch.testing.assert_close(j(x), f(x))
        body = "\n".join(line for line in str(ir.last_traces(j)[-1]).splitlines()
                         if line.strip().startswith("#"))
        assert "prims.full" in body, ir.last_traces(j)[-1]     # inside the fusion group
        assert len(triton_exec.last_kernels(j)) == 1


WEIGHT = torch.randn(8)


def uses_a_global(x):
    return x * WEIGHT + 1


@pytest.mark.parametrize("mode", MODES)
def test_a_captured_global_is_read_at_every_call(mode):
    global WEIGHT
    saved = WEIGHT
    try:
        j = ir.jit(uses_a_global, executors=["torch"], cache=mode)
        x = torch.randn(4, 8)
        torch.testing.assert_close(j(x), uses_a_global(x))
        WEIGHT.mul_(3)                          # mutated in place: the same entry reads it
        torch.testing.assert_close(j(x), uses_a_global(x))
        WEIGHT = torch.randn(8)                 # rebound: read from the global again
        torch.testing.assert_close(j(x), uses_a_global(x))
        assert ir.cache_stats(j).misses == 1
        WEIGHT = torch.randn(8).half()          # another dtype: the guards see it, a new entry
        torch.testing.assert_close(j(x), uses_a_global(x))
        assert ir.cache_stats(j).misses == 2
        assert "WEIGHT" in str(ir.last_prologue(j))
    finally:
        WEIGHT = saved


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("executor", ["torch", "triton"])
def test_captured_closure_tensors_are_implicit_inputs(mode, executor):
    scale, shift = torch.randn(8), torch.randn(1, 8)

    def f(x):
        return (x * scale).sigmoid() + shift.expand(x.shape[0], 8) + torch.zeros_like(shift)

    j = ir.jit(f, executors=executor, cache=mode)
    x = torch.randn(4, 8)
    torch.testing.assert_close(j(x), f(x))
    scale = torch.randn(8)      # the closure cell now holds another tensor
    torch.testing.assert_close(j(x), f(x))
    assert ir.cache_stats(j).misses == 1 and ir.cache_stats(j).hits == 1
    trace = str(ir.last_traces(j)[-1])
    assert "def computation(x, scale, shift)" in trace, trace


@pytest.mark.parametrize("mode", ["constant values", "symbolic values"])
def test_a_traced_value_kept_across_calls_is_refused_not_read_as_another(mode):
    """A functools.lru_cache of a function returning a tensor hands a later trace the value an
    earlier trace computed; its name (t0) may name another value there: refused, never read as
    that one (it gave (x + 1) ** 2 for (x + 1) * 2)."""
    @functools.lru_cache
    def scale_of(n):
        return torch.full((n,), 2.0)

    def f(x):
        s = scale_of(x.shape[-1])
        return (x + 1) * s
    jf = ir.jit(f, executors=["torch"], cache=mode)
    torch.testing.assert_close(jf(torch.ones(3)), torch.full((3,), 4.0))
    with pytest.raises(NotImplementedError, match="traced value of another call"):
        jf(torch.full((3,), 2.0, dtype=torch.float64))     # a new entry: traced again
