"""Access widths on the shapes of real vision models, proven in sm_90 PTX (offline, as a launch
specializes): NHWC <-> NCHW permutes with elementwise work (ConvNeXt's block tail and its
`permute(0, 2, 3, 1)` before the norm, ViT's patch flatten/transpose) load and store 16 bytes
on both sides (a 2-D tile: loads wide along the rows, stores along the columns); TF 'same' and
symmetric pads load the input's aligned rows 16 bytes (stores as wide as the odd rows allow);
Swin's window partition and reverse with and without padding, UNet's skip cats and ViT's token
cat + position embedding stay 16 bytes. Values are eager's bit for bit, gradients equal eager's
(a broadcast operand's, a sum, within the dtype's tolerance), and the
record states each access's compiled width (`record.vector_width == record.analysis_width`)."""
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, note, settings
from hypothesis import strategies as st

import ir
import triton_exec
from triton_exec import launch
from perf_modules import perf_module
from semantics import assert_bits_equal
from test_copy_kernels import partition, reverse

DTYPES = [torch.float32, torch.bfloat16]


def convnext_tail(shortcut, y, gamma):
    return shortcut + (y * gamma).permute(0, 3, 1, 2)


def swin_partition_padded(x, w: int = 4):
    """timm's Swin: pad H and W up to multiples of the window, then partition."""
    H, W = x.shape[1:3]
    x = F.pad(x, (0, 0, 0, (w - W % w) % w, 0, (w - H % w) % w))
    return partition(x, w)


def swin_reverse_cropped(windows, w: int = 4, H: int = 6, W: int = 6):
    """timm's Swin: window reverse to the padded size, then crop to H x W."""
    Hp, Wp = -(-H // w) * w, -(-W // w) * w
    return reverse(windows * 0.5, w, Hp, Wp)[:, :H, :W, :].contiguous()


def vit_tokens(x, cls, pos):
    """ViT: the class token before the patch tokens, plus the position embedding."""
    return torch.cat((cls.expand(x.shape[0], -1, -1), x), dim=1) + pos


# name -> (function, input shapes, load widths in bytes, store widths in bytes by dtype: None
# for 16 bytes, else {dtype: widths})
CASES = {
    "NHWC -> NCHW, ConvNeXt's tail": (convnext_tail, [(2, 32, 8, 8), (2, 8, 8, 32), (32,)],
                                      None, None),
    "NHWC -> NCHW contiguous": (lambda x: (x * 2 + 1).permute(0, 3, 1, 2).contiguous(),
                                [(2, 8, 8, 32)], None, None),
    "NCHW -> NHWC, scaled": (lambda x, w: x.permute(0, 2, 3, 1) * w + 1,
                             [(2, 32, 8, 8), (32,)], None, None),
    "ViT patch flatten/transpose": (lambda x, pos: x.flatten(2).transpose(1, 2) + pos,
                                    [(2, 32, 4, 4), (16, 32)], None, None),
    "TF 'same' pad": (lambda x: F.pad(x, (0, 1, 0, 1)), [(2, 3, 16, 16)], None, "item"),
    "TF 'same' pad of a scaled input": (lambda x: F.pad(x * 2, (0, 1, 0, 1)) + 1,
                                        [(2, 3, 16, 16)], None, "item"),
    "symmetric pad (1, 1, 1, 1)": (lambda x: F.pad(x, (1, 1, 1, 1)), [(2, 3, 16, 16)], None,
                                   "item"),
    "symmetric pad of a scaled input": (lambda x: F.pad(x * 2, (1, 1, 1, 1)) - 1,
                                        [(2, 3, 16, 16)], None, "item"),
    "symmetric pad (2, 2, 2, 2)": (lambda x: F.pad(x, (2, 2, 2, 2)), [(2, 3, 16, 16)], None,
                                   "2 items"),
    "Swin partition, padded": (swin_partition_padded, [(2, 6, 6, 32)], None, None),
    "Swin reverse, cropped": (swin_reverse_cropped, [(8, 4, 4, 32)], None, None),
    "Swin partition": (lambda x: partition(x, 4) * 0.5, [(2, 8, 8, 32)], None, None),
    "UNet skip cat": (lambda up, skip: F.relu(torch.cat((up * 2, skip), dim=1)),
                      [(2, 16, 8, 8), (2, 8, 8, 8)], None, None),
    "ViT token cat + position embedding": (vit_tokens, [(2, 16, 32), (1, 1, 32), (1, 17, 32)],
                                           None, None),
}


def _bytes(spec, dtype) -> set:
    return {{None: 16, "item": dtype.itemsize, "2 items": 2 * dtype.itemsize}[spec]}


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_vision_shapes_are_16_bytes_where_the_addresses_allow(name, dtype):
    fn, shapes, loads, stores = CASES[name]
    g = torch.Generator().manual_seed(0)
    args = [torch.randn(s, generator=g).to(dtype).requires_grad_() for s in shapes]
    jfn = ir.jit(fn, executors=["triton"])
    expected, result = fn(*args), jfn(*args)
    assert_bits_equal(result, expected)
    dy = torch.randn(expected.shape, generator=g).to(dtype)
    for want, got in zip(torch.autograd.grad(expected, args, dy),
                         torch.autograd.grad(result, args, dy)):
        # a broadcast operand's gradient is a sum, in another order than eager's
        torch.testing.assert_close(got, want)
    (record,) = [r for r in triton_exec.last_kernels(jfn) if r.direction == "forward"]
    widths = record.access_widths(arch=90)
    assert set(widths["ld"]) == _bytes(loads, dtype), (widths, record.source)
    assert set(widths["st"]) == _bytes(stores, dtype), (widths, record.source)
    assert record.vector_width == record.analysis_width, record.source


# ---- stores narrower than the loads: the loads' own layout (issue 29, the bf16 TF 'same' pad)

@st.composite
def odd_pads(draw):
    """A pad of the last two dims whose output rows are odd or shifted (TF 'same' `(0, 1, 0,
    1)`, symmetric `(1, 1, 1, 1)`, one-sided), of inputs whose rows allow 16-byte loads (a
    multiple of 8 elements wide), with or without elementwise work before it, in fp32 or bf16."""
    width = draw(st.sampled_from([16, 24, 32, 56]))
    lo, hi = draw(st.sampled_from([(0, 1), (1, 1), (0, 3), (1, 0), (2, 1)]))
    shape = (draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.sampled_from([4, 8, 9])),
             width)
    return shape, (lo, hi, lo, hi), draw(st.sampled_from(DTYPES)), draw(st.booleans())


def _shared_memory(ptx: str) -> list[str]:
    """The PTX lines that move a tile through shared memory (a layout conversion)."""
    return [line for line in ptx.splitlines() if ".shared" in line or "bar.sync" in line]


@settings(max_examples=8)
@given(case=odd_pads())
def test_stores_narrower_than_the_loads_keep_the_loads_layout(case):
    """Output rows whose start or length is odd make the stores narrow while the input's
    aligned rows load 16 bytes: the chunk's values are split in registers and stored from the
    loads' own layout (`codegen/split_stores.py`), so no tile goes through shared memory (it
    did, at every such chunk, and cost more instructions than the copy); values are eager's."""
    shape, pad, dtype, scaled = case
    fn = (lambda x: F.pad(x * 2, pad) + 1) if scaled else (lambda x: F.pad(x, pad))
    note(f"{shape} {pad} {dtype} scaled {scaled}")
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0)).to(dtype)
    jfn = ir.jit(fn, executors=["triton"])
    assert_bits_equal(jfn(x), fn(x))
    (record,) = triton_exec.last_kernels(jfn)
    widths = record.access_widths(arch=90)
    assert max(widths["ld"]) == 16 and max(widths["st"]) < 16, (widths, record.source)
    assert record.vector_width == record.analysis_width, record.source
    assert "tl.split" in record.source
    assert not _shared_memory(record.ptx(90)), record.source


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
def test_the_tf_same_pad_costs_less_than_the_hand_written_kernel(dtype):
    """EfficientNet's TF 'same' pad at its rows of 56 (a smaller batch than perf/static_cost.py's
    [64, 96, 56, 56]): at our launch config, 4 warps (the 1-wide last column made it 1 warp of
    512 elements per thread), more bytes per warp-instruction than the hand-written kernel at
    the same tile, with the input's aligned rows loaded 16 bytes (bf16 was 0.58x the
    hand-written kernel: every tile converted between the loads' and the stores' layouts)."""
    static_cost = perf_module("static_cost")
    case = static_cost.Case("pad", static_cost.pad_same, (torch.empty(4, 96, 56, 56, dtype=dtype),),
                            hand=static_cost._pad_same_hand)
    ours, _, hand = static_cost.measure(case)
    assert ours.widths["ld"] == {16: ours.widths["ld"][16]}, ours.widths
    assert "4 warps" in ours.tile and hand.tile == ours.tile
    assert ours.cost.bytes_per_warp_instruction > hand.cost.bytes_per_warp_instruction, (
        ours.cost, hand.cost)


@settings(max_examples=40)
@given(widths=st.lists(st.sampled_from([1, 2, 4, 8, 16, 32, 64]), min_size=2, max_size=5),
       width=st.sampled_from([1, 2, 4, 8]), rows=st.sampled_from([4096, 100000]))
def test_column_chunks_keep_four_warps_with_a_vector_each(widths, width, rows):
    """The launch config of a kernel in column chunks (`launch._chunked_config`), with rows to
    spare: each thread holds at least one vector of every chunk (a chunk narrower than the
    vector: one of its own width; a 1-wide chunk's accesses are single elements whatever the
    layout), within the tile's size, at 4 warps unless that size leaves too few rows for them.
    A 1-wide chunk (TF 'same' padding's last column) made it 1 warp of 512 elements per
    thread."""
    from triton_exec.codegen.column_plan import Chunk

    starts = [sum(widths[:k]) for k in range(len(widths))]

    class FakeLowered:
        max_width = width
        chunks = tuple(Chunk(s, c, s + c) for s, c in zip(starts, widths))
        loop = None
        whole_rows = False
        row_axis = None
        column_rows = None
    config = launch.heuristic_config(FakeLowered(), rows, sum(widths))
    assert config.rows * config.cols <= launch.CHUNKED_TILE, config

    def holds_a_vector(rows, warps):        # of every chunk but a 1-wide one (any layout)
        return all(rows * c.width >= 32 * warps * min(c.width, width)
                   for c in FakeLowered.chunks if c.width > 1)
    assert holds_a_vector(config.rows, config.num_warps), config
    # fewer warps only where the tile's size leaves too few rows for 4
    assert config.num_warps == 4 or not holds_a_vector(launch.CHUNKED_TILE // config.cols, 4)
