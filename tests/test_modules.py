"""`ir.jit(module)` and `ir.jit(module.method)`: the module's parameters and buffers are inputs of
the traces read at every call, the JitModule is the module (its names, state_dict, train/eval,
.to), the module tree and training flags are part of the cache key, hooks run at every call."""

import copy
import logging
import re

import ir
import pytest
import torch
import torch.nn.functional as F
import triton_exec
from hypothesis import given, settings, strategies as st


class Norm(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.rand(n) + 0.5)
        self.register_buffer("shift", torch.randn(n))

    def forward(self, x):
        return F.silu(x) * self.weight + self.shift


class Net(torch.nn.Module):
    """Linear layers (torch), fused elementwise work on parameters and buffers (triton), a
    branch on the training flag."""

    def __init__(self, n=8):
        super().__init__()
        self.fc = torch.nn.Linear(n, n)
        self.norm = Norm(n)
        self.head = torch.nn.Linear(n, 4, bias=False)

    def forward(self, x, scale: float = 1.0):
        h = self.norm(self.fc(x)) * scale
        if self.training:
            h = h * 2
        return self.head(h)

    def features(self, x):
        return self.norm(x) - self.norm.shift


def fresh(seed=0, n=8):
    torch.manual_seed(seed)
    return Net(n)


def test_jit_of_a_module_is_the_module_with_its_forward_jitted():
    model = fresh()
    jm = ir.jit(model, executors=["triton"])
    assert isinstance(jm, torch.nn.Module) and isinstance(jm, ir.JitModule)
    x = torch.randn(3, 8)
    torch.testing.assert_close(jm(x), model(x))
    torch.testing.assert_close(jm(x, scale=0.5), model(x, 0.5))
    # the original's names and objects
    assert [(n, id(p)) for n, p in jm.named_parameters()] == \
        [(n, id(p)) for n, p in model.named_parameters()]
    assert [(n, id(b)) for n, b in jm.named_buffers()] == \
        [(n, id(b)) for n, b in model.named_buffers()]
    assert list(jm.state_dict()) == list(model.state_dict())
    assert [n for n, _ in jm.named_modules()] == [n for n, _ in model.named_modules()]
    assert jm.fc is model.fc and jm.features.__func__ is Net.features
    # parameters and buffers are named inputs of the traces; a fused kernel reads them
    inputs = [name for name, _ in ir.last_traces(jm)[-1].inputs]
    assert inputs == ["x", "scale", "fc_weight", "fc_bias", "norm_weight", "norm_shift",
                      "head_weight"]
    # kernels are named after the class (Net, or Net_<n> where another test jitted a Net first)
    assert triton_exec.last_kernels(jm)
    assert re.search(r"\bNet(_\d+)?_fusion_0\b", str(ir.last_traces(jm)[-1]))
    assert repr(jm).startswith("ir.jit(Net(")


def _mutations():
    """(name, fn(model, other)) changes of the module's state that keep its tree."""
    def sgd_step(model, other):
        model.zero_grad()
        model(torch.randn(2, 8)).square().sum().backward()
        torch.optim.SGD(model.parameters(), lr=0.1).step()

    def load(model, other):
        model.load_state_dict(other.state_dict())

    def replace_parameter(model, other):
        model.norm.weight = torch.nn.Parameter(other.norm.weight.detach().clone())

    def replace_buffer(model, other):
        model.norm.shift = other.norm.shift.clone()

    def in_place(model, other):
        with torch.no_grad():
            model.fc.bias.mul_(-3)

    return [("sgd_step", sgd_step), ("load_state_dict", load),
            ("replace_parameter", replace_parameter), ("replace_buffer", replace_buffer),
            ("in_place", in_place)]


MUTATIONS = _mutations()


@settings(max_examples=12)
@given(steps=st.lists(st.sampled_from(range(len(MUTATIONS))), min_size=1, max_size=4),
       grad=st.booleans(), seed=st.integers(0, 100))
def test_generated_state_changes_are_seen_by_the_next_call_without_recompiling(steps, grad, seed):
    model, other = fresh(seed), fresh(seed + 1)
    jm = ir.jit(model, executors=["triton"])
    x = torch.randn(3, 8)
    with torch.set_grad_enabled(grad):
        torch.testing.assert_close(jm(x), model(x))
    for i in steps:
        name, mutate = MUTATIONS[i]
        mutate(model, other)
        with torch.set_grad_enabled(grad):
            torch.testing.assert_close(jm(x), model(x), msg=lambda m: f"after {name}: {m}")
    assert ir.cache_stats(jm).misses == 1       # same kinds of tensors: every call hits


def test_parameter_gradients_flow_through_fused_kernels():
    model = fresh()
    reference = copy.deepcopy(model)
    jm = ir.jit(model, executors=["triton"])
    x = torch.randn(3, 8)
    jm(x).sum().backward()
    reference(x).sum().backward()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=name)
    assert "backward" in [k.direction for k in triton_exec.last_kernels(jm)]
    # the unit computes the norm's weight gradient (an input of the trace) in its backward
    backward = "\n".join(str(t[-1]) for t in ir.last_backward_traces(jm).values())
    assert "norm_weight" in backward


def test_train_and_eval_reach_the_original_and_the_training_flag_is_guarded(caplog):
    model = fresh()
    jm = ir.jit(model, executors=["triton"])
    x = torch.randn(3, 8)
    torch.testing.assert_close(jm(x), model(x))
    assert jm.eval() is jm
    assert not model.training and not model.norm.training and not jm.training
    with caplog.at_level(logging.INFO, logger="ir.recompiles"):
        torch.testing.assert_close(jm(x), model(x))      # the other branch: recompiled
    assert "training changed True -> False" in caplog.text
    jm.train()
    assert model.training and jm.training
    torch.testing.assert_close(jm(x), model(x))
    model.eval()                                        # on the original: seen as well
    assert not jm.training
    torch.testing.assert_close(jm(x), model(x))
    assert (ir.cache_stats(jm).misses, ir.cache_stats(jm).hits) == (2, 2)


def test_a_changed_module_tree_recompiles(caplog):
    model = fresh()
    jm = ir.jit(model, executors=["triton"])
    x = torch.randn(3, 8)
    jm(x)
    with caplog.at_level(logging.INFO, logger="ir.recompiles"):
        model.fc = torch.nn.Linear(8, 8, bias=False)         # another submodule
        torch.testing.assert_close(jm(x), model(x))
        assert "module 'fc': replaced by another module" in caplog.text
        jm.head.bias = torch.nn.Parameter(torch.randn(4))    # a parameter where None was
        torch.testing.assert_close(jm(x), model(x))
        assert "module 'head': its parameters changed ['weight'] -> ['weight', 'bias']" \
            in caplog.text
        del model.norm.shift                                 # a buffer removed
        model.norm.register_buffer("shift", None)
        with pytest.raises(TypeError):      # eager raises too: the forward reads a None
            model(x)
        with pytest.raises(TypeError):
            jm(x)
    assert ir.cache_stats(jm).misses == 4


def test_to_and_float_act_on_the_original():
    model = fresh()
    jm = ir.jit(model, executors=["triton"])
    x = torch.randn(3, 8)
    jm(x)
    assert jm.to(torch.float64) is jm and model.fc.weight.dtype == torch.float64
    assert model.norm.shift.dtype == torch.float64
    with pytest.warns(UserWarning, match="runs nothing of Net.forward"):    # float64: torch
        torch.testing.assert_close(jm(x.double()), model(x.double()))
    jm.float()
    torch.testing.assert_close(jm(x), model(x))
    assert ir.cache_stats(jm).hits == 1      # back to float32: the first entry


def test_state_dict_round_trips_and_a_parent_module_sees_the_original_names():
    model, other = fresh(0), fresh(1)
    jm = ir.jit(model, executors=["triton"])
    x = torch.randn(3, 8)
    jm(x)
    jm.load_state_dict(other.state_dict())
    torch.testing.assert_close(jm(x), other(x))
    assert all(torch.equal(a, b) for a, b in zip(jm.state_dict().values(),
                                                 other.state_dict().values()))
    parent, plain = torch.nn.Sequential(jm), torch.nn.Sequential(fresh(2))
    assert list(parent.state_dict()) == list(plain.state_dict())
    parent.load_state_dict(plain.state_dict())
    torch.testing.assert_close(parent(x), plain(x))
    assert ir.cache_stats(jm).misses == 1


def test_hooks_on_the_jitmodule_and_on_the_original_run_at_every_call():
    model = fresh()
    jm = ir.jit(model, executors=["triton"])
    x = torch.randn(3, 8)
    calls = []
    handle = jm.register_forward_hook(lambda mod, args, out: calls.append(out.shape))
    jm(x)
    jm(x)
    assert calls == [torch.Size([3, 4])] * 2
    handle.remove()
    handle = model.register_forward_pre_hook(lambda mod, args: (args[0] * 2,))
    torch.testing.assert_close(jm(x), model(x))
    torch.testing.assert_close(jm(x), fresh()(x * 2))
    handle.remove()
    torch.testing.assert_close(jm(x), model(x))
    assert ir.cache_stats(jm).misses == 1       # the top module's hooks run around the entry


@pytest.mark.parametrize("mode", ["constant values", "symbolic values"])
def test_a_bound_method_of_a_module_reads_its_state_at_every_call(mode):
    model = fresh()
    jf = ir.jit(model.features, executors=["triton"], cache=mode)
    x = torch.randn(3, 8)
    torch.testing.assert_close(jf(x), model.features(x))
    assert [name for name, _ in ir.last_traces(jf)[-1].inputs] == ["x", "norm_weight",
                                                                   "norm_shift"]
    with torch.no_grad():
        model.norm.weight.add_(1)
    model.norm.shift = torch.randn(8)
    torch.testing.assert_close(jf(x), model.features(x))
    # the module's own hooks: a bound method skips them in eager too; a submodule's run
    handle = model.register_forward_hook(lambda *args: None)
    torch.testing.assert_close(jf(x), model.features(x))
    handle.remove()
    handle = model.norm.register_forward_hook(lambda mod, args, out: out + 1)
    torch.testing.assert_close(jf(x), model.features(x))
    handle.remove()
    jm = ir.jit(model.forward, executors=["triton"], cache=mode)
    y = torch.randn(5, 8)
    torch.testing.assert_close(jm(y), model(y))
    assert ir.cache_stats(jf).misses == 2      # the hooked norm: an opaque call


def test_tied_weights_are_one_input_and_get_both_gradients():
    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(16, 8)
            self.out = torch.nn.Linear(8, 16, bias=False)
            self.out.weight = self.emb.weight

        def forward(self, idx):
            return self.out(F.silu(self.emb(idx)) * 2)

    torch.manual_seed(0)
    model = Tied()
    reference = copy.deepcopy(model)
    jm = ir.jit(model, executors=["triton"])
    idx = torch.randint(0, 16, (2, 5))
    jm(idx).sum().backward()
    reference(idx).sum().backward()
    assert [name for name, _ in ir.last_traces(jm)[-1].inputs] == ["idx", "emb_weight"]
    torch.testing.assert_close(model.emb.weight.grad, reference.emb.weight.grad)


def test_diagnostics_accept_a_jitmodule():
    torch.manual_seed(0)
    jm = ir.jit(Norm(8), executors=["triton"], cache="symbolic values")
    for rows in (3, 5):
        jm(torch.randn(rows, 8))
    assert (ir.cache_stats(jm).misses, ir.cache_stats(jm).hits) == (1, 1)
    explanation = ir.explain(jm, torch.randn(4, 8)).as_dict()
    assert explanation["fusion_groups"]
    assert "weight" in str(ir.last_prologue(jm))
