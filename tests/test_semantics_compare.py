"""Class 1: results that rounding decides outright. Eager compares fp16/bf16 values as they are
held in that dtype (an intermediate rounded, a Python constant rounded through fp32); a cast to
int or bool truncates the rounded value. The kernels compute in fp32, so they must round exactly
there: booleans and integers are compared bit for bit, over values at and around rounding ties."""
import pytest
import torch
from hypothesis import given, note, settings
from hypothesis import strategies as st

from semantics import EXAMPLES, GRID, assert_bits_equal, grid, jit, laid_out

DTYPES = (torch.bfloat16, torch.float16, torch.float32)
OPS = ("==", "!=", "<", "<=", ">", ">=")


def near_ties(dtype):
    """Constants at, just off and between the dtype's rounding ties, and plain decimals."""
    eps = torch.finfo(dtype).eps
    base = [0.5, 1.0, -1.0, 2.0, 0.1, -0.3, 3.7, 100.0, 1e-3]
    out = []
    for b in base:
        for k in (0.0, 0.25, 0.5, 0.75, 1.0):
            out += [b * (1 + k * eps), b * (1 - k * eps / 2)]
        out.append(b * (1 + eps / 2) + 2 ** -40)
    return out


@st.composite
def compare_case(draw):
    dtype = draw(st.sampled_from(DTYPES))
    constants = near_ties(dtype)
    n = draw(st.integers(1, 12))
    raw = torch.tensor(draw(st.lists(st.sampled_from(constants), min_size=n, max_size=n)))
    x = draw(laid_out(raw.to(dtype).reshape(draw(st.sampled_from([(n,), (1, n)])))))
    y = draw(laid_out((torch.tensor(draw(st.lists(st.sampled_from(constants), min_size=n,
                                                     max_size=n))) / 3).to(dtype).reshape(x.shape)))
    return x, y, draw(st.sampled_from(OPS)), draw(st.sampled_from(constants))


FORMS = {
    "constant": lambda op, c: f"x {op} {c!r}",
    "reflected": lambda op, c: f"{c!r} {op} x",
    "intermediate": lambda op, c: f"(x + y) {op} {c!r}",
    "product_vs_tensor": lambda op, c: f"(x * y) {op} y",
    "where_condition": lambda op, c: f"torch.where(x * 3 {op} {c!r}, x, y)",
    "int_cast": lambda op, c: "(x * y * 64).to(torch.int32)",
    "bool_cast": lambda op, c: "(x - y).bool()",
    "mask": lambda op, c: f"(x {op} {c!r}).to(x.dtype) * y",
}


@settings(max_examples=EXAMPLES)
@given(case=compare_case(), form=st.sampled_from(sorted(FORMS)), where=grid)
def test_rounding_decided_results_match_eager_exactly(case, form, where):
    (x, y, op, c), (executor, mode) = case, where
    source = f"def f(x, y):\n    return {FORMS[form](op, c)}\n"
    note(source + f"# {executor}, {mode}: {x.dtype} x={x.tolist()} y={y.tolist()}")
    namespace = {"torch": torch}
    exec(source, namespace)
    f = namespace["f"]
    expected = f(x, y)
    actual = jit(f, executor, mode)(x, y)
    if form == "mask":      # a product after the exact mask: at the dtype's tolerance
        torch.testing.assert_close(actual, expected, equal_nan=True)
    else:
        assert_bits_equal(actual, expected)


@pytest.mark.parametrize("executor, mode", GRID)
def test_the_issue_examples(executor, mode):
    x = torch.tensor([0.5, 0.1, 1.0, 0.5 + 2 ** -8], dtype=torch.bfloat16)
    f = jit(lambda x: (x == 0.5 + 2 ** -9, x > 0.1), executor, mode)
    assert_bits_equal(f(x), (x == 0.5 + 2 ** -9, x > 0.1))
