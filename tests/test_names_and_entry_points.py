"""Kernels and kernel files are named after the jitted function (unique per function),
executors named in `ir.jit` are found through the `ir.executors` entry point group, and the
installed distribution (`triton-exec`) lists both entry point groups."""
import importlib.metadata
import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import torch

import ir
import triton_exec

ROOT = Path(__file__).resolve().parent.parent


def rope_like(x, y):
    return torch.cat((x * 2, y), dim=-1) + 1


def test_kernels_and_files_are_named_after_the_function(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_EXEC_CACHE_DIR", str(tmp_path))
    jfn = ir.jit(rope_like, executors=["triton"])
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    torch.testing.assert_close(jfn(x, y), rope_like(x, y))
    assert jfn.name == "rope_like"
    (record,) = triton_exec.last_kernels(jfn)
    assert record.name == "rope_like_fusion_0_kernel"
    assert "def rope_like_fusion_0_kernel(" in record.source
    assert "rope_like_fusion_0(x, y)" in str(ir.last_traces(jfn)[-1])
    files = sorted(p.name for p in (tmp_path / "kernels").glob("*.py"))
    assert len(files) == 1 and files[0].startswith("rope_like_") and len(files[0]) == len(
        "rope_like_") + 16 + len(".py")
    # jitted again (as a report does): the same function keeps its name
    assert ir.jit(rope_like, executors=["triton"]).name == "rope_like"


def test_names_are_unique_per_function():
    def make(k):
        def f(x):
            return x * k + 1
        return f

    first, second = make(2), make(3)
    j1, j2 = ir.jit(first, executors=["triton"]), ir.jit(second, executors=["triton"])
    x = torch.randn(4, 8)
    torch.testing.assert_close(j1(x), first(x))
    torch.testing.assert_close(j2(x), second(x))
    names = [triton_exec.last_kernels(j)[0].name for j in (j1, j2)]
    assert names[0] != names[1]
    assert all(n.startswith("f") and n.endswith("_fusion_0_kernel") for n in names)
    assert ir.jit(lambda x: x + 1).name.startswith("lambda")


def test_an_executor_named_in_jit_loads_its_package_through_the_entry_point(tmp_path):
    program = textwrap.dedent("""
        import sys, torch, ir
        assert "triton_exec" not in sys.modules
        jfn = ir.jit(lambda x: torch.cat((x, x * 2), dim=-1) + 1, executors=["triton"])
        x = torch.randn(3, 8)
        torch.testing.assert_close(jfn(x), torch.cat((x, x * 2), dim=-1) + 1)
        import triton_exec
        assert len(triton_exec.last_kernels(jfn)) == 1
        assert ir.get_executor("triton") is triton_exec.executor
        print("ok")
    """)
    env = dict(os.environ, TRITON_INTERPRET="1", TRITON_EXEC_CACHE_DIR=str(tmp_path),
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_an_unknown_executor_name_is_refused():
    import pytest
    with pytest.raises(ValueError, match="no executor named 'tritonn'.*'triton'"):
        ir.jit(lambda x: x, executors=["tritonn"])


def test_the_installed_distribution_says_what_it_is_and_lists_its_entry_points():
    """What pip installed from pyproject.toml: the distribution that provides `ir` and
    `triton_exec` is `triton-exec`, and its metadata names the executors and the Dynamo backend,
    each found by name as torch and `ir.jit` look them up."""
    name = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"]
    assert name == "triton-exec"
    providers = importlib.metadata.packages_distributions()
    assert name in providers["ir"] and name in providers["triton_exec"]
    listed = {(e.group, e.name): e.value for e in importlib.metadata.distribution(name).entry_points}
    assert listed == {("ir.executors", "triton"): "triton_exec:executor",
                      ("ir.executors", "triton_novec"): "triton_exec:executor_without_vectorization",
                      ("torch_dynamo_backends", "triton_exec"): "ir.dynamo:backend"}
    (backend,) = importlib.metadata.entry_points(group="torch_dynamo_backends", name="triton_exec")
    (executor,) = importlib.metadata.entry_points(group="ir.executors", name="triton")
    assert backend.dist.name == executor.dist.name == name
    assert backend.load() is ir.dynamo.backend and executor.load() is triton_exec.executor
    import torch._dynamo
    assert "triton_exec" in torch._dynamo.list_backends()
