"""The jit's cache: which calls hit and which miss, per cache mode; a miss is never a crash or a
wrong answer; arguments the jit cannot handle raise a TypeError naming the argument; torch
functions the tracer does not model run as opaque symbols."""

import ir
import pytest
import torch

CONSTANT, SYMBOLIC = "constant values", "symbolic values"


def stats(j):
    s = ir.cache_stats(j)
    return (s.misses, s.hits)


def scale(x, y):
    return x * 2 + y.to(x.dtype)


def check(j, fn, *args):
    torch.testing.assert_close(j(*args), fn(*args), rtol=0, atol=0)


def test_symbolic_one_entry_serves_other_batch_sizes():
    j = ir.jit(scale, executors=["torch"], cache=SYMBOLIC)
    check(j, scale, torch.randn(32, 8), torch.randn(8))
    check(j, scale, torch.randn(16, 8), torch.randn(8))
    assert stats(j) == (1, 1)
    check(j, scale, torch.randn(5, 3), torch.randn(3))
    assert stats(j) == (1, 2)


def test_constant_a_new_size_is_a_miss():
    j = ir.jit(scale, executors=["torch"], cache=CONSTANT)
    check(j, scale, torch.randn(32, 8), torch.randn(8))
    check(j, scale, torch.randn(32, 8), torch.randn(8))
    assert stats(j) == (1, 1)
    check(j, scale, torch.randn(16, 8), torch.randn(8))
    assert stats(j) == (2, 1)
    check(j, scale, torch.randn(32, 8), torch.randn(8))   # the first entry is still there
    assert stats(j) == (2, 2)


OTHER_ARGS = {
    "dtype": lambda: (torch.randn(4, 8).half(), torch.randn(8)),
    "rank": lambda: (torch.randn(2, 4, 8), torch.randn(8)),
    "rank_of_second": lambda: (torch.randn(4, 8), torch.randn(1, 8)),
    "int_dtype": lambda: (torch.arange(32, dtype=torch.int32).reshape(4, 8), torch.randn(8)),
    "device": lambda: (torch.randn(4, 8, device="meta"), torch.randn(8, device="meta")),
    "requires_grad": lambda: (torch.randn(4, 8, requires_grad=True), torch.randn(8)),
}


@pytest.mark.parametrize("mode", [CONSTANT, SYMBOLIC])
@pytest.mark.parametrize("change", sorted(OTHER_ARGS))
def test_other_metadata_is_a_miss_with_the_right_answer(mode, change):
    j = ir.jit(scale, executors=["torch"], cache=mode)
    check(j, scale, torch.randn(4, 8), torch.randn(8))
    args = OTHER_ARGS[change]()
    out, expected = j(*args), scale(*args)
    assert stats(j) == (2, 0)
    assert (out.shape, out.dtype, out.device) == (expected.shape, expected.dtype, expected.device)
    assert out.requires_grad == expected.requires_grad
    if out.device.type != "meta":
        torch.testing.assert_close(out.detach(), expected.detach(), rtol=0, atol=0)
    j(*args)
    assert stats(j) == (2, 1)
    check(j, scale, torch.randn(4, 8), torch.randn(8))   # and the first entry still serves
    assert stats(j) == (2, 2)


def branchy(x):
    if x.shape[0] > 4:
        return x * 2
    return x - 1


def test_control_flow_on_a_size_specializes_with_a_guard():
    j = ir.jit(branchy, executors=["torch"], cache=SYMBOLIC)
    check(j, branchy, torch.randn(8, 3))
    check(j, branchy, torch.randn(16, 3))
    assert stats(j) == (1, 1)
    assert "> 4" in str(ir.last_prologue(j)) or "<= 4" in str(ir.last_prologue(j))
    check(j, branchy, torch.randn(3, 3))   # the other side of the branch
    assert stats(j) == (2, 1)
    check(j, branchy, torch.randn(2, 3))
    check(j, branchy, torch.randn(5, 3))
    assert stats(j) == (2, 3)


def head(x, n: int):
    return x[..., :n] * n


def test_int_argument_guarded_by_value_in_constant_mode():
    j = ir.jit(head, executors=["torch"], cache=CONSTANT)
    x = torch.randn(4, 8)
    check(j, head, x, 2)
    check(j, head, x, 3)
    assert stats(j) == (2, 0)
    check(j, head, x, 2)
    assert stats(j) == (2, 1)


def test_int_argument_guarded_by_type_in_symbolic_mode():
    j = ir.jit(head, executors=["torch"], cache=SYMBOLIC)
    x = torch.randn(4, 8)
    check(j, head, x, 2)
    check(j, head, x, 3)
    check(j, head, x, 6)
    assert stats(j) == (1, 2)
    check(j, head, x, 5)
    check(j, head, x, 12)   # past the end: the slice clamps, as in eager; a guard tells them apart
    assert stats(j) == (2, 3)
    j2 = ir.jit(lambda x, s: x * s, executors=["torch"], cache=SYMBOLIC)
    torch.testing.assert_close(j2(x, 2), x * 2)
    torch.testing.assert_close(j2(x, 0.5), x * 0.5)   # a float is another type: a miss
    assert stats(j2) == (2, 0)
    assert j2(x, 3).dtype == torch.float32 and stats(j2) == (2, 1)


def test_no_caching_always_misses():
    j = ir.jit(scale, executors=["torch"], cache="no caching")
    for _ in range(3):
        check(j, scale, torch.randn(4, 8), torch.randn(8))
    assert stats(j) == (3, 0)


def test_unknown_cache_mode_raises():
    with pytest.raises(ValueError, match="bogus"):
        ir.jit(scale, cache="bogus")


UNSUPPORTED = {     # containers of any depth are supported (tests/test_containers_pytree.py),
    # and a tensor subclass runs eagerly (tests/test_transforms.py)
    "object": lambda: object(),
    "object_in_a_container": lambda: {"a": [torch.randn(3), object()]},
    "complex": lambda: torch.randn(3, dtype=torch.complex64),
}


@pytest.mark.parametrize("mode", [CONSTANT, SYMBOLIC])
@pytest.mark.parametrize("what", sorted(UNSUPPORTED))
def test_unsupported_argument_raises_type_error_naming_it(mode, what):
    def fn(x, weird):
        return x * 2

    j = ir.jit(fn, executors=["torch"], cache=mode)
    with pytest.raises(TypeError, match="weird"):
        j(torch.randn(3), UNSUPPORTED[what]())


def test_a_list_of_tensors_is_supported():
    def fn(xs, y):
        return torch.cat(list(xs), dim=0) * y

    j = ir.jit(fn, executors=["torch"], cache=SYMBOLIC)
    xs = [torch.randn(2, 3), torch.randn(4, 3)]
    torch.testing.assert_close(j(xs, torch.randn(3) * 0 + 2), fn(xs, torch.randn(3) * 0 + 2))
    xs = [torch.randn(5, 3), torch.randn(3, 3)]
    torch.testing.assert_close(j(xs, torch.full((3,), 2.0)), fn(xs, torch.full((3,), 2.0)))
    assert stats(j) == (1, 1)


def opaque_ops(x, w):
    return torch.cumsum(x, dim=-1) + torch.matmul(x, w).sum(-1, keepdim=True)


@pytest.mark.parametrize("mode", [CONSTANT, SYMBOLIC])
def test_unmodelled_torch_functions_run_as_opaque_symbols(mode):
    j = ir.jit(opaque_ops, executors=["torch"], cache=mode)
    x, w = torch.randn(4, 5), torch.randn(5, 6)
    torch.testing.assert_close(j(x, w), opaque_ops(x, w))
    source = str(ir.last_traces(j)[-1])
    assert "torch.cumsum" in source and "torch.matmul" in source
    x, w = torch.randn(3, 5), torch.randn(5, 7)
    torch.testing.assert_close(j(x, w), opaque_ops(x, w))


def _iadd(x):
    x += 1
    return x


def _setitem(x):
    x[0] = 1
    return x


@pytest.mark.parametrize("fn", [lambda x: x.add_(1), lambda x: torch.relu_(x - 0.5),
                                lambda x: x.__iadd__(1), _iadd, _setitem])
def test_in_place_ops_write_into_their_argument_as_eager(fn):
    j = ir.jit(fn, executors=["torch"])
    for _ in range(2):      # the cached entry writes too
        x, expected = torch.zeros(3), torch.zeros(3)
        out = j(x)
        eager_out = fn(expected)
        assert torch.equal(x, expected) and torch.equal(out, eager_out)
        assert (out is x) == (eager_out is expected)


@pytest.mark.parametrize("mode", [CONSTANT, SYMBOLIC])
def test_the_check_after_a_key_match_agrees_with_the_whole_prologue(mode):
    def f(x, pair, k: int):
        return x[..., k:] * 2 + pair[0] - pair[1]

    j = ir.jit(f, executors=["torch"], cache=mode)
    j(torch.randn(4, 6), (1.0, 2.0), 1)
    prologue = ir.last_prologue(j)
    same_key = [   # what the hashed key does not tell apart: they reach the check after it
        (torch.randn(4, 6), (1.0, 2.0), 1),
        (torch.randn(4, 6, requires_grad=True), (1.0, 2.0), 1),
        (torch.randn(6, 4).mT, (1.0, 2.0), 1),
        (torch.randn(25)[1:].reshape(4, 6), (1.0, 2.0), 1),
        (torch.empty(4, 6, device="meta"), (1.0, 2.0), 1),
    ]
    outcomes = []
    for args in same_key:
        assert j.key(args) in j.entries
        outcomes.append(prologue.fn(*args))
        assert prologue.after_key(*args) == outcomes[-1]
    assert outcomes[0] and not outcomes[1] and not outcomes[-1]


@pytest.mark.parametrize("mode", [CONSTANT, SYMBOLIC])
def test_a_tuple_of_floats_is_checked_item_by_item(mode):
    def f(x, pair):
        return x * pair[0] - pair[1]

    j = ir.jit(f, executors=["torch"], cache=mode)
    x = torch.randn(3)
    for pair in [(1.5, 2.0), (1.5, 2.0), [1.5, 2.0], (3.0, 2.0)]:
        check(j, f, x, pair)
    # floats are constants in constant mode, runtime values in symbolic mode; a list is no tuple
    assert stats(j) == ((3, 1) if mode == CONSTANT else (2, 2))
