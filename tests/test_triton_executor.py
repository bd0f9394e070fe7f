"""The Triton executor on chosen programs (Triton's interpreter on CPU tensors): the seed's RoPE
as one kernel, the fused-qkv variant, fusions around an unsupported op, layouts and dtypes."""
import pytest
import torch
import torch.nn.functional as F

import ir
import triton_exec
from programs import assert_close
from ir.examples import rope, rope_inputs, rope_qkv

MODES = ["constant values", "symbolic values"]


def fusion_calls(jfn):
    return [line for line in str(ir.last_traces(jfn)[-1]).splitlines()
            if f"{jfn.name}_fusion_" in line and not line.lstrip().startswith("#")]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rope_is_one_kernel_and_matches_eager(mode, dtype):
    args = rope_inputs(dtype=dtype)
    jfn = ir.jit(rope, executors=[triton_exec.executor], cache=mode)
    out = jfn(*args)
    expected = rope(*args)
    if dtype == torch.bfloat16:
        torch.testing.assert_close(out, expected, rtol=1e-2, atol=1e-2)
    else:
        assert_close(out, expected)
    assert len(triton_exec.last_kernels(jfn)) == 1
    assert len(fusion_calls(jfn)) == 1
    code = [line for line in str(ir.last_traces(jfn)[-1]).splitlines()
            if not line.strip().startswith("#")]
    assert not any("torch." in line for line in code)     # nothing left to torch


@pytest.mark.parametrize("mode", MODES)
def test_rope_on_fused_qkv_matches_eager(mode):
    g = torch.Generator().manual_seed(1)
    n_head, n_groups, hs, n = 4, 2, 32, 8
    qkv = torch.randn(2, 8, hs * (n_head + 2 * n_groups), generator=g)
    cos, sin = torch.randn(8, n, generator=g), torch.randn(8, n, generator=g)
    jfn = ir.jit(rope_qkv, executors=["triton"], cache=mode)
    for actual, expected in zip(jfn(qkv, cos, sin, n_head, n_groups, hs, n),
                                rope_qkv(qkv, cos, sin, n_head, n_groups, hs, n)):
        assert_close(actual, expected)
    assert 1 <= len(triton_exec.last_kernels(jfn)) <= 2


def test_sibling_outputs_of_one_shape_share_a_kernel():
    def f(x, y):
        return x * 2, y + 1

    x, y = torch.randn(4, 8), torch.randn(4, 8)
    jfn = ir.jit(f, executors=["triton"])
    for actual, expected in zip(jfn(x, y), f(x, y)):
        assert_close(actual, expected)
    (record,) = triton_exec.last_kernels(jfn)
    assert [a.kind for a in record.lowered.accesses].count("store") == 2


@pytest.mark.parametrize("mode", MODES)
def test_unsupported_op_in_the_middle_splits_into_two_kernels(mode):
    def f(x, w):
        h = F.pad(x * 2 + 1, (0, 3))
        y = h @ w
        return torch.cat((y.relu(), y[:, :4]), dim=-1) * 0.5

    g = torch.Generator().manual_seed(2)
    x, w = torch.randn(8, 13, generator=g), torch.randn(16, 8, generator=g)
    jfn = ir.jit(f, executors=["triton"], cache=mode)
    torch.testing.assert_close(jfn(x, w), f(x, w), rtol=1e-4, atol=1e-4)
    assert len(triton_exec.last_kernels(jfn)) == 2
    source = str(ir.last_traces(jfn)[-1])
    assert source.index(f"{jfn.name}_fusion_0(") < source.index("matmul") < source.index(
        f"{jfn.name}_fusion_1(")


@pytest.mark.parametrize("mode", MODES)
def test_broadcast_strided_and_offset_inputs(mode):
    base = torch.randn(3, 40, 10)
    x = base[:, 2:34, 1:9].transpose(1, 2)         # [3, 8, 32], non-contiguous, offset
    b = torch.randn(32)
    jfn = ir.jit(lambda x, b: F.pad(x + b, (1, 2, 0, 0, 1, 0)), executors=["triton"], cache=mode)
    assert_close(jfn(x, b), F.pad(x + b, (1, 2, 0, 0, 1, 0)))
    assert triton_exec.last_kernels(jfn)


@pytest.mark.parametrize("dtype", [torch.int32, torch.bool, torch.float16])
def test_integer_bool_and_half_tensors(dtype):
    def f(x, y):
        return torch.where(x > y, x, y)[..., 1:], torch.cat((x, y), dim=0)

    g = torch.Generator().manual_seed(3)
    x = (torch.randn(4, 6, generator=g) * 4).to(dtype)
    y = (torch.randn(4, 6, generator=g) * 4).to(dtype)
    jfn = ir.jit(f, executors=["triton"])
    for actual, expected in zip(jfn(x, y), f(x, y)):
        assert_close(actual, expected)
    assert triton_exec.last_kernels(jfn)


def test_size_zero_output_launches_nothing():
    jfn = ir.jit(lambda x: F.pad(x, (1, 1)) * 2, executors=["triton"])
    x = torch.randn(0, 5)
    out = jfn(x)
    assert out.shape == (0, 7)
    record = triton_exec.last_kernels(jfn)[0]
    assert "KERNEL[" not in record.launcher_source


def test_kernel_is_built_once_per_specialization():
    jfn = ir.jit(rope, executors=["triton"], cache="symbolic values")
    jfn(*rope_inputs(B=2))
    first = triton_exec.last_kernels(jfn)[0]
    jfn(*rope_inputs(B=3))
    assert triton_exec.last_kernels(jfn)[0] is first
    assert ir.cache_stats(jfn).misses == 1 and ir.cache_stats(jfn).hits == 1


def test_indices_and_offsets_are_32_bit_below_2_to_the_31_elements():
    jfn = ir.jit(lambda x: x.t() * 2, executors=["triton"], cache="symbolic values")
    x = torch.randn(4, 8)
    assert_close(jfn(x), x.t() * 2)
    source = triton_exec.last_kernels(jfn)[0].source
    assert "rows = (pid // col_blocks) * ROWS" in source        # int32 logical indices
    assert "tl.int64" not in source and " * x_stride" in source  # int32 offsets into x
    prologue = str(ir.last_prologue(jfn))
    assert "i0 * i1 < 2147483648" in prologue
    assert "zip(x.shape, x_strides)) < 2147483648" in prologue   # x's span


def test_indices_are_64_bit_from_2_to_the_31_elements(monkeypatch):
    # 2**31 elements do not fit a CPU test through the interpreter: lower the limit instead
    from triton_exec.codegen import kernel_types
    monkeypatch.setattr(kernel_types, "INT32_LIMIT", 64)
    f = lambda x: F.pad(x, (1, 1)) * 2     # noqa: E731
    jfn = ir.jit(f, executors=["triton"], cache="symbolic values")
    small, large = torch.randn(3, 8), torch.randn(9, 30)
    assert_close(jfn(small), f(small))
    assert "rows = (pid // col_blocks) * ROWS" in triton_exec.last_kernels(jfn)[0].source
    assert_close(jfn(large), f(large))                    # breaks the guard: a wide entry
    assert ir.cache_stats(jfn).misses == 2
    assert "rows = (pid // col_blocks).to(tl.int64)" in triton_exec.last_kernels(jfn)[0].source


def test_kernel_record_fields():
    jfn = ir.jit(rope, executors=["triton"])
    jfn(*rope_inputs())
    (record,) = triton_exec.last_kernels(jfn)
    assert record.name.endswith("_kernel") and "@triton.jit" in record.source
    assert record.min_vector_width >= 1 and record.vector_width
    assert ".version" in record.ptx(arch=90)


def test_cpu_tensors_go_to_torch_without_the_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    jfn = ir.jit(lambda x: x * 2, executors=["triton"])
    x = torch.randn(4)
    assert_close(jfn(x), x * 2)
    assert triton_exec.last_kernels(jfn) == []


def test_values_that_need_grad_fuse_with_a_fused_backward():
    def f(x, y):
        return F.pad(x, (1, 1)) * 2 + y

    jf = ir.jit(f, executors=["triton"])
    x, y = torch.randn(3, 4, requires_grad=True), torch.randn(3, 6)
    out = jf(x, y)
    assert [k.direction for k in triton_exec.last_kernels(jf)] == ["forward", "backward"]
    out.sum().backward()
    x_ref = x.detach().requires_grad_()
    f(x_ref, y).sum().backward()
    assert_close(x.grad, x_ref.grad)
    jf(x.detach(), y)           # the same values without grad: a new entry, forward only
    assert [k.direction for k in triton_exec.last_kernels(jf)] == ["forward"]


def test_a_size_guarded_to_one_after_it_was_made_broadcasts():
    # found by hypothesis: the cat's size 1 + (n1 - n0) is only known to be 1 when the add
    # broadcasts it, after the cat was traced
    def f(x0, x1, n0, n1):
        return x0 + torch.cat((x1, x1[n0:n1]), dim=0)

    jf = ir.jit(f, executors=["triton"], cache="symbolic values")
    x0, x1 = torch.randn(2, 1), torch.randn(1, 1)
    assert_close(jf(x0, x1, 1, 1), f(x0, x1, 1, 1))
    assert len(triton_exec.last_kernels(jf)) == 1


def test_runtime_pad_widths_of_a_constant_shape_keep_the_dims_apart():
    # found by hypothesis: the pad's output is [1, 1] (its size guarded equal to x's by the add),
    # and deciding whether its dims merge compared the runtime pad widths
    def f(x, lo: int, hi: int):
        return x + F.pad(x, (lo, hi), value=0.5)

    jf = ir.jit(f, executors=["triton"], cache="symbolic values")
    x = torch.randn(1, 1)
    assert_close(jf(x, 0, 0), f(x, 0, 0))


@pytest.mark.parametrize("mode", ["constant values", "symbolic values"])
def test_a_0_d_result_keeps_its_shape(mode):
    def f(x, y):
        return x[1] * 2 + y

    jf = ir.jit(f, executors=["triton"], cache=mode)
    x, y = torch.randn(3), torch.tensor(1.5)
    out = jf(x, y)
    assert out.shape == () and len(triton_exec.last_kernels(jf)) == 1
    assert_close(out, f(x, y))
