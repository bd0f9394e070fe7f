"""The benchmarks' --cpu mode: tiny sizes through the interpreter, every row present and correct."""

import pytest

from perf_modules import perf_module

LABELS = ["eager", "torch.compile", "ir.jit triton", "ir.jit triton_novec"]


@pytest.mark.parametrize("name,cases", [("rope", 4), ("padcat", 5)])
def test_cpu_mode_prints_every_row_and_every_row_matches_eager(name, cases, capsys, tmp_path,
                                                               monkeypatch):
    monkeypatch.setenv("TRITON_EXEC_CACHE_DIR", str(tmp_path))
    rows = perf_module(name).main(["--cpu"])
    printed = capsys.readouterr().out
    assert "NOT GPU timings" in printed
    if name == "rope":      # forward, then forward + backward with the Liger row
        assert "## RoPE forward + backward, bf16" in printed
    by_case = {}
    for row in rows:
        by_case.setdefault(row.case, []).append(row)
    assert len(by_case) == cases
    for case, case_rows in by_case.items():
        training = case.endswith((", x", ", q and k"))     # the forward + backward table
        assert [r.label for r in case_rows] == LABELS + ["Liger-Kernel"] * training
        for r in case_rows:
            assert f"| {r.label} " in printed
            if r.label in ("torch.compile", "Liger-Kernel"):
                assert r.skipped
                continue
            assert r.ok is True, f"{case} / {r.label}: {r.note}"
            assert r.ms is not None and r.ms > 0


def test_gpt_cpu_mode_runs_the_training_step_and_matches_eager(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_EXEC_CACHE_DIR", str(tmp_path))
    rows = perf_module("gpt").main(["--cpu"])
    printed = capsys.readouterr().out
    assert "## GPT training step (forward + backward)" in printed and "NOT GPU timings" in printed
    assert [r.label for r in rows] == ["eager", "ir.jit triton", "torch.compile"]
    for r in rows[:2]:
        assert r.ok is True, f"{r.label}: {r.note}"
        assert r.ms > 0 and r.note.endswith("tokens/s") and f"| {r.label} " in printed
    assert rows[2].skipped


def test_the_gpu_checks_correctness_script_dry_runs_on_the_interpreter(capsys, tmp_path,
                                                                      monkeypatch):
    monkeypatch.setenv("TRITON_EXEC_CACHE_DIR", str(tmp_path))
    assert perf_module("cuda_check").main(["--device", "cpu", "--examples", "2"]) == 0
    printed = capsys.readouterr().out
    assert "fixed cases: 28 run, 0 failed" in printed
    assert "repeated calls (direct launches): 18 calls, 0 failed" in printed
