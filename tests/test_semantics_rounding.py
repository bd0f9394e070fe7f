"""Every fp16/bf16 op rounds its result to its dtype, as eager rounds it: random chains of
`+ - * /`, negation, `abs` and casts over fp16, bf16 and fp32
tensors (same dtype, and mixed, which promotes), with Python numbers (converted as eager
converts them on the tensors' device), broadcast operands and laid-out inputs, are bit-exact with eager (fp16/bf16
add/sub/mul run on narrow tiles: `triton_exec/narrow_math.py`; the rest in fp32, rounded per
op; no fma contraction). Values stay in the normal range (eager's CPU and the interpreter round
bf16 subnormals their own ways, see the README's numerical contract)."""
import torch
from hypothesis import given, note, settings
from hypothesis import strategies as st

from semantics import EXAMPLES, assert_bits_equal, grid, jit, laid_out

NARROW = (torch.bfloat16, torch.float16)
BINARY = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
          "/": lambda a, b: a / b}
# (not sqrt: the kernels' is correctly rounded, as eager's on CUDA; eager's CPU fp32 sqrt is
# off by an ulp now and then)
UNARY = {"neg": lambda a: -a, "abs": torch.abs}
# Python numbers: exactly representable in fp16/bf16, and not
NUMBERS = (2.0, -1.0, 0.5, 3.0, 0.1, -1.7, 1 / 3, 7)


def values(draw, n: int) -> torch.Tensor:
    """n values of moderate magnitude (products and quotients of a short chain stay normal),
    with signed zeros, ties of bf16 rounding and infinities/NaN now and then."""
    special = st.sampled_from([0.0, -0.0, 1.0, -1.0, 1 + 2 ** -8, 1 + 3 * 2 ** -9, 255.0, 256.5,
                               float("inf"), float("nan")])
    finite = st.floats(-64.0, 64.0, allow_nan=False).filter(lambda v: v == 0 or abs(v) > 2 ** -6)
    return torch.tensor(draw(st.lists(st.one_of(finite, finite, finite, special),
                                      min_size=n, max_size=n)), dtype=torch.float64)


@st.composite
def chain(draw):
    """(program, its operand tensors, a description): a random expression over 2-3 inputs."""
    dtype = draw(st.sampled_from(NARROW))
    n = draw(st.integers(1, 24))
    shapes = [(n,), (1, n), (3, n)]
    shape = draw(st.sampled_from(shapes))
    dtypes = [dtype, dtype, draw(st.sampled_from([dtype, dtype, torch.float32]))]
    inputs = []
    for k, dt in enumerate(dtypes):
        # the last input may broadcast (one row)
        s = shape if k < 2 or len(shape) == 1 else (1, n)
        raw = values(draw, int(torch.Size(s).numel())).reshape(s)
        inputs.append(draw(laid_out(raw.to(dt))))
    steps = []
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(["binary", "binary", "number", "unary", "cast"]))
        if kind == "binary":
            steps.append((kind, draw(st.sampled_from(sorted(BINARY))),
                          draw(st.integers(0, len(inputs) - 1)), draw(st.booleans())))
        elif kind == "number":
            steps.append((kind, draw(st.sampled_from(["+", "-", "*", "/"])),
                          draw(st.sampled_from(NUMBERS)), draw(st.booleans())))
        elif kind == "unary":
            steps.append((kind, draw(st.sampled_from(sorted(UNARY))), None, False))
        else:
            steps.append((kind, draw(st.sampled_from([*NARROW, torch.float32])), None, False))

    def program(*xs):
        acc = xs[0]
        for kind, op, operand, flip in steps:
            if kind == "binary":
                other = xs[operand]
                acc = BINARY[op](other, acc) if flip else BINARY[op](acc, other)
            elif kind == "number":
                acc = BINARY[op](operand, acc) if flip else BINARY[op](acc, operand)
            elif kind == "unary":
                acc = UNARY[op](acc)
            else:
                acc = acc.to(op)
        return acc

    return program, inputs, f"{dtype} {list(shape)}: {steps}"


@settings(max_examples=EXAMPLES * 3, deadline=None)
@given(case=chain(), where=grid)
def test_fp16_bf16_chains_round_per_op_as_eager(case, where):
    program, inputs, description = case
    note(description)
    expected = program(*inputs)
    actual = jit(program, *where)(*inputs)
    assert_bits_equal(actual, expected)


POWERS_OF_TWO = (2, 4096, 0.5, -0.25, 2.0 ** 20, 2.0 ** -20, 2.0 ** 126, -(2.0 ** -126))


@settings(max_examples=EXAMPLES)
@given(values=st.lists(st.one_of(st.floats(width=32), st.sampled_from(
           [0.0, -0.0, 1e-45, -1e-40, 1.2e-38, 3.4e38])), min_size=1, max_size=16),
       divisor=st.sampled_from(POWERS_OF_TWO), mode=st.sampled_from(
           ["constant values", "symbolic values"]),
       dtype=st.sampled_from([torch.float32, torch.float16, torch.bfloat16]))
def test_division_by_a_power_of_two_is_bit_exact_over_the_whole_domain(values, divisor, mode,
                                                                       dtype):
    """x / 2**k (a mean's count) is computed as x * 2**-k, the same real number rounded once:
    eager's bits for subnormal, huge, signed-zero, infinite and NaN x and results alike (bf16
    subnormal results aside: eager's CPU and the interpreter round those their own ways)."""
    x = torch.tensor(values).to(dtype)
    note(f"{dtype} {mode}: {x.tolist()} / {divisor}")
    expected, actual = x / divisor, jit(lambda t: t / divisor, "triton", mode)(x)
    if dtype == torch.bfloat16:
        normal = ~(expected.abs() < torch.finfo(dtype).tiny) | (expected == 0)
        expected, actual = expected[normal], actual[normal]
    assert_bits_equal(actual, expected)


def test_rope_in_bf16_is_bit_exact_forward_and_backward():
    """Llama's RoPE (x * cos + rotate_half(x) * sin) in bf16, full and partial rotation: every
    product and sum rounded as eager's, on narrow tiles; x's gradient (from the grad rules,
    fused) too."""
    from ir.examples import rope
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 16, 64, generator=g).bfloat16().requires_grad_()
    dy = torch.randn(2, 3, 16, 64, generator=g).bfloat16()
    cos, sin = (torch.randn(16, 64, generator=g).bfloat16() for _ in range(2))
    for n in (64, 16):
        c, s = cos[:, :n].contiguous(), sin[:, :n].contiguous()
        jrope = jit(rope, "triton", "constant values")
        out, expected = jrope(x, c, s, n), rope(x, c, s, n)
        assert_bits_equal(out, expected)
        assert_bits_equal(torch.autograd.grad(out, [x], [dy])[0],
                          torch.autograd.grad(expected, [x], [dy])[0])
