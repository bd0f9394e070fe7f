"""The README's example runs as written (through the interpreter here) and the commands it names
exist."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def test_the_readme_example_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TRITON_EXEC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    (example,) = re.findall(r"```python\n(.*?)```", README, re.S)
    exec(compile(example, "README.md", "exec"), {})
    printed = capsys.readouterr().out
    assert "def computation(" in printed and "@triton.jit" in printed
    assert (tmp_path / "perf/out/report/report.md").exists()


def test_the_commands_it_names_exist():
    for command in ("bash perf/demo.sh", "bash tests/run.sh"):
        assert command in README
        assert (ROOT / command.split()[1]).exists()
    assert "bash tests/run.sh" in (ROOT / ".ci/run").read_text()
