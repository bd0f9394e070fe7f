"""Random programs through the Triton executor (Triton's interpreter on CPU tensors), against
eager PyTorch, in both cache modes."""
import pytest
from hypothesis import given, note, settings

import ir
import triton_exec  # noqa: F401  (registers the "triton" executor)
from programs import assert_matches_eager, programs

RESIZE_AND_ELEMENTWISE = ("arith", "unary", "max_min", "where", "compare", "cast", "index", "cat",
                          "stack", "pad", "reshape", "expand", "layout", "clamp", "pow", "div")


def check(program, mode):
    note(program.describe())
    jfn = ir.jit(program.fn, executors=["triton"], cache=mode)
    assert_matches_eager(program, jfn(*program.inputs))
    assert_matches_eager(program, jfn(*program.inputs))     # the cached entry, again
    assert ir.cache_stats(jfn).hits >= 1
    for trace in ir.last_traces(jfn):
        compile(str(trace), "<trace>", "exec")


@pytest.mark.parametrize("mode", ["constant values", "symbolic values"])
@settings(max_examples=30)
@given(program=programs(max_ops=5, op_names=RESIZE_AND_ELEMENTWISE))
def test_programs_match_eager(program, mode):
    check(program, mode)


@settings(max_examples=20)
@given(program=programs(max_ops=4, op_names=("index", "cat", "pad", "arith"), int_args=True))
def test_programs_with_int_arguments_match_eager(program):
    check(program, "symbolic values")
