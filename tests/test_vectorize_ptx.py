"""Resize-aware vectorization, proven in PTX: each generated kernel is compiled offline for
sm_90 with the specialization a launch would use, and the widths of its global loads and stores
are read back. Every case also runs through the interpreter against eager."""
import dataclasses

import pytest
import torch
import torch.nn.functional as F

import ir
import triton_exec
from programs import assert_close
from ir.examples import rope, rope_inputs


def run(fn, *args, executor="triton", mode="constant values"):
    jfn = ir.jit(fn, executors=[executor], cache=mode)
    out = jfn(*args)
    expected = fn(*args)
    if isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16:
        torch.testing.assert_close(out, expected, rtol=1e-2, atol=1e-2)
    else:
        assert_close(out, expected)
    (record,) = triton_exec.last_kernels(jfn)
    return jfn, record, record.access_widths()


def widths(counts: dict) -> set:
    return set(counts)


CASES = [  # (name, function, inputs, load widths in bytes, store widths in bytes)
    ("pad (4,4)", lambda x: F.pad(x, (4, 4)), [torch.randn(64)], {16}, {16}),
    # per access: the chunk [2, 66) starts where x does, so its loads are 16 bytes and its
    # stores, 2 off the output's multiples of 4, 8 bytes (both were 8 and 16 with one V)
    ("pad (2,2)", lambda x: F.pad(x, (2, 2)), [torch.randn(64)], {16}, {8}),
    # the stores of a 66-wide output are 8 bytes; the loads of the aligned 64 are not narrowed
    ("pad (0,2)", lambda x: F.pad(x, (0, 2)), [torch.randn(64)], {16}, {8}),
    ("slice [4:-4] + y", lambda x, y: x[4:-4] + y, [torch.randn(72), torch.randn(64)], {16},
     {16}),
    ("three slices", lambda x: x[4:] + x[2:-2] + x[:-4], [torch.randn(128)], {16, 8}, {16}),
    ("x[4:-4] + x[3:-5]", lambda x: x[4:-4] + x[3:-5], [torch.randn(36)], {16, 4}, {16}),
    ("pad of a middle dim", lambda x: F.pad(x, (0, 0, 4, 4)), [torch.randn(64, 64, 2)], {16},
     {16}),
]


@pytest.mark.parametrize("name,fn,args,loads,stores", CASES, ids=[c[0] for c in CASES])
def test_access_widths(name, fn, args, loads, stores):
    _, record, counts = run(fn, *args)
    assert widths(counts["ld"]) == loads, record.source
    assert widths(counts["st"]) == stores, record.source
    # The analysis predicted what Triton emitted.
    itemsize = args[0].element_size()
    predicted = {a.width * itemsize for a in record.lowered.accesses if a.kind == "load"}
    assert predicted == loads


def test_three_slices_give_an_8_byte_minimum():
    _, record, counts = run(lambda x: x[4:] + x[2:-2] + x[:-4], torch.randn(128))
    assert min(counts["ld"]) == 8 and record.min_vector_width == 2


def test_unaligned_slices_are_scalar_and_correct():
    _, record, counts = run(lambda x: x[4:-4] + x[3:-5], torch.randn(36))
    assert record.min_vector_width == 1 and 4 in counts["ld"]


@pytest.mark.parametrize("dtype,bulk,rotate", [(torch.bfloat16, 16, 8), (torch.float32, 16, 16)])
def test_seed_rope_widths(dtype, bulk, rotate):
    _, record, counts = run(rope, *rope_inputs(hs=32, n=8, dtype=dtype))
    loads = {a.label: a.width * dtype.itemsize for a in record.lowered.accesses
             if a.kind == "load"}
    rotate_half = [w for label, w in loads.items() if "slice" in label and w != bulk]
    assert set(counts["ld"]) == ({bulk, rotate} if rotate != bulk else {bulk})
    assert set(counts["st"]) == {bulk}
    assert all(w == rotate for w in rotate_half)
    assert loads[next(k for k in loads if "cos" in k)] == bulk
    assert loads[next(k for k in loads if "sin" in k)] == bulk


def test_misaligned_view_gets_a_narrower_guarded_kernel():
    fn = lambda x: F.pad(x, (4, 4))  # noqa: E731
    base = torch.randn(65)
    jfn = ir.jit(fn, executors=["triton"])
    assert_close(jfn(base[:64]), fn(base[:64]))
    aligned = triton_exec.last_kernels(jfn)[0]
    assert aligned.min_vector_width == 4
    assert "data_ptr() % 16 == 0" in str(ir.last_prologue(jfn))
    misaligned = base[1:]
    assert_close(jfn(misaligned), fn(misaligned))
    narrow = triton_exec.last_kernels(jfn)[0]
    assert ir.cache_stats(jfn).misses == 2
    assert narrow is not aligned
    assert [w for label, w in narrow.vector_width.items()
            if label.startswith("load") and label.endswith(" x (pad)")] == [1]
    assert set(narrow.access_widths()["ld"]) == {4}


def test_symbolic_cat_of_runtime_widths_is_16_byte():
    fn = lambda a, b: torch.cat((a, b), dim=-1)  # noqa: E731
    a = torch.randn(4, 16).bfloat16()
    b = torch.randn(4, 24).bfloat16()
    jfn, record, counts = run(fn, a, b, mode="symbolic values")
    assert set(counts["ld"]) == {16} and set(counts["st"]) == {16}
    assert "_div8" in record.source      # runtime widths arrive divided by 8
    # Another size of the same divisibility reuses the kernel; an odd one gets its own.
    c = torch.randn(4, 40).bfloat16()
    assert_close(jfn(a, c), fn(a, c))
    assert ir.cache_stats(jfn).hits == 1
    d = torch.randn(4, 13).bfloat16()
    torch.testing.assert_close(jfn(a, d), fn(a, d))
    assert ir.cache_stats(jfn).misses == 2
    assert triton_exec.last_kernels(jfn)[0].min_vector_width == 1


@pytest.mark.parametrize("name,fn,args,loads,stores", CASES, ids=[c[0] for c in CASES])
def test_analysis_off_gives_scalar_accesses(name, fn, args, loads, stores):
    _, record, counts = run(fn, *args, executor="triton_novec")
    itemsize = args[0].element_size()
    assert set(counts["ld"]) == {itemsize} and set(counts["st"]) == {itemsize}
    assert record.min_vector_width == 1


@pytest.mark.parametrize("vec,expected", [(1, {4}), (2, {8}), (4, {16})])
def test_the_vec_tuning_knob_caps_the_access_width(vec, expected):
    _, record, _ = run(lambda x: F.pad(x, (4, 4)), torch.randn(64))
    assert record.config.vec == 4       # the heuristic takes the analysis' maximum
    capped = dataclasses.replace(record, config=dataclasses.replace(record.config, vec=vec))
    counts = capped.access_widths()
    assert set(counts["ld"]) == expected and set(counts["st"]) == expected


def test_compiled_bf16_casts_round_to_nearest_even():
    # Triton's interpreter truncates float -> bf16 (the random-program tests allow for it); a GPU
    # runs the compiled kernel, whose casts round to nearest even, as eager does
    import re
    _, record, _ = run(lambda x: x.bfloat16() * 2, torch.randn(64))
    casts = set(re.findall(r"cvt\.[a-z0-9.]+bf16[a-z0-9.]*", record.ptx()))
    assert casts and all(c.startswith("cvt.rn.") for c in casts), casts


TF_SAME_PADS = {
    "pad": lambda x: F.pad(x, (0, 1, 0, 1)),
    "pad then scale": lambda x: F.pad(x * 2, (0, 1, 0, 1)) + 1,
    "pad of a strided view": lambda x: F.pad(x[:, :, ::2], (0, 1, 0, 1)),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", sorted(TF_SAME_PADS))
def test_tf_same_pad_loads_its_aligned_rows_wide(name, dtype):
    """TF 'same' padding `F.pad(x, (0, 1, 0, 1))` of 16-wide rows: the output's rows of 17 make
    the stores narrow, the loads of the input's aligned rows stay 16 bytes (they were as
    narrow as the stores); the record states both."""
    fn = TF_SAME_PADS[name]
    x = torch.randn(2, 3, 16, 16).to(dtype)
    jfn, record, counts = run(fn, x)
    assert torch.equal(jfn(x), fn(x))
    assert set(counts["ld"]) == {16}, record.source
    assert set(counts["st"]) == {dtype.itemsize}, record.source
    assert record.vector_width == record.analysis_width
