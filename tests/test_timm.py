"""timm's vision models (the `timm` package, unmodified: `timm==1.0.31`, imported without
torchvision by `timm_import`) built from tiny configs with random weights (nothing downloaded),
through `ir.jit(model, executors=["triton"])` and `torch.compile(model, backend=...)`: Swin
(a grid of 6 patches in windows of 4: padded windows, the second block shifted), ConvNeXt (the
NHWC MLP with layer scale permuted back to NCHW, LayerNorm2d; also channels_last), ViT with a
class token and register tokens, EfficientNet with TF 'same' padding (`F.pad` of an even size:
asymmetric pads) and squeeze-excite, CoaT-Lite (factor attention, the conv position encodings'
cat of head groups). Output and every parameter's gradient of a training step equal eager's
(fp32), also under bf16 autocast and in symbolic mode (one entry for two batch sizes), with
Triton kernels launched forward and backward."""
import pytest
import torch
import torch._dynamo
from torch._dynamo.testing import CompileCounter

import ir
import triton_exec
from ir.dynamo import Backend
from timm_import import import_timm

timm = import_timm()
from timm.models._efficientnet_builder import decode_arch_def  # noqa: E402

FP32 = dict(rtol=1e-4, atol=1e-5)
BF16 = dict(rtol=2e-2, atol=2e-2)


def _swin():
    return timm.create_model("swin_tiny_patch4_window7_224", img_size=24, patch_size=4,
                             window_size=4, embed_dim=16, depths=(2,), num_heads=(2,),
                             num_classes=5)


def _convnext():
    return timm.create_model("convnext_tiny", depths=(1, 1, 1, 1), dims=(8, 8, 16, 16),
                             ls_init_value=0.5, num_classes=5)


def _vit():
    return timm.create_model("vit_tiny_patch16_224", img_size=16, patch_size=4, embed_dim=16,
                             depth=1, num_heads=2, reg_tokens=2, num_classes=5)


def _efficientnet():
    arch = decode_arch_def([["ds_r1_k3_s1_e1_c8"], ["ir_r1_k3_s2_e2_c8_se0.25"],
                            ["ir_r1_k5_s2_e2_c16_se0.25"]])
    return timm.models.efficientnet.EfficientNet(arch, stem_size=8, num_features=32,
                                                  pad_type="same", drop_path_rate=0.25,
                                                  num_classes=5)


def _coat():
    return timm.models.coat.CoaT(img_size=32, patch_size=4, embed_dims=(16, 16, 16, 16),
                                 serial_depths=(1, 1, 1, 1), num_heads=8, mlp_ratios=(2, 2, 2, 2),
                                 num_classes=5)


# name -> (builder, one image's shape)
MODELS = {
    "swin": (_swin, (3, 24, 24)),
    "convnext": (_convnext, (3, 32, 32)),
    "vit": (_vit, (3, 16, 16)),
    "efficientnet": (_efficientnet, (3, 18, 18)),
    "coat": (_coat, (3, 32, 32)),
}


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture
def launches(monkeypatch):
    """Counts the Triton kernel launches (`triton_exec.launch`'s LAUNCH, both of its paths)."""
    count = {"n": 0}
    for cls in (triton_exec.launch.PlainLaunch, triton_exec.launch.DirectLaunch):
        original = cls.__call__

        def counted(self, grid, args, original=original):
            count["n"] += 1
            return original(self, grid, args)
        monkeypatch.setattr(cls, "__call__", counted)
    return count


def build(name: str):
    builder, _ = MODELS[name]
    torch.manual_seed(sorted(MODELS).index(name))
    return builder().train()


def images(name: str, batch=1, seed=1):
    return torch.randn((batch, *MODELS[name][1]), generator=torch.Generator().manual_seed(seed))


def step(model, x):
    """A training step's output and loss (the output's mean square: every logit gets a grad);
    the random draws (Swin's and EfficientNet's drop path) from one seed, as eager's."""
    torch.manual_seed(2)
    out = model(x)
    loss = out.float().pow(2).mean()
    loss.backward()
    return out.detach()


def gradients(model) -> dict:
    grads = {n: p.grad for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    return grads


def assert_gradients_equal(model, expected: dict, tol: dict):
    for n, p in model.named_parameters():
        assert p.grad is not None, f"{n} got no gradient"
        torch.testing.assert_close(p.grad, expected[n], **tol, msg=lambda m: f"{n}.grad: {m}")


def eager_step(model, x):
    model.zero_grad(set_to_none=True)
    out = step(model, x)
    return out, gradients(model)


@pytest.mark.parametrize("name", MODELS)
def test_ir_jit_training_step_matches_eager(name, launches):
    model = build(name)
    x = images(name)
    expected, expected_grads = eager_step(model, x)
    jitted = ir.jit(model, executors=["triton"])
    out = step(jitted, x)
    torch.testing.assert_close(out, expected, **FP32)
    assert_gradients_equal(model, expected_grads, FP32)
    directions = {k.direction for k in triton_exec.last_kernels(jitted)}
    assert directions == {"forward", "backward"}
    assert launches["n"] >= len(triton_exec.last_kernels(jitted))


def graphs_dynamo_captures(model, x) -> int:
    torch._dynamo.reset()
    counter = CompileCounter()
    torch.compile(model, backend=counter)(x)
    torch._dynamo.reset()
    return counter.frame_count


@pytest.mark.parametrize("name", [n for n in MODELS if n != "coat"])   # CoaT: ir.jit's only
def test_torch_compile_training_step_matches_eager(name, launches):
    model = build(name)
    x = images(name)
    expected, expected_grads = eager_step(model, x)
    graphs = graphs_dynamo_captures(model, x)
    model.zero_grad(set_to_none=True)
    backend = Backend()
    out = step(torch.compile(model, backend=backend), x)
    torch.testing.assert_close(out, expected, **FP32)
    assert_gradients_equal(model, expected_grads, FP32)
    assert len(backend.graphs) == graphs
    assert backend.graphs and all(g.refused is None for g in backend.graphs)
    directions = {k.direction for k in triton_exec.last_kernels(backend)}
    assert directions == {"forward", "backward"} and launches["n"] > 0


@pytest.mark.parametrize("name", ["vit"])
def test_bf16_autocast_training_step_matches_eager(name):
    model = build(name)
    x = images(name)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected, expected_grads = eager_step(model, x)
        jitted = ir.jit(model, executors=["triton"])
        out = step(jitted, x)
    assert out.dtype == expected.dtype == torch.bfloat16
    torch.testing.assert_close(out, expected, **BF16)
    assert_gradients_equal(model, expected_grads, BF16)
    assert [k for k in triton_exec.last_kernels(jitted) if k.direction == "backward"]


def test_convnext_channels_last_matches_eager():
    model = build("convnext").to(memory_format=torch.channels_last)
    x = images("convnext").to(memory_format=torch.channels_last)
    expected, expected_grads = eager_step(model, x)
    jitted = ir.jit(model, executors=["triton"])
    out = step(jitted, x)
    torch.testing.assert_close(out, expected, **FP32)
    assert_gradients_equal(model, expected_grads, FP32)


@pytest.mark.parametrize("name", ["efficientnet", "vit", "swin"])
def test_symbolic_mode_serves_two_batch_sizes_from_one_entry(name):
    """One entry for batches 2 and 3 (EfficientNet's drop path draws `bernoulli_` of a
    per-sample shape: a shape rule, no specialization; Swin's window attention views its scores
    with `view(-1, num_win, ...)`)."""
    model = build(name)
    jitted = ir.jit(model, executors=["triton"], cache="symbolic values")
    for batch in (2, 3):
        x = images(name, batch=batch, seed=batch)
        expected, expected_grads = eager_step(model, x)
        out = step(jitted, x)
        torch.testing.assert_close(out, expected, **FP32)
        assert_gradients_equal(model, expected_grads, FP32)
    assert ir.cache_stats(jitted).misses == 1
    assert triton_exec.last_kernels(jitted)
