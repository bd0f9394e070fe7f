"""Random programs (tests/programs.py) run through `ir.jit` with the torch executor match eager
PyTorch, in both cache modes, on the first call (a miss: trace, passes, code generation) and on
the second (a hit: the stored prologue accepts the same arguments). Every trace prints as Python."""

import hypothesis
import ir
import pytest
from hypothesis import given, settings
from programs import Program, assert_matches_eager, programs


def check_program(program: Program, mode: str) -> None:
    hypothesis.note(program.describe())
    j = ir.jit(program.fn, executors=["torch"], cache=mode)
    assert_matches_eager(program, j(*program.inputs))
    traces = ir.last_traces(j)
    for t in traces:
        compile(str(t), "<t>", "exec")
    hypothesis.note(str(traces[-1]))
    hypothesis.note(str(ir.last_prologue(j)))
    compile(str(ir.last_prologue(j)), "<prologue>", "exec")
    assert_matches_eager(program, j(*program.inputs))
    stats = ir.cache_stats(j)
    assert (stats.misses, stats.hits) == (1, 1)


@pytest.mark.parametrize("mode", ["constant values", "symbolic values"])
@settings(max_examples=1500)
@given(program=programs())
def test_random_programs_match_eager(program: Program, mode: str):
    check_program(program, mode)


@settings(max_examples=1500)
@given(program=programs(int_args=True))
def test_random_programs_with_int_args_symbolic(program: Program):
    check_program(program, "symbolic values")
