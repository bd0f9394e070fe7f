"""Shape queries as host prims: each tensor's shape queried once, at top level, never inside or
splitting a fusion, and host work placed after the launches that do not need it; the thin path."""
import pytest
import torch

import ir
import triton_exec  # noqa: F401  (registers "triton")
from programs import assert_close
from ir.examples import rope, rope_inputs


def code_lines(jfn):
    return [line.strip() for line in str(ir.last_traces(jfn)[-1]).splitlines()
            if line.strip() and not line.strip().startswith("#")]


def test_seed_reshape_example_queries_once_and_computes_after_the_launch():
    def f(x):
        t0 = x * 2 + 1
        return t0.reshape(t0.size(0), -1)

    jfn = ir.jit(f, executors=["triton"], cache="symbolic values")
    x = torch.randn(4, 6, 8)
    assert_close(jfn(x), f(x))
    lines = code_lines(jfn)
    shape_queries = [line for line in lines if ".shape" in line]
    assert len(shape_queries) == 1
    launch = next(i for i, line in enumerate(lines) if f"{jfn.name}_fusion_0(" in line)
    minus_one = next(i for i, line in enumerate(lines) if " * " in line and "=" in line
                     and "_fusion_" not in line)      # the -1: i1 * i2, on the host
    assert launch < minus_one
    assert any(".reshape(" in line for line in lines[minus_one:])
    other = torch.randn(3, 5, 4)
    assert_close(jfn(other), f(other))
    assert ir.cache_stats(jfn).hits == 1      # another size: the same entry


def test_a_shape_query_between_fusible_ops_does_not_split_the_fusion():
    def f(x, y):
        a = torch.cat((x, y), dim=-1) * 2
        width = a.size(-1)              # a shape query between two fusible ops
        b = (a + width).sigmoid()
        return b[..., 1:]

    jfn = ir.jit(f, executors=["triton"], cache="symbolic values")
    x, y = torch.randn(3, 4), torch.randn(3, 6)
    assert_close(jfn(x, y), f(x, y))
    assert len(triton_exec.last_kernels(jfn)) == 1
    lines = code_lines(jfn)
    assert sum(f"{jfn.name}_fusion_" in line for line in lines) == 1
    fused_body = str(ir.last_traces(jfn)[-1]).split(f"{jfn.name}_fusion_0(")[1].split("return")[0]
    assert ".shape" not in fused_body     # no shape query inside the group


def test_each_shape_is_queried_once_per_tensor():
    jfn = ir.jit(rope, executors=["triton"], cache="symbolic values")
    jfn(*rope_inputs())
    lines = code_lines(jfn)
    queried = [line.split("=")[1].strip() for line in lines if line.endswith(".shape")]
    assert len(queried) == len(set(queried)) >= 1


@pytest.mark.parametrize("executor", ["torch", "triton"])
def test_thin_path_matches_the_jit_across_sizes(executor):
    jfn = ir.jit(rope, executors=[executor], cache="symbolic values")
    computation = ir.thin(jfn, *rope_inputs(B=2))
    for B, T in ((2, 16), (3, 16), (5, 8)):
        args = rope_inputs(B=B, T=T, seed=B)
        assert_close(computation(*args), jfn(*args))
    assert ir.cache_stats(jfn).misses == 1


def test_thin_path_skips_the_prologue():
    jfn = ir.jit(lambda x: x * 2, executors=["torch"], cache="symbolic values")
    computation = ir.thin(jfn, torch.randn(4))
    # A float64 tensor fails the entry's dtype guard; thin does not check it.
    out = computation(torch.ones(4, dtype=torch.float64))
    assert out.dtype == torch.float64
    assert ir.cache_stats(jfn).misses == 1
