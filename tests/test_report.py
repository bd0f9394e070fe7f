"""The autotune report: JSON fields, the CPU-interpreter label, failed configs, and the chart
(timings on a GPU, each config's static cost without one)."""

import json
import sys

import pytest

from triton_exec.report_chart import STATIC_TITLE
from triton_exec.report_format import INTERPRETER_NOTE, ConfigResult, KernelReport, write_report


def rope_kernel_report() -> KernelReport:
    return KernelReport(
        name="fused_rope_0",
        key="bf16|256x16x1024x32|align16",
        configs=[
            ConfigResult({"ROWS": 4, "num_warps": 4, "V": 8}, 0.9, 1.0, 1.2),
            ConfigResult({"ROWS": 8, "num_warps": 4, "V": 8}, 1.1, 1.25, 1.4),
            ConfigResult({"ROWS": 64, "num_warps": 1, "V": 8}, error="out of resources: shared memory\n| 232448"),
        ],
        bytes_moved=4_000_000,
        access_widths={"ld": {16: 3, 8: 2}, "st": {16: 1}},
        compile_s=1.5,
        cache_hits=7,
        vector_widths={"x": 8, "cos": 8, "sin": 8, "x2": 4},
        static_costs={
            "ROWS=4, num_warps=4, V=8": {
                "arch": 90, "counted": "SASS", "instructions": 250, "num_warps": 4,
                "bytes_loaded": 4096.0, "bytes_stored": 4096.0, "registers": 32, "spill_bytes": 0,
                "ptx_instructions": 280, "bytes_per_warp_instruction": 8.192},
            "ROWS=8, num_warps=4, V=8": {"error": "no ptxas"},
        },
    )


def test_derived_winner_margin_bandwidth_and_share():
    kernel = rope_kernel_report()
    assert kernel.winner.config == {"ROWS": 4, "num_warps": 4, "V": 8}
    assert kernel.margin == pytest.approx(1.25)
    assert kernel.achieved_gbps == pytest.approx(4.0)  # 4e6 bytes in 1 ms
    assert kernel.copy_share(8.0) == pytest.approx(0.5)
    assert kernel.copy_share(None) is None


def test_all_failed_kernel_has_no_winner():
    kernel = KernelReport("k", "key", [ConfigResult({"V": 1}, error="boom")], 10, {}, 0.1, 0, {})
    assert kernel.winner is None and kernel.margin is None and kernel.achieved_gbps is None


def test_config_needs_timings_or_an_error():
    with pytest.raises(ValueError):
        ConfigResult({"V": 1}, p50_ms=1.0)


def test_json_has_every_field(tmp_path):
    paths = write_report([rope_kernel_report()], tmp_path, device="NVIDIA H200", copy_gbps=4300.0, interpreter=False)
    report = json.loads(paths["json"].read_text())
    assert {"format", "interpreter", "timings_note", "device", "copy_gbps", "kernels"} <= report.keys()
    assert report["interpreter"] is False and report["device"] == "NVIDIA H200"
    (kernel,) = report["kernels"]
    assert {
        "name", "key", "configs", "bytes_moved", "access_widths", "compile_s", "cache_hits",
        "vector_widths", "winner", "margin", "achieved_gbps", "copy_share",
    } <= kernel.keys()
    assert kernel["winner"] == {"ROWS": 4, "num_warps": 4, "V": 8}
    assert kernel["access_widths"] == {"ld": {"16": 3, "8": 2}, "st": {"16": 1}}
    assert kernel["configs"][2]["error"].startswith("out of resources")
    assert kernel["configs"][0] == {"config": {"ROWS": 4, "num_warps": 4, "V": 8},
                                    "p20_ms": 0.9, "p50_ms": 1.0, "p80_ms": 1.2, "error": None}
    assert "not GPU timings" not in paths["md"].read_text()


def test_interpreter_report_says_so_first(tmp_path):
    paths = write_report([rope_kernel_report()], tmp_path, device="cpu", copy_gbps=None, interpreter=True)
    first_lines = paths["md"].read_text().splitlines()[:3]
    assert "interpreter" in first_lines[0] and "CPU" in first_lines[0] and "NOT GPU timings" in first_lines[0]
    assert any(INTERPRETER_NOTE in line for line in first_lines)
    report = json.loads(paths["json"].read_text())
    assert report["interpreter"] is True and report["timings_note"] == INTERPRETER_NOTE
    assert list(report)[:3] == ["format", "interpreter", "timings_note"]


def test_markdown_shows_every_config_failure_reason_and_summary(tmp_path):
    markdown = write_report(
        [rope_kernel_report()], tmp_path, device="NVIDIA H200", copy_gbps=8.0, interpreter=False
    )["md"].read_text()
    assert ("| ROWS=64, num_warps=1, V=8 | - | - | - | - | failed: out of resources: shared memory "
            "\\| 232448 |") in markdown
    assert ("| ROWS=4, num_warps=4, V=8 | 0.9000 | 1.0000 | 1.2000 | 8.19 B/warp-instr: 250 SASS x 4 "
            "warps, 8192 B, 32 regs, 0 B spill | winner |") in markdown
    assert "| 1.1000 | 1.2500 | 1.4000 | n/a (no ptxas) | ok |" in markdown
    for expected in ("1.25x over the runner-up", "4,000,000", "4.0 GB/s", "50% of copy bandwidth",
                     "loads 16 B x3, 8 B x2; stores 16 B x1", "x2: 4", "1.50 s", "cache hits: 7"):
        assert expected in markdown


def test_png_written_when_matplotlib_present(tmp_path):
    pytest.importorskip("matplotlib")
    paths = write_report([rope_kernel_report()], tmp_path, device="cpu", copy_gbps=None, interpreter=True)
    assert paths["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "report.png" in paths["md"].read_text()


def test_without_matplotlib_png_is_skipped_and_md_says_so(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    paths = write_report([rope_kernel_report()], tmp_path, device="cpu", copy_gbps=None, interpreter=True)
    assert "png" not in paths and not (tmp_path / "report.png").exists()
    assert "matplotlib is not installed" in paths["md"].read_text()


def test_under_the_interpreter_no_winner_by_noise_and_no_bandwidth(tmp_path):
    paths = write_report([rope_kernel_report()], tmp_path, device="cpu", copy_gbps=None,
                         interpreter=True)
    markdown = paths["md"].read_text()
    assert "| winner |" not in markdown and "0.0 GB/s" not in markdown
    assert "not timed on a GPU" in markdown and "Achieved: n/a: no GPU" in markdown
    heuristic = rope_kernel_report().configs[0].label
    assert f"the heuristic's config, used without tuning: {heuristic}" in markdown


def test_without_a_gpu_the_chart_plots_each_configs_static_cost(tmp_path):
    """Interpreter milliseconds mean nothing on a GPU: the picture is bytes per warp-instruction
    from each config's offline sm_90 compile, titled so, with no winner and no milliseconds."""
    paths = write_report([rope_kernel_report()], tmp_path, device="cpu (Triton interpreter)",
                         copy_gbps=None, interpreter=True)
    chart = json.loads(paths["json"].read_text())["chart"]
    assert chart["title"] == STATIC_TITLE and "sm_90" in chart["title"]
    assert "no GPU: not timed" in chart["title"]
    assert chart["quantity"] == "bytes_per_warp_instruction" and "ms" not in chart["x_label"]
    assert chart["band"] == [5.0, 8.0]
    (panel,) = chart["panels"]
    assert panel["title"] == "fused_rope_0 [bf16|256x16x1024x32|align16]"
    assert [(b["value"], b["note"], b["kind"]) for b in panel["bars"]] == [
        (8.192, "250 SASS x 4 warps", "config"),
        (0.0, "no static cost (no ptxas)", "missing"),
        (0.0, "no static cost (not compiled)", "missing")]
    assert f"![{STATIC_TITLE}: bytes per warp-instruction" in paths["md"].read_text()


def test_on_a_gpu_the_chart_plots_the_timings(tmp_path):
    paths = write_report([rope_kernel_report()], tmp_path, device="NVIDIA H200", copy_gbps=4300.0,
                         interpreter=False)
    chart = json.loads(paths["json"].read_text())["chart"]
    assert chart["title"] == "Autotune: NVIDIA H200" and chart["quantity"] == "p50_ms"
    assert chart["band"] is None
    bars = chart["panels"][0]["bars"]
    assert [(b["value"], b["kind"]) for b in bars] == [(1.0, "winner"), (1.25, "config"),
                                                       (0.0, "missing")]
    assert (bars[0]["low"], bars[0]["high"]) == pytest.approx((0.1, 0.2))
