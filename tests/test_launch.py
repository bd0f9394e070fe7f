"""The lean launch path: one plain Triton launch per specialization, then direct launches of the
compiled kernel; its specialization key is at least as fine as Triton's own."""
import torch
from hypothesis import given, settings, strategies as st
from triton import knobs
from triton._C.libtriton import native_specialize_impl
from triton.backends.compiler import BaseBackend

import ir
from triton_exec import launch
from triton_exec.codegen import KERNEL_OPTIONS


class FakeCompiled:
    """Records direct launches, with the launcher interface of Triton's CompiledKernel."""

    function, packed_metadata = "function-handle", "packed-metadata"

    def __init__(self, log):
        self.log = log

    def run(self, *args):
        self.log.append(("direct", args))

    def launch_metadata(self, grid, stream, *args):
        return "meta"


class FakeKernel:
    """Records plain launches `kernel[grid](*args, num_warps=...)` and returns a compiled kernel;
    every launch passes the generated kernels' compile options."""

    def __init__(self, compiled_type=FakeCompiled):
        self.log, self.compiled_type = [], compiled_type

    def __getitem__(self, grid):
        def run(*args, num_warps, **options):
            assert options == KERNEL_OPTIONS == {"enable_fp_fusion": False}
            self.log.append(("plain", grid, args, num_warps))
            return self.compiled_type(self.log)
        return run


def _triton_spec(value):
    return native_specialize_impl(BaseBackend, value, False, True, True)


def test_direct_launch_reuses_the_compiled_kernel_per_specialization():
    kernel = FakeKernel()
    direct = launch.DirectLaunch(kernel, num_warps=4, pointers=[0], ints=[1], stream=lambda: 7)
    buf = torch.zeros(64)
    args = (buf, 32, 16, 64)                 # pointer, int, then the ROWS and COLS constexprs
    direct((3,), args)
    direct((3,), args)
    direct((5,), (buf, 48, 16, 64))          # still 16-divisible and not 1: same kernel
    assert kernel.log[0] == ("plain", (3,), args, 4)
    # no launch hook is listening: no launch metadata, no hooks
    assert kernel.log[1] == ("direct", (3, 1, 1, 7, "function-handle", "packed-metadata", None,
                                        None, None) + args)
    assert kernel.log[2][0] == "direct" and kernel.log[2][1][0] == 5
    direct((3,), (buf[1:], 32, 16, 64))      # not 16-byte aligned: Triton specializes anew
    direct((3,), (buf, 1, 16, 64))           # 1 becomes a constant in Triton's specialization
    direct((3,), (buf, 33, 16, 64))          # not divisible by 16
    direct((3,), (buf, 1, 16, 64))
    assert [entry[0] for entry in kernel.log[3:]] == ["plain", "plain", "plain", "direct"]
    assert len(direct.compiled) == 4


def test_direct_launches_pass_the_launch_hooks_when_a_profiler_listens():
    kernel = FakeKernel()
    direct = launch.DirectLaunch(kernel, num_warps=4, pointers=[], ints=[0], stream=lambda: 7)
    heard = []
    knobs.runtime.launch_enter_hook.add(heard.append)
    try:
        direct((2,), (32,))
        direct((2,), (32,))
    finally:
        knobs.runtime.launch_enter_hook.remove(heard.append)
    assert kernel.log[1] == ("direct", (2, 1, 1, 7, "function-handle", "packed-metadata", "meta",
                                        knobs.runtime.launch_enter_hook,
                                        knobs.runtime.launch_exit_hook, 32))


def test_a_kernel_without_the_launcher_interface_keeps_the_plain_path():
    kernel = FakeKernel(compiled_type=lambda log: None)    # what the interpreter returns
    direct = launch.DirectLaunch(kernel, num_warps=1, pointers=[], ints=[0], stream=lambda: 0)
    for _ in range(3):
        direct((1,), (8,))
    assert [entry[0] for entry in kernel.log] == ["plain"] * 3
    assert direct.plain and not direct.compiled


@settings(max_examples=300, deadline=None)
@given(st.integers(-2 ** 63, 2 ** 64 - 1), st.integers(-2 ** 63, 2 ** 64 - 1))   # what Triton takes
def test_int_key_is_at_least_as_fine_as_triton_specialization(a, b):
    key = launch.specialization_key(pointers=[], ints=[0])
    if key((a,)) == key((b,)):
        assert _triton_spec(a) == _triton_spec(b)


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 40), st.integers(0, 40),
       st.sampled_from([torch.float32, torch.bfloat16, torch.int8]))
def test_pointer_key_is_at_least_as_fine_as_triton_specialization(i, j, dtype):
    buf = torch.zeros(64, dtype=dtype)
    direct = launch.DirectLaunch(FakeKernel(), 1, pointers=[0], ints=[], stream=lambda: 0)
    if direct.key((buf[i:],)) == direct.key((buf[j:],)):
        assert _triton_spec(buf[i:]) == _triton_spec(buf[j:])


def test_noop_launches_take_the_direct_path(tmp_path):
    def f(x):
        return torch.nn.functional.pad(x, (4, 4)) * 2

    jf = ir.jit(f, executors=["triton"], cache="symbolic values")
    with launch.noop_launches():
        jf(torch.randn(3, 8))
    launcher = ir.last_traces(jf)[-1]
    jf(torch.randn(5, 16))          # the same entry, other sizes: a direct launch of the no-op
    jf(torch.randn(5, 16))
    assert ir.cache_stats(jf).misses == 1 and ir.cache_stats(jf).hits == 2
    fusion_calls = [e for e in launcher.eqns if "fusion" in e.prim.name]
    launch_object = fusion_calls[0].params["launcher"].__globals__["LAUNCH"]
    assert isinstance(launch_object, launch.DirectLaunch)
    assert len(launch_object.compiled) >= 1


def test_the_launcher_grid_is_one_program_per_tile():
    import random
    import re
    import torch.nn.functional as F
    from triton_exec import index
    jf = ir.jit(lambda x: F.pad(x, (1, 1)) * 2, executors=["triton"], cache="symbolic values")
    jf(torch.randn(40, 15))
    (record,) = __import__("triton_exec").last_kernels(jf)
    grid = re.search(r"LAUNCH\(\((.*),\), \(", record.launcher_source).group(1)
    rows, cols, config = record.lowered.rows, record.lowered.cols, record.config
    names = set(re.findall(r"[a-z_]\w*", grid))
    for _ in range(200):        # whatever sizes the entry sees
        values = {name: random.randint(1, 5000) for name in names}
        extent = lambda e: index.evaluate(e, lambda leaf: values[leaf.source.name])  # noqa: E731
        tiles = (-(-extent(rows) // config.rows)) * (-(-extent(cols) // config.cols))
        assert eval(grid, {}, values) == tiles, grid
