"""Class 5: numbers are keyed and guarded by their bits and type. A sequence of calls with
0.0 / -0.0 / NaN / inf / 1 / 1.0 / True arguments gives, call by call, what eager gives (`x / s`
is -inf for s = -0.0 even after a call with 0.0), and the cache holds one entry per distinct
(type, bits) value: NaN hits its entry instead of growing the cache on every call."""
import math

import torch
from hypothesis import given, note, settings
from hypothesis import strategies as st

import ir
from semantics import EXAMPLES, assert_bits_equal, grid, jit, outcome

NUMBERS = (0.0, -0.0, math.nan, -math.nan, math.inf, -math.inf, 1, 1.0, True, False, 0, 2.5,
           -2.5, 5e-324, 1e308)


def identity(s):
    return (type(s), "nan" if s != s else (s.hex() if isinstance(s, float) else s))


@settings(max_examples=EXAMPLES)
@given(calls=st.lists(st.sampled_from(NUMBERS), min_size=2, max_size=8), where=grid,
       op=st.sampled_from(["x / s", "x * s", "torch.where(x > 0, s, x)", "x + s - x"]))
def test_number_arguments_by_bits_and_type(calls, where, op):
    executor, mode = where
    note(f"{op} over {calls}, {executor}, {mode}")
    namespace = {"torch": torch}
    exec(f"def f(x, s):\n    return {op}\n", namespace)
    f = namespace["f"]
    jfn = jit(f, executor, mode)
    x = torch.tensor([1.0, -2.0, 0.0, 3.5])
    entries = set()     # a call that raises (1e308 stored into fp32) compiles nothing
    for s in calls:
        expected, actual = outcome(f, x, s), outcome(jfn, x, s)
        if isinstance(expected, type):
            assert actual is expected
            continue
        assert_bits_equal(actual, expected)
        # symbolic mode: ints and floats are runtime values, but a stored float is specialized
        runtime = mode == "symbolic values" and (
            type(s) is int or (type(s) is float and "where" not in op))
        entries.add(type(s) if runtime else identity(s))
    assert sum(len(es) for es in jfn.entries.values()) == len(entries)


def test_the_issue_example():
    jfn = ir.jit(lambda x, s: x / s, executors=["triton"])
    x = torch.ones(3)
    assert jfn(x, 0.0).tolist() == [math.inf] * 3
    assert jfn(x, -0.0).tolist() == [-math.inf] * 3
    for _ in range(5):
        jfn(x, math.nan)
    assert ir.cache_stats(jfn).misses == 3
