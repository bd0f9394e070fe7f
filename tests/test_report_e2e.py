"""The autotune report end to end: `triton_exec.report` on a tiny RoPE through the interpreter."""

import json

import pytest

import triton_exec
from triton_exec import autotune
from triton_exec.report_chart import STATIC_TITLE
from triton_exec.report_format import INTERPRETER_NOTE

from test_autotune import rope, rope_args

import ir


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_EXEC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(autotune.ENV, raising=False)
    autotune.reset_caches()
    yield tmp_path / "cache"
    autotune.reset_caches()


def test_report_of_a_tiny_rope_on_the_interpreter(tmp_path, cache_dir):
    jrope = ir.jit(rope, executors=["triton"])
    args = rope_args()
    jrope(*args)                                   # untuned on a CPU: the heuristic
    assert triton_exec.last_kernels(jrope)[0].tuning.source == "heuristic"
    paths = triton_exec.report(jrope, *args, out_dir=tmp_path / "report", max_configs=2)
    assert set(paths) >= {"json", "md"}
    report = json.loads(paths["json"].read_text())
    assert report["interpreter"] is True and report["timings_note"] == INTERPRETER_NOTE
    assert report["copy_gbps"] is None and "interpreter" in report["device"]
    (kernel,) = report["kernels"]
    assert len(kernel["configs"]) == 2
    for config in kernel["configs"]:
        assert config["error"] is None and config["p20_ms"] <= config["p50_ms"] <= config["p80_ms"]
        assert set(config["config"]) == {"ROWS", "COLS", "num_warps", "VEC"}
    assert kernel["winner"] in [c["config"] for c in kernel["configs"]]
    assert kernel["margin"] >= 1.0 and kernel["achieved_gbps"] > 0 and kernel["copy_share"] is None
    x, cos, sin, _ = args
    assert kernel["bytes_moved"] == 2 * x.numel() * 2 + cos.numel() * 2 + sin.numel() * 2
    # on the interpreter the widths are the heuristic's (the first config, VEC 8), whichever
    # config the noise made fastest
    assert [c["config"]["VEC"] for c in kernel["configs"]] == [8, 1]
    vec = kernel["configs"][0]["config"]["VEC"]
    assert max(int(w) for w in kernel["access_widths"]["ld"]) == 2 * vec
    assert max(int(w) for w in kernel["access_widths"]["st"]) == 2 * vec
    assert kernel["vector_widths"] and max(kernel["vector_widths"].values()) == 8
    assert kernel["compile_s"] > 0 and kernel["cache_hits"] == 1
    # each config's static cost, from its own offline compile; a program moves its share of
    # the ideal bytes
    costs = [kernel["static_costs"][", ".join(f"{k}={v}" for k, v in c["config"].items())]
             for c in kernel["configs"]]
    heuristic = kernel["configs"][0]["config"]
    programs = -(-x.numel() // x.shape[-1] // heuristic["ROWS"]) * -(-x.shape[-1] // heuristic["COLS"])
    moved = costs[0]["bytes_loaded"] + costs[0]["bytes_stored"]
    assert moved == pytest.approx(kernel["bytes_moved"] / programs)
    assert all(c["instructions"] > 0 and c["counted"] in ("SASS", "PTX") for c in costs)
    # with no GPU the picture is those static costs, not the interpreter's milliseconds
    assert report["chart"]["title"] == STATIC_TITLE
    (panel,) = report["chart"]["panels"]
    assert [b["value"] for b in panel["bars"]] == [c["bytes_per_warp_instruction"] for c in costs]
    assert all(b["value"] > 0 for b in panel["bars"]) and paths["png"].exists()
    assert kernel["key"].endswith("|interpreter")
    md = paths["md"].read_text()
    assert "NOT GPU timings" in md.splitlines()[0]
    assert f"Access widths from PTX: loads {2 * vec} B" in md
    # interpreter timings choose nothing for later runs: an ordinary call still starts from
    # the heuristic (a GPU report persists its winners, as test_autotune checks with the
    # interpreter forced on)
    autotune.reset_caches()
    jrope2 = ir.jit(rope, executors=["triton"])
    jrope2(*args)
    assert triton_exec.last_kernels(jrope2)[0].tuning.source == "heuristic"


def test_the_command_reports_a_users_function(tmp_path, monkeypatch, capsys):
    from triton_exec.__main__ import main
    monkeypatch.setenv("TRITON_EXEC_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "user_program.py").write_text(
        "import torch\n"
        "def scale_cat(x, y):\n"
        "    return torch.cat((x * 2, y), dim=-1) + 1\n"
        "def example():\n"
        "    return torch.randn(4, 8), torch.randn(4, 8)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "report"
    assert main(["report", "user_program:scale_cat", "--args", "user_program:example",
                 "--out", str(out)]) == 0
    assert f"Autotune report of user_program:scale_cat written to {out / 'report.md'}" in \
        capsys.readouterr().out
    report = json.loads((out / "report.json").read_text())
    (kernel,) = report["kernels"]
    assert kernel["name"].startswith("scale_cat") and kernel["name"].endswith("_fusion_0_kernel")
    with pytest.raises(SystemExit, match="--args"):
        main(["report", "user_program:scale_cat", "--out", str(out)])
