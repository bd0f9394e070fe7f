"""`torch.compile(..., backend="triton_exec")` on graphs with autocast and grad-mode blocks and with
ops `ir.jit` refuses (`ir.dynamo_split`): the blocks are jitted with the rest of the graph; a
refused op splits the graph into pieces, the refused ops run on PyTorch and the rest on our
Triton kernels, never the whole graph on PyTorch. Values, dtypes, requires_grad and gradients
equal eager's; Dynamo captures as many graphs as for any backend; `ir.explain` on the compiled
function shows each piece, what ran on PyTorch and why."""
import logging
import warnings

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F
from hypothesis import given, note, settings
from hypothesis import strategies as st
from torch._dynamo.testing import CompileCounter

import ir
import triton_exec
from ir.dynamo import Backend, CompiledGraph

N = 8
# Dynamo puts `.item()` and `nonzero` into the graph only with these set (else it breaks the
# graph before them): the ops then reach the backend, which refuses them
DATA_DEPENDENT_CAPTURE = dict(capture_scalar_outputs=True, capture_dynamic_output_shape_ops=True)

FUSIBLE = ["h = torch.sin(h) * 2 + x * 0.5", "h = torch.tanh(h) * x", "h = F.silu(h) * 0.5",
           "h = (h.mT + x) * 0.5", "h = torch.where(h > 0, h, x * 0.25)"]
# (lines, whether an op of it is refused): autocast and grad-mode blocks, and refused ops
BLOCKS = [
    (["with torch.autocast('cpu', dtype=torch.bfloat16):", "    h = (h @ w) / 8",
      "    h = h * 2 + 1"], False),
    (["with torch.no_grad():", "    h = h * x + 1"], False),
    (["with torch.no_grad():", "    g = h * 2", "    with torch.enable_grad():",
      "        h = g + x.sin()"], False),
    (["with torch.set_grad_enabled(False):", "    h = torch.cos(h) + 1"], False),
    (["h = (h * 1).unsqueeze_(0).squeeze_(0) + 1"], True),     # in-place shape change
    (["h = (h + 0).t_() * 0.5"], True),
    (["h = h * (h.abs().sum().item() / 256)"], True),     # data-dependent: .item()
    (["h = h + (h > 0).nonzero().sum() / 512"], True),   # data-dependent size: nonzero
    (["with torch.autocast('cpu', dtype=torch.bfloat16):", "    h = (h @ w) / 8",
      "    h = (h * 1).unsqueeze_(0).squeeze_(0) * 2"], True),     # refused inside autocast
    (["with torch.no_grad():", "    h = (h * 3).t_() - 1"], True),      # refused in no_grad
]


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def compile_program(lines: list[str]):
    source = "\n".join(["def program(x, w):", "    h = x", *("    " + ln for ln in lines),
                        "    return torch.sin(h) * 0.5 + x"]) + "\n"
    namespace = {"torch": torch, "F": F}
    exec(compile(source, "<program>", "exec"), namespace)
    return source, namespace["program"]


@st.composite
def split_programs(draw):
    """Source lines of a program mixing fusible ops, autocast and grad-mode blocks and refused
    ops, and whether it holds a refused op."""
    steps = draw(st.lists(st.one_of(st.sampled_from(FUSIBLE).map(lambda ln: ([ln], False)),
                                    st.sampled_from(BLOCKS)), min_size=1, max_size=5))
    return [ln for lines, _ in steps for ln in lines], any(refused for _, refused in steps)


def inputs(seed: int):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(N, N, generator=generator).requires_grad_() for _ in range(2)]


def run(fn, x, w):
    """fn's result and the gradients of x and w (None where no gradient flows)."""
    x, w = (t.detach().requires_grad_() for t in (x, w))
    out = fn(x, w)
    if out.requires_grad:
        out.sum().backward()
    return out, x.grad, w.grad


def assert_same(got, expected, tol):
    assert (got is None) == (expected is None)
    if expected is not None:
        assert got.dtype == expected.dtype and got.requires_grad == expected.requires_grad
        torch.testing.assert_close(got, expected, **tol)


def split_graphs(backend: Backend) -> list[CompiledGraph]:
    return [g for g in backend.graphs if g.split is not None]


@settings(max_examples=20)
@given(program=split_programs(), seed=st.integers(0, 2**16), dynamic=st.booleans())
def test_programs_with_blocks_and_refused_ops_split_instead_of_running_on_pytorch(
        program, seed, dynamic):
    lines, refused = program
    source, fn = compile_program(lines)
    note(source)
    x, w = inputs(seed)
    tol = (dict(rtol=2e-2, atol=4e-2) if "autocast" in source else dict(rtol=1e-4, atol=1e-4))
    with torch._dynamo.config.patch(**DATA_DEPENDENT_CAPTURE):
        expected = run(fn, x, w)
        counter = CompileCounter()
        torch.compile(fn, backend=counter, dynamic=dynamic)(x, w)
        torch._dynamo.reset()
        backend = Backend()
        compiled = torch.compile(fn, backend=backend, dynamic=dynamic)
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message="ir.dynamo: graph .* runs on PyTorch")
            for _ in range(2):      # compiled, then from the cache
                got = run(compiled, x, w)
                for g, e in zip(got, expected):
                    assert_same(g, e, tol)
    assert len(backend.graphs) == counter.frame_count
    assert all(g.refused is None for g in backend.graphs)
    assert bool(split_graphs(backend)) == refused
    assert [k for k in triton_exec.last_kernels(backend) if k.direction == "forward"]
    assert ("runs on PyTorch (ops ir.jit refuses)" in str(ir.explain(compiled))) == refused


@pytest.mark.parametrize("block", ["enable_grad", "autocast", "no_grad"])
def test_autocast_and_grad_mode_blocks_are_jitted_with_the_graph(block):
    """Dynamo records these blocks as calls in the graph; the tracer honours them: one graph,
    not split, fused, with eager's dtypes and requires_grad."""
    def fn(x):
        with {"enable_grad": torch.enable_grad, "no_grad": torch.no_grad,
              "autocast": lambda: torch.autocast("cpu", dtype=torch.bfloat16)}[block]():
            y = (x @ x.mT) * 2
        return y.sin() + 1

    x = torch.randn(4, 8, requires_grad=True)
    backend = Backend()
    with torch.no_grad() if block == "enable_grad" else torch.enable_grad():
        got = torch.compile(fn, backend=backend)(x)
        expected = fn(x)
    assert got.dtype == expected.dtype and got.requires_grad == expected.requires_grad
    torch.testing.assert_close(got, expected)
    (graph,) = backend.graphs
    assert graph.split is None and graph.refused is None
    assert triton_exec.last_kernels(backend)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("input_dtype", ["float32", "low"])
def test_a_compiled_call_under_an_ambient_autocast_is_eagers(dtype, input_dtype):
    """Autocast entered around the compiled call (Dynamo leaves it out of the graph): the graph's
    ops get eager's casts from the ambient state; a RoPE with a matmul, values bit-equal,
    dtypes and gradients eager's."""
    def fn(x, cos, sin, w):
        x1, x2 = x[..., :8], x[..., 8:]
        return (x * cos + torch.cat((-x2, x1), -1) * sin) @ w

    g = torch.Generator().manual_seed(0)
    args = [torch.randn(*s, generator=g) for s in ((2, 4, 16), (4, 16), (4, 16), (16, 16))]
    if input_dtype == "low":
        args = [a.to(dtype) for a in args]
    got_args = [a.clone().requires_grad_() for a in args]
    expected_args = [a.clone().requires_grad_() for a in args]
    backend = Backend()
    with torch.autocast("cpu", dtype=dtype):
        got = torch.compile(fn, backend=backend)(*got_args)
        expected = fn(*expected_args)
    assert got.dtype == expected.dtype
    assert torch.equal(got, expected)
    got.float().sum().backward()
    expected.float().sum().backward()
    for a, b in zip(got_args, expected_args):
        assert a.grad.dtype == b.grad.dtype
        torch.testing.assert_close(a.grad, b.grad)
    assert triton_exec.last_kernels(backend)


def test_a_complex_argument_splits_off_the_ops_reading_it():
    """ir.jit refuses complex arguments: the ops reading one run on PyTorch, the rest fuses."""
    def fn(z, x):
        return torch.view_as_real(z * 2).sum(-1) + x.sin() * 2

    z = torch.randn(4, 8, dtype=torch.complex64)
    x = torch.randn(4, 8)
    backend = Backend()
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="ir.dynamo")
        got = torch.compile(fn, backend=backend)(z, x)
    torch.testing.assert_close(got, fn(z, x))
    (graph,) = split_graphs(backend)
    assert "complex64" in graph.explanation() and triton_exec.last_kernels(backend)


def test_the_split_is_logged_on_ir_fallbacks_and_explained_per_piece(caplog):
    def fn(x):
        y = torch.sin(x) * 2
        y.unsqueeze_(0)
        return torch.tanh(y) + 1

    x = torch.randn(4, 8)
    compiled = torch.compile(fn, backend=Backend())
    with caplog.at_level(logging.INFO, logger="ir.fallbacks"):
        torch.testing.assert_close(compiled(x), fn(x.clone()))
    assert "unsqueeze_ = y.unsqueeze_(0) runs on PyTorch: NotImplementedError" in caplog.text
    text = str(ir.explain(compiled))
    assert "split into 3 pieces" in text and text.count("Fusion groups (1)") == 2
    assert "the in-place tensor method unsqueeze_ changes the tensor's shape" in text
    assert "Guards of the entry" in text
