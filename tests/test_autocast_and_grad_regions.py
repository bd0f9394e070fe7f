"""Autocast and grad-mode regions as eager honours them: random programs with `torch.autocast`
and `no_grad`/`enable_grad`/`set_grad_enabled` blocks inside, called under an outer autocast
(cpu bf16 or fp16) or grad mode, with a random subset of inputs needing grad, give eager's
values, dtypes, requires_grad and gradients, on both executors and in both cache modes, on the
building call and on the cached entry."""
import pytest
import torch
import torch.nn.functional as F
from hypothesis import event, given, note, settings
from hypothesis import strategies as st

import ir
from programs import FLOAT_DTYPES, assert_close, layout_tensors, loosest, programs
from test_training_programs import grad_tolerance, leaf

EXECUTORS = [["triton"], ["torch"]]
MODES = ["constant values", "symbolic values"]
OPS = ("arith", "unary", "cast", "cat", "stack", "pad", "reshape", "where", "index", "div")
AUTOCAST_DTYPES = (torch.bfloat16, torch.float16)
REGION_PROGRAMS = programs(max_ops=5, op_names=OPS, regions=True, main_dtypes=FLOAT_DTYPES)


def outer_autocast(dtype):
    return torch.autocast("cpu", dtype=dtype, enabled=dtype is not None)


def run_eager(program, tensors, autocast_dtype, grad_mode, cache=True):
    """The program run by eager under the outer autocast and grad mode, with autocast's cast cache
    on (the default) or off, inside the program's regions too."""
    before = torch.is_autocast_cache_enabled()
    torch.set_autocast_cache_enabled(cache)
    try:
        with outer_autocast(autocast_dtype), torch.set_grad_enabled(grad_mode):
            return program.fn(*tensors, *program.inputs[len(tensors):])
    finally:
        torch.set_autocast_cache_enabled(before)


def reaches(e, leaves) -> bool:
    """Whether a gradient flows from eager's output e to one of the leaves. A view made under
    no_grad of a tensor that requires grad (and what is computed from it) requires grad in eager
    without any history reaching the inputs; ir.jit's does not require grad (README, "Numerical
    contract")."""
    if not e.requires_grad or not leaves:
        return False
    if any(e is leaf for leaf in leaves):
        return True
    if e.grad_fn is None:
        return False
    grads = torch.autograd.grad(e, leaves, torch.ones_like(e), allow_unused=True,
                                retain_graph=True)
    return any(g is not None for g in grads)


def check_against_eager(program, data, executors, mode, autocast_dtype=None, grad_mode=True):
    """Calls the jitted program twice (a miss, then the cached entry) and eager under the same
    outer autocast and grad mode; compares results, requires_grad and gradients."""
    note(program.describe())
    if any(op in program.source for op in ("@", "matmul(", "linear(")):
        event("a matmul")
    tensors = [a for a in program.inputs if isinstance(a, torch.Tensor)]
    floats = [k for k, t in enumerate(tensors) if t.dtype.is_floating_point]
    needing = data.draw(st.sets(st.sampled_from(floats), min_size=1) if floats else st.just(set()),
                        label="inputs that need grad")
    jfn = ir.jit(program.fn, executors=executors, cache=mode)
    # values rounded through a lower-precision matmul carry its error on
    rounding = loosest([program.rounding if isinstance(program.rounding, torch.dtype) else
                        loosest(program.rounding)] + [autocast_dtype or torch.float32] + (
        [torch.bfloat16] if "autocast" in program.source else []))
    upstream = None
    for _ in range(2):
        ours = [leaf(t, k in needing) for k, t in enumerate(tensors)]
        ref = [leaf(t, k in needing) for k, t in enumerate(tensors)]
        try:
            expected = run_eager(program, ref, autocast_dtype, grad_mode)
        except RuntimeError:
            try:    # eager's cast cache hands a nested region of another dtype the first cast
                expected = run_eager(program, ref, autocast_dtype, grad_mode, cache=False)
                event("eager's autocast cache refuses the program")
            except RuntimeError:    # fp16 meeting bf16 under autocast, as eager refuses it
                with outer_autocast(autocast_dtype), torch.set_grad_enabled(grad_mode):
                    with pytest.raises(RuntimeError):
                        jfn(*ours, *program.inputs[len(tensors):])
                event("eager refuses the program")
                return
        with outer_autocast(autocast_dtype), torch.set_grad_enabled(grad_mode):
            out = jfn(*ours, *program.inputs[len(tensors):])
        outs = out if isinstance(out, tuple) else (out,)
        exp_outs = expected if isinstance(expected, tuple) else (expected,)
        with torch.no_grad():
            assert_close(outs, exp_outs, rounding)
        wrt = sorted(needing)
        connected = [reaches(e, [ref[k] for k in wrt]) for e in exp_outs]
        for o, e, c in zip(outs, exp_outs, connected):
            if e.requires_grad and not c:   # see reaches: no gradient flows either way
                event("eager marks a value without history as requiring grad")
            else:
                assert o.requires_grad == e.requires_grad
        differentiable = [k for k, c in enumerate(connected) if c]
        if not differentiable:
            continue
        if upstream is None:
            gen = torch.Generator().manual_seed(data.draw(st.integers(0, 2**16), label="seed"))
            upstream = [data.draw(layout_tensors(exp_outs[k].shape, exp_outs[k].dtype, gen),
                                  label="upstream grad") for k in differentiable]
        want = torch.autograd.grad([exp_outs[k] for k in differentiable],
                                   [ref[k] for k in wrt], upstream, allow_unused=True)
        got = torch.autograd.grad([outs[k] for k in differentiable], [ours[k] for k in wrt],
                                  upstream, allow_unused=True)
        event("gradients compared")
        for k, g, e in zip(wrt, got, want):
            assert (g is None) == (e is None), f"input {k}: gradient {g} where eager has {e}"
            if e is not None:
                assert g.dtype == e.dtype and g.shape == e.shape
                rtol, atol = grad_tolerance(e.dtype, [rounding], e)
                torch.testing.assert_close(g, e, rtol=rtol, atol=atol, equal_nan=True,
                                           msg=lambda m: f"grad of input {k}: {m}")
    assert ir.cache_stats(jfn).hits >= 1


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("executors", EXECUTORS, ids=lambda e: e[0])
@settings(max_examples=20)
@given(program=REGION_PROGRAMS, data=st.data(), dtype=st.sampled_from(AUTOCAST_DTYPES))
def test_programs_under_autocast_match_eager(program, data, dtype, executors, mode):
    check_against_eager(program, data, executors, mode, autocast_dtype=dtype)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("executors", EXECUTORS, ids=lambda e: e[0])
@settings(max_examples=20)
@given(program=REGION_PROGRAMS, data=st.data(), grad_mode=st.booleans())
def test_programs_with_grad_mode_regions_match_eager(program, data, grad_mode, executors, mode):
    check_against_eager(program, data, executors, mode, grad_mode=grad_mode)


# ---- the forms of grad-mode regions ---------------------------------------------------------

@torch.no_grad()
def _doubled(x):
    return x * 2


def by_decorator(x):
    return x * _doubled(x)


@torch.set_grad_enabled(False)
def _sined(x):
    return x.sin()


def by_set_grad_enabled_decorator(x):
    return x * _sined(x)


def by_plain_call(x):
    torch.set_grad_enabled(False)
    y = x.sin()
    torch.set_grad_enabled(True)
    return x * y


def by_inference_mode(x):
    with torch.inference_mode():
        y = x.exp()
    return y, x * 3


def enabled_inside(x):
    with torch.enable_grad():
        y = x.sin() * 2
    return y, x * 2


def matmul_outside_no_grad(x, w):
    with torch.no_grad():
        h = x @ w
    return torch.sigmoid(h) * x[..., :4]


def same_op_in_two_modes(x):
    with torch.no_grad():
        a = x * 2
    return a * (x * 2)      # not one value with `a`: one needs grad, the other does not


FORMS = [by_decorator, by_set_grad_enabled_decorator, by_plain_call, same_op_in_two_modes, by_inference_mode, enabled_inside, matmul_outside_no_grad]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("executors", EXECUTORS, ids=lambda e: e[0])
@settings(max_examples=8)
@given(fn=st.sampled_from(FORMS), outer=st.booleans(), seed=st.integers(0, 2**16))
def test_each_form_of_grad_mode_region_matches_eager(fn, outer, seed, executors, mode):
    gen = torch.Generator().manual_seed(seed)
    x, w = torch.randn(3, 8, generator=gen), torch.randn(8, 4, generator=gen)
    args = [x.requires_grad_(), w.requires_grad_()][:fn.__code__.co_argcount]
    jfn = ir.jit(fn, executors=executors, cache=mode)
    for _ in range(2):
        mine = [a.detach().requires_grad_() for a in args]
        theirs = [a.detach().requires_grad_() for a in args]
        with torch.set_grad_enabled(outer):
            got, want = jfn(*mine), fn(*theirs)
        assert torch.is_grad_enabled()      # every form leaves the mode as it found it
        got, want = (got if isinstance(got, tuple) else (got,)), (
            want if isinstance(want, tuple) else (want,))
        assert [o.requires_grad for o in got] == [o.requires_grad for o in want]
        torch.testing.assert_close(got, want)
        used = [k for k, o in enumerate(want) if o.requires_grad]
        if used:
            g = torch.autograd.grad([got[k].sum() for k in used], mine, allow_unused=True)
            e = torch.autograd.grad([want[k].sum() for k in used], theirs, allow_unused=True)
            torch.testing.assert_close(g, e)


# ---- the examples, the cache key and the prologue -----------------------------------

@pytest.mark.parametrize("executors", EXECUTORS, ids=lambda e: e[0])
def test_matmul_under_autocast_is_typed_and_computed_as_eager(executors):
    def f(x, w):
        return torch.sigmoid((x @ w) * 2 + 1)

    jfn = ir.jit(f, executors=executors)
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(4, 8, generator=gen), torch.randn(8, 4, generator=gen)
    for dtype in AUTOCAST_DTYPES:
        mine, theirs = w.clone().requires_grad_(), w.clone().requires_grad_()
        with torch.autocast("cpu", dtype=dtype):
            got, want = jfn(x, mine), f(x, theirs)
        assert got.dtype == want.dtype == dtype
        assert "convert_element_type(x, dtype=" in str(ir.last_traces(jfn)[0])
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        got.sum().backward()
        want.sum().backward()
        assert mine.grad.dtype == torch.float32     # eager rounds each backward op to dtype
        rtol, atol = grad_tolerance(torch.float32, [dtype], theirs.grad)
        torch.testing.assert_close(mine.grad, theirs.grad, rtol=rtol, atol=atol)
    out = jfn(x, w)     # outside autocast: another entry, in fp32
    assert out.dtype == torch.float32 and ir.cache_stats(jfn).misses == 3
    torch.testing.assert_close(out, f(x, w))


def test_the_autocast_state_is_in_the_key_and_the_prologue(caplog):
    jfn = ir.jit(lambda x: torch.cat((x @ x.mT, x), -1))
    x = torch.randn(4, 4)
    jfn(x)      # autocast off: one query in the key and the prologue, whatever its dtypes
    assert "if torch._C._is_any_autocast_enabled(): return False" in str(ir.last_prologue(jfn))
    with torch.autocast("cpu", dtype=torch.bfloat16), caplog.at_level("INFO", "ir.recompiles"):
        jfn(x)
        assert "autocast state changed off -> cpu bfloat16" in caplog.text
        prologue = str(ir.last_prologue(jfn))
        assert "torch.is_autocast_enabled('cpu')" in prologue
        assert "(True, torch.bfloat16, False" in prologue
        with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False):
            jfn(x)      # the cast cache flag is part of the state
    jfn(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        jfn(x)
    assert (ir.cache_stats(jfn).misses, ir.cache_stats(jfn).hits) == (3, 2)


def test_autocast_disabled_inside_and_promote_ops():
    def f(x, y):
        with torch.autocast("cpu", enabled=False):
            full = x @ y.mT
        low = F.linear(x, y)
        return torch.cat((full, low), -1), torch.stack((low, full))

    x, y = torch.randn(3, 5), torch.randn(3, 5)
    for executors in EXECUTORS:
        jfn = ir.jit(f, executors=executors)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got, want = jfn(x, y), f(x, y)
        for g, e in zip(got, want):
            assert g.dtype == e.dtype == torch.float32
            torch.testing.assert_close(g, e, rtol=0, atol=0)


def test_fp16_and_bf16_under_a_promote_op_raise_as_eager():
    def f(a, b):
        return torch.cat((a, b))

    a, b = torch.randn(2, dtype=torch.float16), torch.randn(2, dtype=torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with pytest.raises(RuntimeError):
            f(a, b)
        with pytest.raises(RuntimeError):
            ir.jit(f)(a, b)


@pytest.mark.parametrize("name, args, dtypes", [
    ("exp", ("x16",), [torch.float32]),                      # fp32 on CUDA, not listed on CPU
    ("__pow__", ("x16", 2), [torch.float32, 2]),
    ("matmul", ("xb", "w"), [torch.float16, torch.float16]),  # lower precision
    ("softmax", ("xb", -1), [torch.float32, -1]),            # fp32_set_opt_dtype
    ("sum", ("xb",), [torch.float32]),
    ("index_put", ("x16", (), "w"), [torch.float32, (), torch.float32]),  # promote
    ("cat", (["x16", "w"],), [[torch.float16, torch.float32]]),           # not listed on CUDA
    ("add", ("xb", "w"), [torch.bfloat16, torch.float32]),
])
def test_cuda_policies_cast_as_eagers_lists(name, args, dtypes):
    """CUDA's lists at trace level (no GPU needed: proxies only carry the device)."""
    from ir.autocast import cast_arguments
    from ir.proxies import TensorProxy
    from ir.tracing import TraceContext, tracing
    cuda = torch.device("cuda")
    proxies = {"x16": TensorProxy("x16", (4, 8), torch.float16, cuda),
               "xb": TensorProxy("xb", (4, 8), torch.bfloat16, cuda),
               "w": TensorProxy("w", (8, 4), torch.float32, cuda)}

    def typed(a):
        if isinstance(a, (list, tuple)):
            return type(a)(typed(b) for b in a)
        return a.dtype if isinstance(a, TensorProxy) else a

    args = tuple([proxies[b] for b in a] if isinstance(a, list) else proxies.get(a, a)
                 if isinstance(a, str) else a for a in args)
    with torch.autocast("cuda", dtype=torch.float16, enabled=False):    # restores the state
        torch.set_autocast_enabled("cuda", True)
        with tracing(TraceContext(symbolic=False)):
            cast, _ = cast_arguments(name, args, {})
    assert [typed(a) for a in cast] == dtypes
