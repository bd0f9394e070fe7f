"""`lower_group`'s steps one by one (analyze -> plan the tile -> build the expressions -> render),
on groups taken from traced functions: no kernel is compiled or launched. And golden strings of
the seed RoPE's printed traces and kernels (fp32 constant mode, bf16 symbolic mode): every change
to tracing or code generation shows as a diff here. After an intended change, rewrite them with
`TRITON_EXEC_UPDATE_GOLDEN=1 bash tests/run.sh -k golden` and review the diff."""
import os
import pathlib

import pytest
import torch
import torch.nn.functional as F

import ir
import triton_exec
from ir.examples import rope, rope_inputs
from triton_exec import codegen, fusion, index

GOLDEN = pathlib.Path(__file__).parent / "golden"


def group_of(fn, *args, mode="constant values"):
    """(eqns, outputs, inputs, values) of the last fusion group of fn's trace on args."""
    jfn = ir.jit(fn, executors=["torch"], cache=mode)
    jfn(*args)
    trace = ir.last_traces(jfn)[1]          # after dead-code elimination
    values = {id(proxy): a for (_, proxy), a in zip(trace.inputs, args)
              if isinstance(a, torch.Tensor)}
    groups = fusion.partition(trace)
    group = groups[-1]
    return ([trace.eqns[i] for i in group], fusion.group_outputs(trace, group, groups),
            fusion.group_inputs(trace, group), values)


def writer_for(group, vectorize=True):
    return codegen.kernel_writer(group, vectorize)


def test_analyze_merges_inner_dims_and_decides_index_widths():
    group = codegen.analyze(*group_of(lambda x: F.pad(x, (0, 0, 4, 4)) * 2,
                                      torch.randn(8, 8, 2)))
    assert group.allocated == (8, 16, 2) and group.domain == (8, 32)      # dims 1, 2 merged
    assert group.narrow and not group.wide_cols and group.max_vector == 4
    assert [g[0] for g in group.guards] == ["strides_compose"]
    symbolic = codegen.analyze(*group_of(lambda x: x * 2, torch.randn(4, 6),
                                         mode="symbolic values"))
    assert {g[0] for g in symbolic.guards} >= {"numel_lt", "lt"}    # what narrow indices need


def test_plan_tile_gives_tile_indices_bounded_by_the_domain():
    group = codegen.analyze(*group_of(lambda x: x[..., 1:] + 1, torch.randn(6, 5, 9)))
    tile = codegen.plan_tile(group, writer_for(group))
    assert tile.rows_extent == index.Const(30) and tile.cols_extent == index.Const(8)
    assert (tile.cols.lo, tile.cols.hi, tile.cols.bits) == (0, 8, 32)
    o0, o1 = tile.outer
    assert o1.hi == 5 and "row_arange" in o0.deps and "col_arange" not in o0.deps
    assert len(tile.in_domain.atoms) == 2


def test_build_collects_accesses_and_drops_decided_mask_pieces():
    group = codegen.analyze(*group_of(lambda x: torch.cat((x[:, :4], x[:, 4:]), -1),
                                      torch.randn(4, 8)))
    w = writer_for(group)
    stores = codegen.build(group, codegen.plan_tile(group, w), w)
    assert [a.kind for a in w.accesses] == ["load", "load", "store"]
    assert all(a.width == 4 for a in w.accesses)
    body = "\n".join(line for line in w.lines if not line.startswith("in_domain = "))
    assert "(cols < 8)" not in body
    assert len(stores) == 1 and "mask=in_domain" in stores[0]


def test_render_writes_the_signature_and_decorator():
    group = codegen.analyze(*group_of(lambda x: x * 2, torch.randn(4, 8)))
    for vectorize, decorator in ((True, "@triton.jit\n"), (False, "do_not_specialize")):
        w = writer_for(group, vectorize)
        source = codegen.render_kernel("k", w, codegen.build(group, codegen.plan_tile(group, w), w))
        assert decorator in source
        assert "def k(x_ptr, out0_ptr, ROWS" in source and "VEC: tl.constexpr):" in source
        compile(source, "<kernel>", "exec")


CASES = [("fp32_constant", torch.float32, "constant values"),
         ("bf16_symbolic", torch.bfloat16, "symbolic values")]


@pytest.mark.parametrize("name,dtype,mode", CASES, ids=[c[0] for c in CASES])
def test_golden_rope(name, dtype, mode):
    jfn = ir.jit(rope, executors=["triton"], cache=mode)
    jfn(*rope_inputs(hs=32, n=8, dtype=dtype))
    (record,) = triton_exec.last_kernels(jfn)
    texts = {f"rope_{name}_traces.txt": "\n\n".join(str(t) for t in ir.last_traces(jfn)) + "\n",
             f"rope_{name}_kernel.py": record.source,
             f"rope_{name}_launcher.py": record.launcher_source}
    for file, text in texts.items():
        path = GOLDEN / file
        if os.environ.get("TRITON_EXEC_UPDATE_GOLDEN") == "1":
            path.parent.mkdir(exist_ok=True)
            path.write_text(text)
        assert text == path.read_text(), f"{file} changed; see the module docstring"


def test_golden_rope_kernel_reads_no_host_value_and_one_offset_product_per_dim():
    source = (GOLDEN / "rope_bf16_symbolic_kernel.py").read_text()
    body = source.split("# Values")[1]
    assert "i9 + i8" not in body and "n + i10" not in body      # sums the host knows
    for tensor, dims in (("x", 3), ("cos", 1), ("sin", 1)):
        for d in range(dims):
            assert source.count(f"* {tensor}_stride{d}\n") == 1, (tensor, d)


def test_a_new_fusible_op_is_one_rule():
    # fusion, the inner-dim merge and code generation read the rule table keyed by the Prim
    # object only: registering one rule makes a new elementwise prim fusible and lowered
    from ir.prims import Prim
    from ir.proxies import TensorProxy
    from ir.trace import Eqn
    from triton_exec import rules
    square = Prim("square", "elementwise", lambda t: [(t.shape, t.dtype, t.device)])
    x = TensorProxy("x", (4, 8), torch.float32, torch.device("cpu"))
    out = TensorProxy("t0", (4, 8), torch.float32, torch.device("cpu"))
    eqn = Eqn(square, (x,), {}, (out,))
    assert fusion.refusal(eqn)[0] == "not fusible"

    def lower(w, eqn, idx, mask, path):
        v = w.value(eqn.args[0], idx, mask, path)
        return w.let("v", f"{v} * {v}")

    rules.register(square, lower=lower, float_only=True)
    try:
        assert fusion.refusal(eqn) is None
        lowered = codegen.lower_group("k", [eqn], [out], [x], {id(x): torch.randn(4, 8)}, True)
        assert "v2 = v1 * v1" in lowered.source
        assert [a.width for a in lowered.accesses] == [4, 4]       # merged to [32]: 16 bytes
    finally:
        del rules.RULES[square]
