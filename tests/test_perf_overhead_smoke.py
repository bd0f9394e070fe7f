"""perf/overhead.py runs end to end (few iterations) and prints one table row per entry; no
timing is asserted."""

from perf_modules import perf_module


def test_overhead_quick_prints_the_table(capsys):
    overhead = perf_module("overhead")
    results = overhead.main(["--quick"])
    out = capsys.readouterr().out
    labels = [r["label"] for r in results]
    assert labels[0] == "eager"
    assert "ir.jit torch, constant values" in labels
    assert "ir.jit torch, symbolic values" in labels
    assert "us/call" in out and "vs eager" in out
    for r in results:
        line = next(line for line in out.splitlines() if line.startswith(r["label"] + " "))
        assert line.rstrip().endswith("x")
        assert r["us_per_call"] > 0
    assert results[0]["ratio"] == 1.0
