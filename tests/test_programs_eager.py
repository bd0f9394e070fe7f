"""Tests of the program generator itself: its programs run in eager PyTorch and are what they
claim to be, its tolerances cover the rounding gap that a fused executor may legitimately show,
and assert_close fails where it must."""

import inspect
import math

import pytest
import torch
from hypothesis import given, note, settings
from programs import OPS, Program, assert_close, assert_matches_eager, programs, run_eager


def as_tuple(result):
    return result if isinstance(result, tuple) else (result,)


@settings(max_examples=50)
@given(programs())
def test_programs_run_in_eager(program: Program):
    note(program.describe())
    results = as_tuple(run_eager(program))
    assert 1 <= len(results) <= 2
    for result in results:
        assert isinstance(result, torch.Tensor)
        assert 1 <= result.dim() <= 4
        if result.is_floating_point():
            assert result.isfinite().all()
    assert_matches_eager(program, run_eager(program))
    assert "def program(" in inspect.getsource(program.fn)


@pytest.mark.parametrize("op", sorted(OPS))
def test_each_op_alone(op):
    @settings(max_examples=10)
    @given(programs(max_ops=3, op_names=[op]))
    def run(program):
        note(program.describe())
        run_eager(program)

    run()


def test_assert_close_accepts_rounding_within_tolerance():
    x = torch.linspace(-2, 2, 9)
    assert_close(x * (1 + 1e-6), x)
    assert_close((x * 1.004).bfloat16(), x.bfloat16())
    assert_close(x + 1e-3, x, rounding=torch.float16)
    assert_close((x, x.int()), [x, x.int()])


def test_assert_close_nan_only_where_expected_has_nan():
    x = torch.tensor([1.0, math.nan, 3.0])
    assert_close(x.clone(), x)
    with pytest.raises(AssertionError):
        assert_close(torch.tensor([math.nan, math.nan, 3.0]), x)
    with pytest.raises(AssertionError):
        assert_close(torch.tensor([1.0, 2.0, 3.0]), x)


@pytest.mark.parametrize("actual, expected", [
    (torch.zeros(2, 3), torch.zeros(3, 2)),  # shape
    (torch.zeros(4, dtype=torch.float16), torch.zeros(4)),  # dtype
    (torch.tensor([1, 2], dtype=torch.int32), torch.tensor([1, 3], dtype=torch.int32)),  # ints
    (torch.tensor([1.0, 2.1]), torch.tensor([1.0, 2.0])),  # values
    ((torch.zeros(2),), (torch.zeros(2), torch.zeros(2))),  # result count
    (torch.zeros(2), (torch.zeros(2),)),  # tensor vs tuple
])
def test_assert_close_rejects(actual, expected):
    with pytest.raises(AssertionError):
        assert_close(actual, expected)


@settings(max_examples=50)
@given(programs(int_args=True))
def test_programs_with_int_args_run_in_eager(program: Program):
    note(program.describe())
    n_tensors = sum(isinstance(a, torch.Tensor) for a in program.inputs)
    assert all(isinstance(a, int) for a in program.inputs[n_tensors:])
    assert_matches_eager(program, run_eager(program))
