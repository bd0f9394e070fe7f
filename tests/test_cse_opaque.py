"""Common-subexpression elimination of torch calls the tracer runs as opaque symbols
(`ir.passes.cse`, `ir.passes.repeatable`): a deterministic call repeated with the same arguments
(`.repeat` of one tensor) runs once; random ops, copies and in-place work are never merged, and
two returned results stay two tensors, as in eager."""
import pytest
import torch
import torch.nn.functional as F

import ir

DETERMINISTIC = {
    "repeat": lambda x: x.repeat(1, 2),
    "repeat_interleave": lambda x: x.repeat_interleave(2, dim=0),
    "cumsum": lambda x: torch.cumsum(x, 1),
    "flip": lambda x: torch.flip(x, (0,)),
    "roll": lambda x: torch.roll(x, 1, 1),
    "softplus": lambda x: F.softplus(x),
}
RANDOM = {
    "dropout": lambda x: F.dropout(x, 0.5),
    "rand_like": lambda x: torch.rand_like(x),
    "randn_like": lambda x: torch.randn_like(x),
    "bernoulli": lambda x: torch.bernoulli(torch.sigmoid(x)),
}


def calls(jfn, name) -> int:
    """How many times the executed trace calls the op `name`."""
    return str(ir.last_traces(jfn)[-1]).count(f".{name}(")


def x():
    return torch.randn(4, 6, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("name", sorted(DETERMINISTIC))
def test_a_repeated_deterministic_call_runs_once(name):
    op = DETERMINISTIC[name]

    def fn(x):
        return op(x) + 1, op(x) * 2
    jfn = ir.jit(fn, executors=["torch"])
    for got, want in zip(jfn(x()), fn(x())):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert calls(jfn, name) == 1


@pytest.mark.parametrize("name", sorted(RANDOM))
def test_random_calls_are_never_merged(name):
    op = RANDOM[name]

    def fn(x):
        return op(x) + 0, op(x) + 0
    jfn = ir.jit(fn, executors=["torch"])
    torch.manual_seed(0)
    a, b = jfn(x())
    torch.manual_seed(0)
    ea, eb = fn(x())
    assert not torch.equal(a, b)            # two draws, as in eager
    assert torch.equal(a, ea) and torch.equal(b, eb)


def test_a_deterministic_call_under_other_grad_modes_or_arguments_is_not_merged():
    def fn(x):
        a = x.repeat(1, 2)
        with torch.no_grad():
            b = x.repeat(1, 2)
        return a, b, x.repeat(2, 1)
    jfn = ir.jit(fn, executors=["torch"])
    leaf = x().requires_grad_()
    a, b, c = jfn(leaf)
    assert a.requires_grad and not b.requires_grad and c.shape == (8, 6)
    assert calls(jfn, "repeat") == 3


def test_returned_results_and_copies_stay_distinct_tensors():
    def fn(x):
        return x.repeat(1, 2), x.repeat(1, 2), x.clone(), x.clone()
    jfn = ir.jit(fn, executors=["torch"])
    r1, r2, c1, c2 = jfn(x())
    assert r1.data_ptr() != r2.data_ptr() and c1.data_ptr() != c2.data_ptr()
    r1.add_(1)
    c1.add_(1)
    assert torch.equal(r2, x().repeat(1, 2)) and torch.equal(c2, x())


def test_in_place_work_on_one_of_two_repeats_leaves_the_other():
    def fn(x):
        a, b = x.repeat(1, 2), x.repeat(1, 2)
        a.add_(1)
        a[0] = 5
        return a, b
    jfn = ir.jit(fn, executors=["torch"])
    for got, want in zip(jfn(x()), fn(x())):
        assert torch.equal(got, want)
    assert calls(jfn, "repeat") == 1
