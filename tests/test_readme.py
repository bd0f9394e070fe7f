"""The README's example runs as written (through the interpreter here) and the commands it names
exist."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def test_the_readme_example_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TRITON_EXEC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    examples = re.findall(r"```python\n(.*?)```", README, re.S)
    assert len(examples) == 4       # the first steps, training, a model, torch.compile (each
    #                                 builds on them)
    namespace = {}
    for example in examples:
        exec(compile(example, "README.md", "exec"), namespace)
    printed = capsys.readouterr().out
    assert "def computation(" in printed and "@triton.jit" in printed
    # what the README shows of ir.explain is what it prints
    shown = re.search(r"## When it does not fuse or recompiles.*?```text\n(.*?)```", README, re.S)
    for line in shown.group(1).splitlines():
        if line.strip() != "...":
            assert re.sub(r"rope_\d+_", "rope_", line) in re.sub(r"rope_\d+_", "rope_", printed)
    assert re.search(r"def rope(_\d+)?_backward\(cos, sin, t\d+\)", printed)
    assert "['forward', 'backward']" in printed
    assert "ir.explain(GPT.forward)" in printed and "CacheStats(hits=1, misses=1, eager=0)" in printed
    assert (tmp_path / "perf/out/report/report.md").exists()
    assert "ir.dynamo: 1 graphs" in printed


def test_the_commands_it_names_exist():
    for command in ("bash perf/demo.sh", "bash tests/run.sh"):
        assert command in README
        assert (ROOT / command.split()[1]).exists()
    assert "bash tests/run.sh" in (ROOT / ".ci/run").read_text()


def test_the_demo_prints_traces_kernel_widths_and_writes_the_report(tmp_path, monkeypatch,
                                                                     capsys):
    monkeypatch.setenv("TRITON_EXEC_CACHE_DIR", str(tmp_path / "cache"))
    from triton_exec.__main__ import main
    assert main(["demo", "--out", str(tmp_path / "report")]) == 0
    printed = capsys.readouterr().out
    for part in ("# ---- Prologue ----", "def prologue(", "# ---- Computation trace ----",
                 "@triton.jit", "VEC=8",
                 "Access widths from PTX (compiled offline for sm_90): loads 16 B",
                 "# ---- The small GPT (ir.examples.GPT, 1 layer): ir.jit(model) ----",
                 "checked against eager: close", "silu, mul",
                 f"Autotune report written to {tmp_path / 'report' / 'report.md'}"):
        assert part in printed, part
    kernels = re.search(r"# Kernels: (\d+) forward, (\d+) backward", printed)
    assert kernels and int(kernels[1]) > 0 and int(kernels[2]) > 0
    # named after the function: rope_1 when another function called rope was jitted before
    assert re.search(r"t11 = rope(_\d+)?_fusion_0\(x, cos, sin\)", printed)
    assert (tmp_path / "report" / "report.json").exists()
