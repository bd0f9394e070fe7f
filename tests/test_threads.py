"""One jitted function called from many threads at once: tracing state is per thread, compiles
are serialized with a double-checked lookup, a failed compile caches nothing, and the stats add
up. Torch executor only: the Triton interpreter itself is not thread-safe."""

import threading

import ir
import pytest
import torch

CONSTANT, SYMBOLIC = "constant values", "symbolic values"


def program(x, y, n: int):
    z = x[..., :n] * y[..., :n] + x.shape[-1]
    return torch.cat((z, x[..., n:].to(z.dtype) - 1), dim=-1)


def inputs(seed: int):
    g = torch.Generator().manual_seed(seed)
    rows, cols = 2 + seed % 5, 4 + 2 * (seed % 7)
    dtype = (torch.float32, torch.bfloat16)[seed % 2]
    x = torch.randn(rows, cols, generator=g).to(dtype)
    return x, torch.randn(cols, generator=g), 1 + seed % 3


@pytest.mark.parametrize("mode", [CONSTANT, SYMBOLIC])
def test_eight_threads_mixed_shapes(mode):
    j = ir.jit(program, executors=["torch"], cache=mode)
    threads, calls = 8, 25
    errors, start = [], threading.Barrier(threads)

    def work(t):
        start.wait()
        for c in range(calls):
            args = inputs(t * calls + c)
            try:
                torch.testing.assert_close(j(*args), program(*args))
            except Exception as e:       # noqa: BLE001  (every error is counted, none hidden)
                errors.append(repr(e))

    pool = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for p in pool:
        p.start()
    for p in pool:
        p.join()
    assert errors == []
    stats = ir.cache_stats(j)
    assert stats.hits + stats.misses == threads * calls
    entries = sum(len(es) for es in j.entries.values())
    assert stats.misses == entries      # every miss compiled exactly one stored entry
    distinct = {(a[0].shape, a[0].dtype, a[2]) for a in map(inputs, range(threads * calls))}
    assert entries <= len(distinct)


def fails_on_three_rows(x):
    if x.shape[0] == 3:
        raise ValueError("three rows")
    return x * 2


@pytest.mark.parametrize("mode", [CONSTANT, SYMBOLIC])
def test_a_failed_compile_caches_nothing(mode):
    j = ir.jit(fails_on_three_rows, executors=["torch"], cache=mode)
    for _ in range(2):
        with pytest.raises(ValueError, match="three rows"):
            j(torch.ones(3, 4))
    assert ir.cache_stats(j).misses == 2 and not j.entries
    torch.testing.assert_close(j(torch.ones(5, 4)), torch.full((5, 4), 2.0))
    with pytest.raises(ValueError, match="three rows"):
        j(torch.ones(3, 4))


def test_traced_values_outside_tracing_are_refused_in_every_thread():
    seen = []

    def capture(x):
        seen.append(x.shape[0])
        return x + 1

    ir.jit(capture, executors=["torch"], cache=SYMBOLIC)(torch.ones(4, 2))
    result = []
    worker = threading.Thread(target=lambda: result.append(_raises(lambda: seen[0] + 1)))
    worker.start()
    worker.join()
    assert result == ["a traced value was used outside of ir.jit tracing"]


def _raises(fn):
    try:
        fn()
    except RuntimeError as e:
        return str(e)
    return None
