"""Kernel index math as typed nodes (`triton_exec.index`): folding, dependencies, widths, bounds
and masks without Triton; and the kernels they fixed: per-tile scalars and constant mask pieces
(issue 11 item 2), names taken from the program (item 3), int64 offsets and multiplied-back
strides (issue 11 item 4, issue 17 item 4)."""
import keyword
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from hypothesis import given, settings, strategies as st

import ir
import triton_exec
from programs import assert_close
from triton_exec import index
from triton_exec.index import Const, Leaf, TILE

ROWS = Leaf("rows", frozenset({"pid", "row_arange"}), 32, 1, 0, 128)
COLS = Leaf("cols", frozenset({"pid", "col_arange"}), 32, 1, 0, 32)
N = Leaf("n", frozenset({"n"}), 32, 8)


def test_constants_fold_and_shifts_cancel():
    assert index.add(2, 3) == Const(5)
    assert index.add(index.add(COLS, 4), -4) == COLS
    assert index.add(COLS, N) - N == COLS
    assert index.mul(index.add(COLS, 1), 0) == Const(0)
    assert index.mod(COLS, 1) == Const(0) and index.floordiv(COLS, 1) == COLS
    assert index.mod(index.mod(ROWS, 16), 16) == index.mod(ROWS, 16)     # bounds: < 16 already


def test_nodes_know_their_dependencies_width_divisor_and_bounds():
    e = index.add(index.mul(COLS, 4), N)
    assert e.tiled and "col_arange" in e.deps and "n" in e.deps and "row_arange" not in e.deps
    assert index.mul(N, 2).host_known and not index.mul(N, 2).tiled
    assert e.divisor == 4 and index.mul(N, 2).divisor == 16
    assert (COLS.lo, COLS.hi) == (0, 32) and (index.add(COLS, -4).lo, index.add(COLS, -4).hi) == (-4, 28)
    assert index.mod(ROWS, 16).hi == 16 and index.floordiv(ROWS, 16).hi == 8
    assert index.coefficient(index.add(COLS, N), COLS) == 1
    assert index.coefficient(index.mul(COLS, 2), COLS) == 2


def test_a_product_whose_bound_passes_2_31_is_int64():
    wide_cols = Leaf("cols", frozenset({"col_arange"}), 32, 1, 0, 2049)
    step = index.mul(wide_cols, 2 ** 20)
    assert step.bits == 64
    assert index.mul(COLS, 4).bits == 32        # small bounds stay int32


def test_masks_drop_pieces_the_bounds_decide():
    assert index.at_least(COLS, 0) == index.TRUE
    assert index.less(COLS, 32) == index.TRUE           # every lane of the domain has cols < 32
    assert index.less(Const(0), Const(1)) == index.TRUE
    assert index.at_least(Const(0), Const(1)).false      # `0 >= 1`: the piece is dead
    assert (index.less(COLS, 8) & index.FALSE).false
    m = index.less(COLS, 8) & index.at_least(COLS, 4) & index.less(COLS, 8)
    assert len(m.atoms) == 2


def test_the_renderer_binds_offset_products_once_and_hoists_host_values():
    lines, hoisted = [], {}
    counter = iter(range(1, 100))
    r = index.Renderer(lines, lambda p: f"{p}{next(counter)}",
                       lambda e: hoisted.setdefault(e, f"h{len(hoisted) + 1}"))
    stride = Leaf("x_stride0", frozenset({"x_stride0"}), 64)
    o = index.mul(index.widen(ROWS), stride)
    assert r.expr(index.add(o, COLS), top=True) == r.expr(index.add(o, COLS), top=True)
    assert sum("x_stride0" in line for line in lines) == 1      # one offset product
    assert r.expr(index.add(N, N, 1), top=True) == "h1"         # 2 * n + 1: the launcher's
    assert index.evaluate(index.add(N, N, 1), lambda leaf: 8) == 17
    assert index.render_host(index.add(N, N, 1), lambda leaf: "n", top=True) == "n * 2 + 1"
    in_domain = index.Mask((index.Less(ROWS, Const(128)), index.Less(COLS, Const(32))))
    r.bind(in_domain, "in_domain")
    assert r.mask(in_domain & index.less(COLS, 8)) == "in_domain & (cols < 8)"


def run(fn, *args, mode):
    jfn = ir.jit(fn, executors=["triton"], cache=mode)
    assert_close(jfn(*args), fn(*args))
    for record in triton_exec.last_kernels(jfn):
        record.access_widths()          # compiles offline for sm_90
    return jfn


def cat_times_its_first_column(b):
    c = torch.cat((-b, b), 1)
    return c * c[:, :1]


def last_row_expanded(b):
    return b[-1:].reshape(1, -1).expand(3, -1) * 2


@pytest.mark.parametrize("mode", ["constant values", "symbolic values"])
@pytest.mark.parametrize("fn", [cat_times_its_first_column, last_row_expanded])
def test_per_tile_scalars_and_constant_mask_pieces(fn, mode):
    jfn = run(fn, torch.randn(4, 6), mode=mode)
    source = triton_exec.last_kernels(jfn)[0].source
    assert ">= 1)" not in source and "(0 <" not in source


DANGEROUS = ["out0", "out1", "i0", "i1", "t0", "x_ptr", "x", "rows", "cols", "pid", "tl",
             "triton", "v1", "m2", "p3", "h1", "r1", "zeros", "in_domain", "col_blocks", "EMPTY",
             "LAUNCH", "torch_", "x_strides", "out0_ptr", "i0_div2", "ROWS", "COLS", "VEC"]


@settings(max_examples=15)
@given(names=st.lists(st.sampled_from(DANGEROUS) | st.from_regex(r"[a-z_][a-z0-9_]{0,6}",
                                                                   fullmatch=True),
                      min_size=3, max_size=3, unique=True).filter(
    lambda ns: not any(keyword.iskeyword(n) or n in ("torch", "F") for n in ns)),
       mode=st.sampled_from(["constant values", "symbolic values"]))
def test_any_parameter_names_work(names, mode):
    a, k, b = names
    namespace = {"torch": torch}
    exec(f"def f({a}, {k}: int, {b}):\n    return torch.cat(({a} * {k}, {b}[:, 2:]), -1)\n",
         namespace)
    fn = namespace["f"]
    args = (torch.randn(4, 6), 3, torch.randn(4, 8))
    jfn = ir.jit(fn, executors=["triton"], cache=mode)
    assert_close(jfn(*args), fn(*args))
    assert_close(jfn(*args), fn(*args))


@pytest.mark.parametrize("mode", ["constant values", "symbolic values"])
def test_offsets_that_pass_2_31_are_int64(mode):
    # x[::2**20] on 2**31 + 64 int8 elements: column index times the step passes 2**31; the
    # tensor is allocated lazily (only the pages read are touched)
    program = textwrap.dedent(f"""
        import torch, ir, triton_exec
        x = torch.empty(2 ** 31 + 64, dtype=torch.int8)
        x[::2 ** 20] = torch.arange(2049, dtype=torch.int8)
        f = lambda x: x[::2 ** 20] + 1
        out = ir.jit(f, executors=["triton"], cache={mode!r})(x)
        assert torch.equal(out, f(x)), (out, f(x))
        # an entry built on a small view computes offsets in int32 under a guard on the span
        # (sum((size - 1) * |stride|) < 2**31); a row stride of 2**31 fails it and compiles an
        # entry whose offsets are int64 products
        g = lambda v: v * 2
        jg = ir.jit(g, executors=["triton"], cache={mode!r})
        small = torch.arange(256, dtype=torch.int8).view(2, 128)[:, :64]   # not mergeable
        assert torch.equal(jg(small), g(small))
        assert "tl.int64" not in triton_exec.last_kernels(jg)[0].source
        assert "< 2147483648" in str(ir.last_prologue(jg))
        big = x.as_strided((2, 64), (2 ** 31, 1))
        big[1] = torch.arange(64, dtype=torch.int8)
        assert torch.equal(jg(big), g(big))
        assert ir.cache_stats(jg).misses == 2
        assert "tl.int64" in triton_exec.last_kernels(jg)[0].source
        print("ok")
    """)
    env = dict(os.environ, TRITON_INTERPRET="1")
    done = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("ok")
