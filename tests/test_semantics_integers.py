"""Class 2: integer values stay integers end to end. Pads, wheres and fills with float or int
Python numbers on int8/uint8/int16/int32 tensors give eager's values (16777217 survives a pad with
value=0.0; 1.7 fills an int tensor with 1), Python ints outside a narrow dtype's range wrap as
eager wraps them (`uint8 + (-1)`, `int8 * 200`, `int8 > 128`), and what eager refuses (300 as an
int8 pad value) raises eager's exception type. Results are compared exactly."""
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, note, settings
from hypothesis import strategies as st

from semantics import EXAMPLES, GRID, assert_bits_equal, grid, jit, laid_out, outcome

DTYPES = (torch.int8, torch.uint8, torch.int16, torch.int32)
SCALARS = (0, 1, -1, 2, 127, 128, 200, -200, 255, 256, 300, 40000, -40000, 2 ** 24 + 1,
           2 ** 31 - 1, 2 ** 40, 0.0, -0.0, 1.7, -1.7, 2.5)


@st.composite
def int_tensor(draw):
    dtype = draw(st.sampled_from(DTYPES))
    info = torch.iinfo(dtype)
    shape = draw(st.sampled_from([(5,), (2, 3), (3, 1, 4)]))
    special = [info.min, info.max, 0, 1, -1 if info.min else 2, 2 ** 24 + 1 if info.max > 2 ** 24
               else info.max // 2]
    values = draw(st.lists(st.sampled_from(special) | st.integers(info.min, info.max),
                           min_size=shape[0] * 12, max_size=shape[0] * 12))
    flat = torch.tensor(values[:torch.Size(shape).numel()], dtype=torch.int64).to(dtype)
    return draw(laid_out(flat.reshape(shape)))


PROGRAMS = {
    "pad": lambda s: lambda x: F.pad(x, (1, 2), value=s),
    "pad_2d": lambda s: lambda x: F.pad(x, (0, 1, 1, 0), value=s),
    "where_scalar": lambda s: lambda x: torch.where(x > 0, x, s),
    "where_both": lambda s: lambda x: torch.where(x > 0, s, x),
    "full_like": lambda s: lambda x: torch.full_like(x, s) + x,
    "add": lambda s: lambda x: x + s,
    "mul": lambda s: lambda x: x * s,
    "rsub": lambda s: lambda x: s - x,
    "compare": lambda s: lambda x: (x > s, x == s, x <= s),
    "clamp": lambda s: lambda x: torch.clamp(x, min=s),
    "pad_then_add": lambda s: lambda x: F.pad(x, (1, 1), value=s) + 1,
}


@settings(max_examples=EXAMPLES)
@given(x=int_tensor(), s=st.sampled_from(SCALARS), program=st.sampled_from(sorted(PROGRAMS)),
       where=grid)
def test_integer_programs_match_eager_exactly(x, s, program, where):
    executor, mode = where
    f = PROGRAMS[program](s)
    note(f"{program} s={s!r} {executor}, {mode}: {x.dtype} {x.tolist()}")
    expected = outcome(f, x)
    actual = outcome(jit(f, executor, mode), x)
    if isinstance(expected, type):
        assert actual is expected, f"eager raised {expected.__name__}, the jit gave {actual}"
    else:
        assert_bits_equal(actual, expected)


@pytest.mark.parametrize("executor, mode", GRID)
def test_the_issue_examples(executor, mode):
    x = torch.tensor([16777217, 3], dtype=torch.int32)
    pad = jit(lambda x: F.pad(x, (1, 1), value=0.0), executor, mode)
    assert pad(x).tolist() == [0, 16777217, 3, 0]
    u = torch.tensor([0, 3, 255], dtype=torch.uint8)
    assert_bits_equal(jit(lambda u: u + (-1), executor, mode)(u), u + (-1))
    i = torch.tensor([1, 3, -2], dtype=torch.int8)
    assert_bits_equal(jit(lambda i: i * 200, executor, mode)(i), i * 200)
