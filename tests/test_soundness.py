"""The soundness property of the cache: one jitted function called with a sequence of input
layouts (offsets, strides of wider buffers, step slices, expands, size-1 dims with odd strides,
negative-bit views, tuples mixing numbers and tensors) gives eager's result on every call, in
both cache modes, and on every hit each access's width is legal for that call's pointers and
strides (`soundness.illegal_widths`). It also counts how often a hit is narrower than a fresh
compile on the same inputs.

CI runs a derandomized slice. The soak:
    SOUNDNESS_EXAMPLES=2000 SOUNDNESS_REPORT=soak.json HYPOTHESIS_PROFILE=explore \
        bash tests/run.sh tests/test_soundness.py
"""
import json
import os

import torch
from hypothesis import given, note, settings
from hypothesis import strategies as st

import ir
import triton_exec  # noqa: F401  (registers the "triton" executor)
from programs import assert_close, programs
from soundness import illegal_widths, laid_out, narrower_than_fresh, packed_function
from test_triton_programs import RESIZE_AND_ELEMENTWISE

EXAMPLES = int(os.environ.get("SOUNDNESS_EXAMPLES", "12"))
REPORT = os.environ.get("SOUNDNESS_REPORT")
COUNTS = {"cases": 0, "calls": 0, "calls eager refuses": 0, "hits": 0, "wrong results": 0, "illegal widths": 0,
          "hits narrower than a fresh compile": 0, "narrower because the fresh entry guards": {}}


@st.composite
def cases(draw):
    """(program, function, argument tuples): a generated program, possibly behind a tuple
    argument, and 2-4 calls' arguments, each with its own layout for every tensor."""
    program = draw(programs(max_ops=4, op_names=RESIZE_AND_ELEMENTWISE,
                            int_args=draw(st.booleans())))
    tensors = [a for a in program.inputs if isinstance(a, torch.Tensor)]
    fn, pack = program.fn, lambda args: tuple(args)
    if draw(st.booleans()):      # one tuple argument: the tensors, the ints and unused numbers
        extras = draw(st.lists(st.sampled_from([2.0, 3, -1.5, 0, True]), max_size=3))
        order = draw(st.permutations(range(len(program.inputs) + len(extras))))
        fn, pack = packed_function(program.fn, len(program.inputs), extras, order)
    calls = []
    for _ in range(draw(st.integers(2, 4))):
        laid = [draw(laid_out(t)) for t in tensors]
        calls.append(pack(laid + program.inputs[len(tensors):]))
    return program, fn, calls


def describe(args) -> str:
    def one(a):
        if isinstance(a, torch.Tensor):
            return (f"{a.dtype} {tuple(a.shape)} stride={a.stride()} offset={a.storage_offset()}"
                    f" ptr%16={a.data_ptr() % 16}{' neg' if a.is_neg() else ''}")
        if isinstance(a, tuple):
            return "(" + ", ".join(one(x) for x in a) + ")"
        return repr(a)
    return ", ".join(one(a) for a in args)


def check_sequence(program, fn, calls, mode):
    j = ir.jit(fn, executors=["triton"], cache=mode)
    for args in calls:
        note(f"{mode}: call with {describe(args)}")
        try:
            expected = fn(*args)
        except RuntimeError:    # eager refuses this layout (`view` of a non-contiguous input)
            COUNTS["calls eager refuses"] += 1
            continue
        hits = ir.cache_stats(j).hits
        COUNTS["calls"] += 1
        try:
            assert_close(j(*args), expected, program.rounding)
        except AssertionError:
            COUNTS["wrong results"] += 1
            raise
        if ir.cache_stats(j).hits == hits:
            continue
        COUNTS["hits"] += 1
        entry = ir.last_entry(j)
        problems = illegal_widths(entry, args)
        COUNTS["illegal widths"] += bool(problems)
        assert not problems, problems
        fresh = ir.jit(fn, executors=["triton"], cache=mode)
        narrower = narrower_than_fresh(entry, fresh.lookup(fresh.bind(args, {})))
        if narrower:
            COUNTS["hits narrower than a fresh compile"] += narrower != "not comparable"
            reasons = COUNTS["narrower because the fresh entry guards"]
            reasons[narrower] = reasons.get(narrower, 0) + 1
            assert narrower != "unexplained", "a hit narrower than a fresh compile, unexplained"


@settings(max_examples=EXAMPLES)
@given(case=cases())
def test_every_call_of_a_layout_sequence_is_sound(case):
    program, fn, calls = case
    note(program.describe())
    COUNTS["cases"] += 1
    for mode in ("constant values", "symbolic values"):
        check_sequence(program, fn, calls, mode)
    if REPORT:
        with open(REPORT, "w") as f:
            json.dump(COUNTS, f, indent=1)


def test_the_width_check_can_fail():
    """An entry built on an aligned contiguous input, checked against inputs it must not
    serve: the check names what breaks (its kernels assumed the 16-byte loads)."""
    def double(x, n: int):
        return x[:, :n] * 2
    j = ir.jit(double, executors=["triton"], cache="symbolic values")
    j(torch.randn(8, 32), 16)
    entry = ir.last_entry(j)
    assert illegal_widths(entry, (torch.randn(8, 32), 16)) == []
    assert illegal_widths(entry, (torch.randn(8 * 32 + 1)[1:].view(8, 32), 16))   # misaligned
    assert illegal_widths(entry, (torch.randn(8, 64)[:, ::2], 16))       # innermost stride 2
    assert illegal_widths(entry, (torch.randn(8, 34)[:, :32], 16))       # row stride 34
    assert illegal_widths(entry, (torch.randn(8, 32), 6))                # n passed as n // 4
    assert illegal_widths(entry, (torch._neg_view(torch.randn(8, 32)), 16))
