"""Autotuning through the executor on the interpreter: forced tuning times a few configs and
persists the winner under TRITON_EXEC_CACHE_DIR, a new instance or process reuses it without
timing, a corrupt file is survived with a warning, and without forcing a CPU gets the heuristic."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import ir
from ir.examples import rope, rope_inputs
import triton_exec
from triton_exec import autotune
from triton_exec.launch import heuristic_config

ROOT = Path(__file__).resolve().parent.parent


def rope_args():
    return rope_inputs(B=1, H=2, T=8, hs=32, n=8, dtype=torch.bfloat16)


def run_rope():
    j = ir.jit(rope, executors=["triton"])
    args = rope_args()
    out = j(*args)
    torch.testing.assert_close(out, rope(*args), rtol=2e-2, atol=4e-2)
    (record,) = triton_exec.last_kernels(j)
    return record


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_EXEC_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(autotune.ENV_MAX_CONFIGS, "2")
    monkeypatch.delenv(autotune.ENV, raising=False)
    autotune.reset_caches()
    yield tmp_path
    autotune.reset_caches()


def test_cpu_without_forcing_uses_the_heuristic_untimed(cache_dir):
    record = run_rope()
    assert record.tuning.source == "heuristic" and record.tuning.results == []
    rows = 1 * 2 * 8
    assert record.config == heuristic_config(record.lowered, rows, 32)
    assert not (cache_dir / "tuning.json").exists()


def test_forced_tuning_persists_the_winner_and_a_new_instance_reuses_it(cache_dir, monkeypatch):
    monkeypatch.setenv(autotune.ENV, "1")
    record = run_rope()
    tuning = record.tuning
    assert tuning.source == "tuned" and tuning.interpreter
    assert len(tuning.results) == 2 and not any(r.failed for r in tuning.results)
    assert all(r.p20_ms <= r.p50_ms <= r.p80_ms for r in tuning.results)
    best = min(tuning.results, key=lambda r: r.p50_ms)
    assert best.config == {"ROWS": record.config.rows, "COLS": record.config.cols,
                           "num_warps": record.config.num_warps, "VEC": record.config.vec}
    stored = json.loads((cache_dir / "tuning.json").read_text())["entries"]
    assert stored[tuning.key]["timed_on"] == "interpreter"
    assert {k: stored[tuning.key][k] for k in best.config} == best.config

    autotune.reset_caches()        # as a new process would, reread the file; time nothing
    monkeypatch.setattr(autotune, "benchmark", lambda *a, **k: pytest.fail("timed again"))
    again = run_rope()
    assert again.tuning.source == "cache" and again.tuning.results == []
    assert again.config == record.config and again.tuning.key == tuning.key


def test_a_second_process_starts_tuned(cache_dir, monkeypatch):
    monkeypatch.setenv(autotune.ENV, "1")
    record = run_rope()
    script = (
        "import sys; sys.path.insert(0, %r)\n"
        "import test_autotune as t, triton_exec.autotune as a\n"
        "a.benchmark = None\n"          # any timing would fail
        "r = t.run_rope(); print(r.tuning.source, r.config.rows, r.config.num_warps)\n"
    ) % str(ROOT / "tests")
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["cache", str(record.config.rows), str(record.config.num_warps)]


def test_corrupt_tuning_file_is_survived_with_a_warning_and_rewritten(cache_dir, monkeypatch):
    (cache_dir / "tuning.json").write_text("{definitely not json")
    monkeypatch.setenv(autotune.ENV, "1")
    with pytest.warns(UserWarning, match="tuning.json"):
        record = run_rope()
    assert record.tuning.source == "tuned"
    data = json.loads((cache_dir / "tuning.json").read_text())
    assert record.tuning.key in data["entries"]


def test_a_stored_entry_that_is_not_a_config_is_retuned(cache_dir, monkeypatch):
    monkeypatch.setenv(autotune.ENV, "1")
    key = run_rope().tuning.key
    autotune.reset_caches()
    autotune.tuning_cache().put(key, {"ROWS": 3, "COLS": "x"})
    with pytest.warns(UserWarning, match="not a launch config"):
        record = run_rope()
    assert record.tuning.source == "tuned"


def test_autotune_zero_switches_tuning_off_but_a_report_still_times(cache_dir, monkeypatch):
    monkeypatch.setenv(autotune.ENV, "0")
    assert run_rope().tuning.source == "heuristic"
    with autotune.forced(max_configs=1):
        record = run_rope()
    assert record.tuning.source == "tuned" and len(record.tuning.results) == 1


@pytest.mark.parametrize("rows,cols,width", [(16, 32, 8), (1, 8, 8), (4096, 1024, 4),
                                              (100000, 2048, 8), (3, 5, 1)])
def test_config_space_keeps_a_vector_per_thread(rows, cols, width):
    class FakeLowered:
        max_width = width
        chunks = ()
        loop = None
        whole_rows = False
        row_axis = None
    heuristic = heuristic_config(FakeLowered(), rows, cols)
    space = autotune.config_space(heuristic, rows, width, max_configs=12)
    assert space[0] == heuristic and len(space) == len(set(space)) and 1 <= len(space) <= 12
    assert heuristic.vec == width
    # every narrower vector width, right after the heuristic: the vectorization's A/B
    assert [c.vec for c in space[1:width.bit_length()]] == [2 ** k for k in range(width.bit_length() - 1)]
    for c in space:
        assert c.cols == heuristic.cols and c.vec <= width
        assert c.rows * c.cols >= 32 * c.num_warps * c.vec
