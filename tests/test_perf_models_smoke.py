"""perf/models.py --cpu: every model through eager and our backend matches eager, with Triton
kernels in forward and forward + backward; inductor rows are present and skipped on CPU."""
from perf_modules import perf_module


def test_cpu_mode_runs_every_model_through_our_backend(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_EXEC_CACHE_DIR", str(tmp_path))
    models = perf_module("models")
    rows = models.main(["--cpu"])
    printed = capsys.readouterr().out
    assert "NOT GPU timings" in printed
    assert {r.model for r in rows} == {"llama (transformers)", "llama-3-8b (litgpt)",
                                       "gpt (ir.examples)"}
    for r in rows:
        assert f"| {r.model} | {r.step} | {r.front} |" in printed
        if r.front == "torch.compile inductor":
            assert r.ok is None and "skipped" in r.note
            continue
        assert r.ok is True and r.ms > 0, r
        if r.front == "torch.compile triton_exec":
            assert r.triton > 0
