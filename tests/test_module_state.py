"""Module state that forward changes (`ir.functionalize`, `ir.module_state`): buffers updated in
place or rebound are written back after every call, as eager leaves them, over several calls and
training steps compared with an eager copy of the module; nothing of the tracer stays in a module,
also when tracing fails."""
import copy

import pytest
import torch
import torch.nn as nn

import ir
import triton_exec  # noqa: F401  (registers the "triton" executor)
from ir.proxies import TensorProxy
from semantics import GRID


class StepCounter(nn.Module):
    def __init__(self, rebind: bool):
        super().__init__()
        self.rebind = rebind
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))

    def forward(self, x):
        if self.rebind:
            self.steps = self.steps + 1
        else:
            self.steps += 1
        return x * self.steps


class RunningAverage(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("average", torch.zeros(4))
        self.register_buffer("decay", torch.ones(()))

    def forward(self, x):
        self.average.mul_(0.9).add_(0.1 * x.mean(0))
        self.decay.mul_(0.5)
        return x * self.decay + self.average


class KVCache(nn.Module):
    def __init__(self, index_copy: bool):
        super().__init__()
        self.index_copy = index_copy
        self.register_buffer("cache", torch.zeros(1, 2, 6, 3))

    def forward(self, k, pos):
        if self.index_copy:
            self.cache.index_copy_(2, pos, k)
        else:
            self.cache[:, :, pos] = k
        return self.cache.sum(2)


def _kv_inputs(index_copy):
    if index_copy:
        return lambda i: (torch.randn(1, 2, 1, 3), torch.tensor([i]))
    return lambda i: (torch.randn(1, 2, 3), i)


MODULES = {
    "steps +=": (lambda: StepCounter(False), lambda i: (torch.randn(3, 4),)),
    "steps = steps + 1": (lambda: StepCounter(True), lambda i: (torch.randn(3, 4),)),
    "running average": (RunningAverage, lambda i: (torch.randn(3, 4),)),
    "kv cache setitem": (lambda: KVCache(False), _kv_inputs(False)),
    "kv cache index_copy_": (lambda: KVCache(True), _kv_inputs(True)),
    "batchnorm train": (lambda: nn.BatchNorm1d(4), lambda i: (torch.randn(5, 4),)),
    "batchnorm eval": (lambda: nn.BatchNorm1d(4).eval(), lambda i: (torch.randn(5, 4),)),
    "batchnorm untracked": (lambda: nn.BatchNorm1d(4, track_running_stats=False),
                            lambda i: (torch.randn(5, 4),)),
    "batchnorm 3-d": (lambda: nn.BatchNorm1d(4), lambda i: (torch.randn(2, 4, 3),)),
}


def assert_same_state(module, reference):
    for (name, a), (_, e) in zip(module.named_buffers(), reference.named_buffers()):
        torch.testing.assert_close(a, e, msg=lambda m: f"buffer {name}: {m}")
    for name, value in vars(module).items():
        assert not isinstance(value, TensorProxy), name
    for mod in module.modules():
        assert not any(isinstance(v, TensorProxy) for v in mod._buffers.values())


@pytest.mark.parametrize("where", GRID, ids=lambda w: f"{w[0]}-{w[1].split()[0]}")
@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_state_matches_eager_over_several_calls(name, where):
    make, inputs = MODULES[name]
    torch.manual_seed(0)
    module = make()
    reference = copy.deepcopy(module)
    jitted = ir.jit(module, executors=[where[0]], cache=where[1])
    for i in range(4):
        args = inputs(i)
        torch.testing.assert_close(jitted(*args), reference(*args))
        assert_same_state(module, reference)


def test_a_rebound_buffer_is_the_new_tensor_after_each_call():
    module, reference = StepCounter(True), StepCounter(True)
    jitted = ir.jit(module, executors=["torch"])
    seen = set()
    for _ in range(3):
        jitted(torch.ones(2))
        reference(torch.ones(2))
        assert type(module.steps) is torch.Tensor and id(module.steps) not in seen
        seen.add(id(module.steps))
    assert module.steps.item() == reference.steps.item() == 3
    assert ir.cache_stats(jitted).misses == 1


def test_a_buffer_changed_by_augmented_assignment_stays_the_same_tensor():
    module = StepCounter(False)
    steps = module.steps
    jitted = ir.jit(module, executors=["torch"])
    for _ in range(3):
        jitted(torch.ones(2))
    assert module.steps is steps and steps.item() == 3


def test_batchnorm_training_steps_match_eager():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 2))
    reference = copy.deepcopy(model)
    jitted = ir.jit(model, executors=["triton"])
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, reference)]
    for _ in range(3):
        x = torch.randn(6, 4)
        for m, opt in zip((jitted, reference), optimizers):
            opt.zero_grad()
            m(x).square().sum().backward()
            opt.step()
        for a, e in zip(model.state_dict().values(), reference.state_dict().values()):
            torch.testing.assert_close(a, e)


def test_batchnorm_momentum_none_raises_a_clear_error_and_leaves_the_module_as_it_was():
    module = nn.BatchNorm1d(4, momentum=None)
    before = {k: v.clone() for k, v in module.state_dict().items()}
    with pytest.raises(NotImplementedError, match="num_batches_tracked"):
        ir.jit(module, executors=["torch"])(torch.randn(5, 4))
    for k, v in module.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert_same_state(module, module)


def test_tracing_that_fails_restores_the_module():
    class Broken(StepCounter):
        def forward(self, x):
            self.steps = self.steps + 1
            self.extra = x * 2
            raise ValueError("stop")

    module = Broken(True)
    steps = module.steps
    with pytest.raises(ValueError, match="stop"):
        ir.jit(module, executors=["torch"])(torch.ones(2))
    assert module.steps is steps and "extra" not in vars(module)


def test_an_in_place_op_on_a_buffer_never_runs_at_tracing():
    module = RunningAverage()
    jitted = ir.jit(module, executors=["torch"])
    x = torch.ones(3, 4)
    jitted(x)
    assert module.decay.item() == 0.5       # once per call, not once more at tracing
    jitted(x)
    assert module.decay.item() == 0.25
