"""`ir.explain` (what fuses, what is left to torch and why, what symbolic mode specialized, the
guards) and the warnings and log records about fallbacks."""
import logging
import warnings

import pytest
import torch

import ir
import triton_exec
from ir.examples import rope, rope_inputs
from ir.executors import TorchExecutor


def reasons_of(explanation, op):
    (item,) = [i for i in explanation.as_dict()["left_to_torch"] if i["op"] == op]
    return item["reasons"]


def test_a_fused_group_with_its_ops_kernel_and_guards(monkeypatch):
    def no_timing(*args, **kwargs):
        raise AssertionError("explain ran a kernel")

    monkeypatch.setattr(triton_exec.autotune, "benchmark", no_timing)
    monkeypatch.setenv("TRITON_EXEC_AUTOTUNE", "1")       # tuning on: still nothing is timed
    args = rope_inputs(B=1, H=2, T=8, hs=32, n=8, dtype=torch.bfloat16, device="cpu")
    jfn = ir.jit(rope, executors=["triton"])
    found = ir.explain(jfn, *args)
    data = found.as_dict()
    (group,) = data["fusion_groups"]
    assert group["executor"] == "triton" and group["kernel"] == f"{jfn.name}_fusion_0_kernel"
    assert {"slice", "cat", "mul", "neg", "add"} <= set(group["ops"])
    assert data["left_to_torch"] == []
    assert "n == 8" in data["guards"] and any("x.data_ptr() % 16 == 0" in g
                                               for g in data["guards"])
    assert ir.cache_stats(jfn).misses == 0 and jfn.last_entry is None    # nothing cached
    text = str(found)
    for part in ("Fusion groups (1):", f"kernel {jfn.name}_fusion_0_kernel", "Left to torch (0):",
                 "Guards of the entry"):
        assert part in text


def test_float64_cumsum_and_grad_are_left_to_torch_with_their_reasons():
    def f(x, y, w):
        a = torch.cumsum(x * 2, dim=-1)
        return a + 1, y * 3, w * 4

    x, y = torch.randn(4, 8), torch.randn(4, 8, dtype=torch.float64)
    w = torch.randn(4, 8, requires_grad=True)
    found = ir.explain(ir.jit(f, executors=["triton"]), x, y, w)
    (cumsum,) = reasons_of(found, "torch.cumsum")
    assert cumsum["executor"] == "triton" and cumsum["kind"] == "not fusible"
    assert "cumsum" in cumsum["reason"] and "fusible set" in cumsum["reason"]
    muls = [i for i in found.left_to_torch if i["op"] == "mul"]
    kinds = {i["reasons"][0]["kind"]: i["reasons"][0]["reason"] for i in muls}
    assert "float64" in kinds["dtype not fused"]
    # w * 4 needs grad: it fuses all the same (with a + 1), its backward in the whole trace's
    assert "needs grad" not in kinds and len(found.fusion_groups) == 2
    assert found.backward.startswith("one for the whole trace")
    text = str(found)
    assert "torch.cumsum  <- triton: not fusible" in text and "dtype not fused" in text


def test_cpu_tensors_without_the_interpreter_are_not_claimed(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET")

    def f(x):
        return torch.cat((x, x * 2), dim=-1) + 1

    jfn = ir.jit(f, executors=["triton"])
    found = ir.explain(jfn, torch.randn(4, 8))
    assert found.fusion_groups == []
    assert {r["kind"] for i in found.as_dict()["left_to_torch"] for r in i["reasons"]} == {
        "device not claimed"}
    assert "TRITON_INTERPRET=1" in found.left_to_torch[0]["reasons"][0]["reason"]
    x = torch.randn(4, 8)
    with pytest.warns(UserWarning, match="triton executor runs nothing of f .*TRITON_INTERPRET=1"):
        torch.testing.assert_close(jfn(x), f(x))
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # once per function
        x = torch.randn(3, 8)
        torch.testing.assert_close(jfn(x), f(x))


def test_partial_fallbacks_are_logged_and_do_not_warn(caplog):
    def f(x):
        return torch.cumsum(x * 2, dim=-1) + 1

    jfn = ir.jit(f, executors=["triton"])
    x = torch.randn(4, 8)
    with warnings.catch_warnings(), caplog.at_level(logging.INFO, logger="ir.fallbacks"):
        warnings.simplefilter("error")
        torch.testing.assert_close(jfn(x), f(x))
    (record,) = [r for r in caplog.records if r.name == "ir.fallbacks"]
    assert "torch.cumsum" in record.getMessage() and "not in the fusible set" in record.getMessage()


def test_an_executor_checker_refusal_names_the_executor():
    class OnlyNeg(TorchExecutor):
        name = "only_neg"

        def fusion_pass(self, trace, ctx):
            return trace

        def claims(self, eqn):
            return eqn.prim.name == "neg"

    def f(x):
        return -(x * 2)

    jfn = ir.jit(f, executors=[OnlyNeg()])
    found = ir.explain(jfn, torch.randn(3))
    (refusal,) = reasons_of(found, "mul")
    assert refusal == {"executor": "only_neg", "kind": "checker refused",
                       "reason": "only_neg.claims() refused it"}
    assert found.fusion_groups == [{"call": "neg", "executor": "only_neg", "kernel": None,
                                    "ops": ["neg"]}]
    x = torch.randn(3)
    torch.testing.assert_close(jfn(x), f(x))


def test_symbolic_specializations_name_the_op_or_the_branch():
    def f(x, y):
        a = torch.kron(x, x) * 2    # kron runs on torch without a shape rule: it pins x's sizes
        if y.shape[0] == 5:                     # a branch pins y's first size
            return a, y + 1
        return a, y - 1

    jfn = ir.jit(f, executors=["triton"], cache="symbolic values")
    found = ir.explain(jfn, torch.randn(3, 4), torch.randn(5, 6))
    by_size = {s["of"]: s for s in found.as_dict()["specialized"]}
    assert by_size["x.shape[0]"]["value"] == 3 and by_size["x.shape[1]"]["value"] == 4
    assert by_size["x.shape[0]"]["cause"] == "torch.kron (no symbolic shape rule)"
    assert by_size["y.shape[0]"]["value"] == 5
    assert "if y.shape[0] == 5:" in by_size["y.shape[0]"]["cause"]
    assert "test_explain.py" in by_size["y.shape[0]"]["cause"]
    assert "y.shape[1]" not in by_size
    ones = ir.explain(jfn, torch.randn(3, 1), torch.randn(2, 6)).as_dict()["specialized"]
    assert {"size": "i1", "of": "x.shape[1]", "value": 1,
            "cause": "a size of 0 or 1 (broadcasting depends on it)"} in ones
    assert "Sizes specialized (3):" in str(found)
