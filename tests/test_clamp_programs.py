"""Random programs with clamps by tensor bounds (broadcast with x, crossed elementwise, x itself
as a bound, one tensor as both bounds) and by numbers, in training: values and gradients of
every input that needs grad (x's and the bounds') match eager's, in fp32 and, over ops that
round exactly as eager's (so no value lands on the other side of a clamp's kink), in bf16."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from programs import programs
from test_training_programs import check_training

EXACT_OPS = ("clamp", "arith", "expand", "layout", "index", "cast")


@settings(max_examples=40)
@given(program=programs(max_ops=2, op_names=("clamp",),
                        main_dtypes=(torch.float32, torch.bfloat16)), data=st.data())
def test_chains_of_clamps_train_as_eager(program, data):
    """Clamps alone (each step a clamp of the pool's values), where its ties and crossings
    decide the gradients most often."""
    check_training(program, data, "constant values")


@pytest.mark.parametrize("mode", ["constant values", "symbolic values"])
@settings(max_examples=25)
@given(program=programs(max_ops=4, op_names=EXACT_OPS + ("unary",),
                        main_dtypes=(torch.float32,)), data=st.data())
def test_fp32_clamp_programs_train_as_eager(program, data, mode):
    check_training(program, data, mode)


@settings(max_examples=25)
@given(program=programs(max_ops=4, op_names=EXACT_OPS, main_dtypes=(torch.bfloat16,)),
       data=st.data())
def test_bf16_clamp_programs_train_as_eager(program, data):
    check_training(program, data, "constant values")
