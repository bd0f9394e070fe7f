"""Module state that `ir.jit(module)` must see at every call, each checked against an eager copy
over several calls: hooked submodules (run as opaque calls in eager), submodules whose forward
cannot be traced, tied and untied weights, attribute writes and number attributes changing,
tensor attributes, and copies (deepcopy, pickle, torch.save) of a JitModule."""

import copy
import io
import logging
import pickle

import ir
import pytest
import torch
import torch.nn.functional as F
import triton_exec
from hypothesis import given, settings, strategies as st

from test_modules import fresh


def _hooks():
    """name -> register(module, log): one kind of hook each, recording into `log` what it sees
    (and some changing the module's inputs or outputs, as hooks may)."""
    def forward(mod, log):
        return mod.register_forward_hook(lambda m, args, out: log.append(out.detach().clone()))

    def forward_replacing_output(mod, log):
        return mod.register_forward_hook(lambda m, args, out: out * 2)

    def pre_forward_replacing_input(mod, log):
        return mod.register_forward_pre_hook(lambda m, args: (args[0] + 1,) + args[1:])

    def pre_forward_with_kwargs(mod, log):
        return mod.register_forward_pre_hook(
            lambda m, args, kwargs: log.append(args[0].detach().clone()), with_kwargs=True)

    def full_backward(mod, log):
        return mod.register_full_backward_hook(
            lambda m, grad_in, grad_out: log.append(grad_out[0].clone()))

    def backward_pre(mod, log):
        return mod.register_full_backward_pre_hook(
            lambda m, grad_out: log.append(grad_out[0].clone()))

    return {f.__name__: f for f in (forward, forward_replacing_output, pre_forward_replacing_input,
                                    pre_forward_with_kwargs, full_backward, backward_pre)}


HOOKS = _hooks()
TARGETS = ["norm", "fc", "head", ""]     # "" is the jitted module itself


def _steps(module, x, n=2):
    """n forward and backward calls: the outputs."""
    outputs = []
    for _ in range(n):
        out = module(x)
        out.square().sum().backward()
        outputs.append(out.detach())
    return outputs


@settings(max_examples=10)
@given(hooks=st.lists(st.tuples(st.sampled_from(sorted(HOOKS)), st.sampled_from(TARGETS)),
                      min_size=1, max_size=3),
       seed=st.integers(0, 50))
def test_hooked_submodules_run_their_hooks_at_every_call_as_eager(hooks, seed):
    model = fresh(seed)
    reference = copy.deepcopy(model)
    logs, reference_logs = [], []
    for kind, target in hooks:
        logs.append([])
        HOOKS[kind](model.get_submodule(target), logs[-1])
        reference_logs.append([])
        HOOKS[kind](reference.get_submodule(target), reference_logs[-1])
    jm = ir.jit(model, executors=["triton"])
    x = torch.randn(3, 8, requires_grad=True)
    for got, expected in zip(_steps(jm, x), _steps(reference, x)):
        torch.testing.assert_close(got, expected)
    for (kind, target), log, reference_log in zip(hooks, logs, reference_logs):
        assert len(log) == len(reference_log), (kind, target)
        for got, expected in zip(log, reference_log):
            torch.testing.assert_close(got, expected, msg=lambda m: f"{kind} on {target!r}: {m}")
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=name)
    assert ir.cache_stats(jm).misses == 1
    called = {c["module"] for c in ir.explain(jm, x).module_calls}
    assert called == {t for _, t in hooks if t}
    inputs = {name for name, _ in ir.last_traces(jm)[-1].inputs}
    for target in called:      # a hooked module's parameters are not inputs of the trace
        assert not any(name.startswith(target + "_") for name in inputs), inputs


def test_an_opaque_call_is_listed_by_explain_and_hooks_added_or_removed_recompile(caplog):
    model = fresh()
    jm = ir.jit(model, executors=["triton"])
    x = torch.randn(3, 8)
    jm(x)
    seen = []
    with caplog.at_level(logging.INFO, logger="ir.recompiles"):
        handle = model.norm.register_forward_hook(lambda m, args, out: seen.append(out.shape))
        torch.testing.assert_close(jm(x), model(x))
        assert "module 'norm': hooks added: it now runs as an opaque call" in caplog.text
    assert seen == [torch.Size([3, 8])] * 2     # the jitted call and the eager one
    explanation = ir.explain(jm, x)
    assert explanation.module_calls == [{"call": "opaque_Norm_call_1", "module": "norm",
                                         "class": "Norm", "reason": "its call runs hooks",
                                         "outputs": "t1"}]
    assert "Modules called in eager (1" in str(explanation)
    assert "norm_weight" not in [name for name, _ in ir.last_traces(jm)[-1].inputs]
    handle.remove()
    torch.testing.assert_close(jm(x), model(x))
    assert (ir.cache_stats(jm).misses, ir.cache_stats(jm).hits) == (2, 1)


@pytest.mark.parametrize("grad", [True, False])
def test_an_opaque_call_in_symbolic_mode_specializes_its_sizes(grad):
    model = fresh()
    seen = []
    model.norm.register_forward_hook(lambda m, args, out: seen.append(out.shape[0]))
    jm = ir.jit(model, executors=["triton"], cache="symbolic values")
    with torch.set_grad_enabled(grad):
        for rows in (3, 5, 3):
            x = torch.randn(rows, 8)
            got = jm(x)
            assert got.requires_grad == grad
            torch.testing.assert_close(got, model(x))
    assert seen == [3, 3, 5, 5, 3, 3]       # the jitted call's and the eager one's
    assert (ir.cache_stats(jm).misses, ir.cache_stats(jm).hits) == (2, 1)
    causes = [s["cause"] for s in ir.explain(jm, x).specialized if s["of"] == "x.shape[0]"]
    assert causes == ["module 'norm' (an opaque call: its call runs hooks)"]


def test_a_forward_replaced_on_the_instance_runs_at_every_call():
    """As accelerate's hooks do: `module.forward` replaced by a function calling the old one."""
    def add_hook(module, log):
        old_forward = module.forward

        def new_forward(*args, **kwargs):
            log.append(args[0].shape)
            return old_forward(*args, **kwargs) + 1
        module.forward = new_forward

    model = fresh()
    reference = copy.deepcopy(model)
    log, reference_log = [], []
    add_hook(model.norm, log)
    add_hook(reference.norm, reference_log)
    jm = ir.jit(model, executors=["triton"])
    x = torch.randn(3, 8)
    for _ in range(3):
        torch.testing.assert_close(jm(x), reference(x))
    assert log == reference_log == [torch.Size([3, 8])] * 3
    assert [c["module"] for c in ir.explain(jm, x).module_calls] == ["norm"]


def test_global_module_hooks_make_every_submodule_call_opaque():
    model = fresh()
    jm = ir.jit(model, executors=["triton"])
    x = torch.randn(3, 8)
    seen = []
    handle = torch.nn.modules.module.register_module_forward_hook(
        lambda m, args, out: seen.append(type(m).__name__))
    try:
        torch.testing.assert_close(jm(x), model(x))
        assert seen == ["Linear", "Norm", "Linear", "JitModule", "Linear", "Norm", "Linear", "Net"]
    finally:
        handle.remove()
    torch.testing.assert_close(jm(x), model(x))
    assert ir.cache_stats(jm).misses == 2


class DataDependent(torch.nn.Module):
    """A forward that branches on data: not traceable."""

    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.tensor(1.5))

    def forward(self, x):
        if x.sum() > 0:
            return x * self.scale
        return x - self.scale


class WithUntraceable(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.branch = DataDependent()

    def forward(self, x):
        return F.silu(self.branch(self.fc(x))) * 2


def test_a_submodule_that_cannot_be_traced_runs_as_an_opaque_call(caplog):
    torch.manual_seed(0)
    model = WithUntraceable()
    reference = copy.deepcopy(model)
    with caplog.at_level(logging.INFO, logger="ir.fallbacks"):
        jm = ir.jit(model, executors=["triton"])
        for step in range(4):
            x = torch.randn(3, 4) + (5 if step % 2 else -5)      # both branches
            torch.testing.assert_close(jm(x), reference(x))
            jm(x).sum().backward()
            reference(x).sum().backward()
    assert "module 'branch' (DataDependent) runs as an opaque call in eager: its forward cannot " \
           "be traced" in caplog.text
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad)
    assert ir.cache_stats(jm).misses == 1 and triton_exec.last_kernels(jm)
    [call] = ir.explain(jm, x).module_calls
    assert call["module"] == "branch" and "cannot be traced" in call["reason"]
    assert "fc_weight" in [name for name, _ in ir.last_traces(jm)[-1].inputs]   # rolled back
    assert "branch_scale" not in [name for name, _ in ir.last_traces(jm)[-1].inputs]
    with pytest.raises(NotImplementedError):    # the top module's own: the user's error
        ir.jit(DataDependent())(x)


def test_batchnorm_with_a_cumulative_average_matches_eager_over_many_calls():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4, momentum=None))
    reference = copy.deepcopy(model)
    jm = ir.jit(model)
    for _ in range(4):
        x = torch.randn(5, 4)
        torch.testing.assert_close(jm(x), reference(x))
    for a, b in zip(model.state_dict().values(), reference.state_dict().values()):
        torch.testing.assert_close(a, b)


class TiedLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(32, 16)
        self.head = torch.nn.Linear(16, 32, bias=False)

    def forward(self, idx):
        return self.head(F.silu(self.emb(idx)) * 2)


def test_tying_and_untying_weights_recompile(caplog):
    torch.manual_seed(0)
    lm = TiedLM()
    lm.head.weight = lm.emb.weight
    jl = ir.jit(lm, executors=["triton"])
    idx = torch.randint(0, 32, (2, 5))
    torch.testing.assert_close(jl(idx), lm(idx))
    with caplog.at_level(logging.INFO, logger="ir.recompiles"):
        lm.head.weight = torch.nn.Parameter(torch.zeros(32, 16))
        out = jl(idx)
    assert torch.equal(out, torch.zeros(2, 5, 32))
    assert "share one tensor (tied weights) changed: [(1, 0)] -> []" in caplog.text
    assert [name for name, _ in ir.last_traces(jl)[-1].inputs] == ["idx", "emb_weight",
                                                                   "head_weight"]
    lm.head.weight = lm.emb.weight                  # tied again: the first entry
    out = jl(idx)
    out.sum().backward()
    reference = copy.deepcopy(lm)
    reference.zero_grad()
    lm.emb.weight.grad = None
    jl(idx).sum().backward()
    reference(idx).sum().backward()
    torch.testing.assert_close(lm.emb.weight.grad, reference.emb.weight.grad)
    assert (ir.cache_stats(jl).misses, ir.cache_stats(jl).hits) == (2, 2)


class Tempered(torch.nn.Module):
    """A forward reading number, bool and tensor attributes."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.temperature = 1.0
        self.shift = 0
        self.gated = False
        self.mask = torch.ones(8)       # a tensor attribute, neither parameter nor buffer

    def forward(self, x):
        h = self.fc(x) / self.temperature + self.shift
        if self.gated:
            h = F.silu(h)
        return h * self.mask


ATTRIBUTE_CHANGES = [("temperature", 0.25), ("temperature", 2.0), ("shift", 3), ("gated", True),
                     ("gated", False), ("mask", "zeros"), ("mask", "random")]


@settings(max_examples=10)
@given(changes=st.lists(st.sampled_from(range(len(ATTRIBUTE_CHANGES))), min_size=1, max_size=5),
       through_jitmodule=st.booleans())
def test_attribute_writes_and_changes_are_seen_as_in_eager(changes, through_jitmodule):
    torch.manual_seed(0)
    model = Tempered()
    reference = copy.deepcopy(model)
    jm = ir.jit(model, executors=["triton"])
    x = torch.randn(3, 8)
    torch.testing.assert_close(jm(x), reference(x))
    for i in changes:
        name, value = ATTRIBUTE_CHANGES[i]
        if name == "mask":
            value = torch.zeros(8) if value == "zeros" else torch.randn(8)
        setattr(jm if through_jitmodule else model, name, value)
        setattr(reference, name, value)
        assert getattr(model, name) is value and name not in jm.__dict__
        torch.testing.assert_close(jm(x), reference(x), msg=lambda m: f"after {name}: {m}")
    numbers = {(n, v) for n, v in (ATTRIBUTE_CHANGES[i] for i in changes) if n != "mask"}
    assert ir.cache_stats(jm).misses <= 1 + len(numbers)     # a mask is an input: no recompile


def test_a_changed_number_attribute_recompiles_and_the_record_names_it(caplog):
    torch.manual_seed(0)
    model = Tempered()
    jm = ir.jit(model, executors=["triton"])
    x = torch.randn(3, 8)
    jm(x)
    with caplog.at_level(logging.INFO, logger="ir.recompiles"):
        jm.temperature = 0.25
        torch.testing.assert_close(jm(x), model(x))
    assert "module '(top)': attribute 'temperature' changed 1.0 -> 0.25" in caplog.text
    assert "module '(top)': temperature is float 0.25" in ir.explain(jm, x).guards
    assert "module '(top)': temperature is float 0.25" in str(ir.last_prologue(jm))
    misses = ir.cache_stats(jm).misses
    jm.unread = 1.0                     # an attribute the forward does not read: not guarded
    jm(x)
    jm.unread = 2.0
    jm(x)
    assert ir.cache_stats(jm).misses == misses
    jm.mask = torch.full((8,), 3.0)      # an input, read at the call: no recompile
    torch.testing.assert_close(jm(x), model(x))
    assert "mask" in [name for name, _ in ir.last_traces(jm)[-1].inputs]
    jm.extra = 5                        # writes and deletes reach the original
    assert model.extra == 5
    del jm.extra
    assert not hasattr(model, "extra")
    jm.fc = torch.nn.Linear(8, 8)
    assert model.fc is jm.fc
    torch.testing.assert_close(jm(x), model(x))


@pytest.mark.parametrize("called_first", [False, True])
def test_deepcopy_pickle_and_torch_save_give_a_working_jitted_copy(called_first):
    model = fresh()
    jm = ir.jit(model, executors=["triton"], cache="symbolic values", cache_limit=3)
    x = torch.randn(3, 8)
    if called_first:
        jm(x)

    def saved(m):
        buffer = io.BytesIO()
        torch.save(m, buffer)
        buffer.seek(0)
        return torch.load(buffer, weights_only=False)

    copies = [copy.deepcopy(jm), pickle.loads(pickle.dumps(jm)), saved(jm),
              copy.deepcopy(torch.nn.Sequential(jm))[0]]
    for twin in copies:
        assert isinstance(twin, ir.JitModule) and twin._orig_mod is not model
        assert ir.cache_stats(twin).misses == 0            # the cache is not copied
        assert twin._jitted.options() == jm._jitted.options()
        torch.testing.assert_close(twin(x), model(x))
        assert triton_exec.last_kernels(twin)
        with torch.no_grad():
            twin.fc.weight.add_(1)                          # its own parameters
        assert not torch.equal(twin.fc.weight, model.fc.weight)
        torch.testing.assert_close(twin(x), twin._orig_mod(x))
