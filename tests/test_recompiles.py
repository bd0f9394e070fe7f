"""Recompile reasons on the `ir.recompiles` logger, and the per-function cache limit."""
import logging
import re
import warnings

import pytest
import torch

import ir

MODES = ["constant values", "symbolic values"]


def scale(x, s: float):
    return x * s + 1


def reasons(caplog):
    return [r.getMessage() for r in caplog.records if r.name == "ir.recompiles"]


def test_a_size_change_in_constant_mode_names_the_size(caplog):
    jfn = ir.jit(scale, executors=["triton"])
    with caplog.at_level(logging.INFO, logger="ir.recompiles"):
        jfn(torch.randn(32, 8), 0.25)
        assert reasons(caplog) == []            # the first miss is no recompile
        jfn(torch.randn(16, 8), 0.25)
    (message,) = reasons(caplog)
    assert "scale" in message and "x: size 0 changed 32 -> 16 (constant values)" in message


def test_a_float_value_in_constant_mode_names_the_value(caplog):
    jfn = ir.jit(scale, executors=["triton"])
    x = torch.randn(4, 8)
    with caplog.at_level(logging.INFO, logger="ir.recompiles"):
        jfn(x, 0.25)
        jfn(x, 0.5)
    (message,) = reasons(caplog)
    assert "s: value 0.5 != 0.25" in message
    with caplog.at_level(logging.INFO, logger="ir.recompiles"):
        jfn(x, 0.0)
        jfn(x, -0.0)                    # another entry: eager tells -0.0 from 0.0 (x / s)
    assert "s: value -0.0 != 0.0" in reasons(caplog)[-1]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("change, expected", [
    (lambda x: x.half(), "x: dtype changed float32 -> float16"),
    (lambda x: x[None], "x: rank changed 2 -> 3"),
    (lambda x: x.clone().requires_grad_(), "x: requires_grad changed False -> True"),
])
def test_other_changes_are_named(caplog, mode, change, expected):
    jfn = ir.jit(lambda x: x * 2 + 1, executors=["triton"], cache=mode)
    x = torch.randn(4, 8)
    with caplog.at_level(logging.INFO, logger="ir.recompiles"):
        jfn(x)
        jfn(change(x))
    (message,) = reasons(caplog)
    assert expected in message


def test_a_failed_guard_in_symbolic_mode_names_the_guard_and_the_size(caplog):
    jfn = ir.jit(lambda x: torch.cat((x, x), -1) * 2, executors=["triton"],
                 cache="symbolic values")
    with caplog.at_level(logging.INFO, logger="ir.recompiles"):
        jfn(torch.randn(4, 8))
        jfn(torch.randn(4, 12))                  # the same entry: no record
        assert reasons(caplog) == []
        jfn(torch.randn(4, 1))                   # a size of 1 is specialized
    (message,) = reasons(caplog)
    assert "guard i1 >= 2 failed: i1 = x.shape[1] = 1" in message
    with caplog.at_level(logging.INFO, logger="ir.recompiles"):
        jfn(torch.randn(4, 6)[:, 1:5])           # a stride or alignment guard of the first entry
    assert "guard x" in reasons(caplog)[-1]


@pytest.mark.parametrize("mode", MODES)
def test_past_the_cache_limit_a_warning_once_then_eager(mode):
    calls = []

    def f(x):
        calls.append(1)         # runs while tracing, and on every eager call
        return torch.cat((x, x * 2), -1)

    def eager(x):
        return torch.cat((x, x * 2), -1)

    jfn = ir.jit(f, executors=["triton"], cache=mode, cache_limit=2)
    # one cache key, four entries: symbolic mode specializes sizes of 1; constant mode guards
    # the innermost stride (transposed tensors) and the alignment (offset views)
    if mode == "symbolic values":
        xs = [torch.randn(shape) for shape in ((4, 8), (4, 1), (1, 8), (1, 1))]
    else:
        xs = [torch.randn(4, 8), torch.randn(8, 4).t(), torch.randn(33)[1:].view(4, 8),
              torch.randn(8, 5)[:, 1:].t()]
    for x in xs[:2]:
        torch.testing.assert_close(jfn(x), eager(x))
    with pytest.warns(UserWarning, match="f reached its cache limit \\(2 entries"):
        before = len(calls)
        torch.testing.assert_close(jfn(xs[2]), eager(xs[2]))
        assert len(calls) == before + 1      # run once, eagerly: no tracing
    assert ir.cache_stats(jfn).eager == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")           # once: no second warning
        torch.testing.assert_close(jfn(xs[3]), eager(xs[3]))
        torch.testing.assert_close(jfn(xs[0]), eager(xs[0]))   # an existing entry still serves
    stats = ir.cache_stats(jfn)
    assert (stats.misses, stats.eager, stats.hits) == (4, 2, 1)


def test_the_limit_counts_per_cache_key():
    jfn = ir.jit(lambda x: x + 1, executors=["triton"], cache_limit=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for x in (torch.randn(3), torch.randn(3, dtype=torch.float16), torch.randn(4)):
            jfn(x)                                  # each its own key
    with pytest.warns(UserWarning, match="cache limit"):
        jfn(torch.randn(6)[::2])                    # the key of randn(3), another stride


def test_the_default_limit_is_8_and_bad_limits_are_refused():
    assert ir.jit(scale).cache_limit == 8
    for bad in (0, -1, 2.0, "8"):
        with pytest.raises(ValueError, match="cache_limit"):
            ir.jit(scale, cache_limit=bad)
    assert ir.jit(scale, cache_limit=None).cache_limit is None


W = torch.randn(8)


@pytest.mark.parametrize("mode", MODES)
def test_an_entry_reading_captured_tensors_names_the_failed_check(caplog, mode):
    """The checks read the captured tensors from their sources, as the prologue does (they used
    to be left out: "the guards could not be evaluated (TypeError: check() missing ...)")."""
    jfn = ir.jit(lambda x: x * W + 1, executors=["triton"], cache=mode)
    with caplog.at_level(logging.INFO, logger="ir.recompiles"):
        jfn(torch.randn(4, 8))
        jfn(torch.randn(1, 8) if mode == "symbolic values" else torch.randn(2, 8))
    (message,) = reasons(caplog)
    assert "could not be evaluated" not in message
    expected = ("guard i0 >= 2 failed: i0 = x.shape[0] = 1" if mode == "symbolic values"
                else "x: size 0 changed 4 -> 2")
    assert expected in message


@pytest.mark.parametrize("mode", MODES)
def test_a_module_in_symbolic_mode_names_the_failed_check(caplog, mode):
    model = ir.jit(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU()),
                   executors=["triton"], cache=mode)
    with torch.no_grad(), caplog.at_level(logging.INFO, logger="ir.recompiles"):
        model(torch.randn(4, 8))
        model(torch.randn(1, 8) if mode == "symbolic values" else torch.randn(2, 8))
    (message,) = reasons(caplog)
    assert "could not be evaluated" not in message
    expected = (r"guard i0 >= 2 failed: i0 = \w+\.shape\[0\] = 1" if mode == "symbolic values"
                else r"\w+: size 0 changed 4 -> 2")
    assert re.search(expected, message), message
