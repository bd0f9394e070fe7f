"""The structure of the traces: they print as Python, the prologue runs on its own, shape queries
appear once, dead code and repeats are gone, size arithmetic stays on the host."""

import ir
from ir.examples import rope
import pytest
import torch

CONSTANT, SYMBOLIC = "constant values", "symbolic values"


def rope_args(batch=1, dtype=torch.float32):
    return (torch.randn(batch, 2, 4, 32, dtype=dtype), torch.randn(4, 8), torch.randn(4, 8), 8)


def run_alone(source: str):
    """exec's a prologue's source with nothing but torch in scope; returns the function."""
    ns = {"torch": torch, "Tensor": torch.Tensor}
    exec(compile(source, "<prologue>", "exec"), ns)
    return ns["prologue"]


@pytest.mark.parametrize("mode", [CONSTANT, SYMBOLIC])
def test_rope_traces(mode):
    j = ir.jit(rope, executors=["torch"], cache=mode)
    args = rope_args()
    torch.testing.assert_close(j(*args), rope(*args))
    traces = ir.last_traces(j)
    assert len(traces) >= 2
    for t in traces:
        compile(str(t), "<trace>", "exec")
    last = str(traces[-1])
    assert last.startswith("# Executed")
    assert last.count("x.shape") == (1 if mode == SYMBOLIC else 0)
    assert "cos.shape" not in last and "sin.shape" not in last
    assert "prims." not in last   # the executed trace calls torch, not the prims' placeholders
    # what is printed is what runs: the source's function gives the same result
    ns = {"torch": torch, "F": torch.nn.functional}
    exec(compile(last, "<trace>", "exec"), ns)
    torch.testing.assert_close(ns["computation"](*args), rope(*args))


@pytest.mark.parametrize("mode", [CONSTANT, SYMBOLIC])
def test_rope_prologue_runs_on_its_own(mode):
    j = ir.jit(rope, executors=["torch"], cache=mode)
    args = rope_args(batch=2)   # batch 1 would be specialized: sizes 0 and 1 are guarded exactly
    j(*args)
    prologue = run_alone(str(ir.last_prologue(j)))
    assert prologue(*args) is True
    x, cos, sin, n = args
    assert prologue(x.half(), cos, sin, n) is False
    assert prologue(x, cos.double(), sin, n) is False
    assert prologue(x[0], cos, sin, n) is False
    assert prologue(x.requires_grad_(), cos, sin, n) is False
    other_batch = rope_args(batch=3)
    assert prologue(*other_batch) is (mode == SYMBOLIC)
    assert prologue(x.detach(), cos[:, :6], sin[:, :6], 6) is (mode == SYMBOLIC)
    assert prologue(x.detach(), cos, sin, 8.0) is False
    assert prologue(rope_args(batch=1)[0], cos, sin, n) is False
    if mode == SYMBOLIC:    # the guards relate the sizes: cos must match the rope width
        assert prologue(x.detach(), cos[:, :6], sin, 8) is False


def test_dead_code_and_repeated_shape_queries_are_gone():
    def fn(x):
        unused = torch.exp(x)  # noqa: F841
        a, b, c = x.size(0), x.size(0), x.size(0)
        return (x.reshape(a, -1) * 2 + x.reshape(b, -1)
                + torch.sin(x).reshape(c, -1) + torch.sin(x).reshape(c, -1))

    for mode in (CONSTANT, SYMBOLIC):
        j = ir.jit(fn, executors=["torch"], cache=mode)
        x = torch.randn(4, 3, 5)
        torch.testing.assert_close(j(x), fn(x))
        last = str(ir.last_traces(j)[-1])
        assert last.count(".shape") == (1 if mode == SYMBOLIC else 0)
        assert "exp" not in last
        assert last.count("torch.sin") == 1
        assert last.count("reshape") == 2


def test_seed_reshape_example_computes_minus_one_on_the_host():
    def fn(x):
        t0 = x * 2
        return t0.reshape(t0.size(0), -1)

    j = ir.jit(fn, executors=["torch"], cache=SYMBOLIC)
    x = torch.randn(4, 3, 5)
    torch.testing.assert_close(j(x), fn(x))
    last = str(ir.last_traces(j)[-1])
    assert last.count(".shape") == 1
    assert "//" in last
    assert "-1" not in last
    reshape_line = next(line for line in last.splitlines() if "reshape" in line)
    assert "(i0, " in reshape_line
    x = torch.randn(6, 7, 2)
    torch.testing.assert_close(j(x), fn(x))
    assert ir.cache_stats(j).hits == 1


def test_guards_that_other_guards_imply_are_left_out_and_the_entry_stays_right():
    j = ir.jit(rope, executors=["torch"], cache=SYMBOLIC)
    j(*rope_args())
    guards = str(ir.last_prologue(j))
    # n // 2 is >= 0 and <= n once n >= 0 is guarded: the slice bounds need no guard of their own
    assert "n >= 0" in guards and "i8 >= 0" not in guards and "i8 <= n" not in guards
    for n in (2, 3, 6, 8, 9):       # other rope widths, odd ones too: the same entry, right answers
        x, cos, sin = torch.randn(1, 2, 4, 12), torch.randn(4, n), torch.randn(4, n)
        torch.testing.assert_close(j(x, cos, sin, n), rope(x, cos, sin, n))
    assert ir.cache_stats(j).misses == 1
