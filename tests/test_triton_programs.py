"""Random programs through the Triton executor (Triton's interpreter on CPU tensors), against
eager PyTorch, in both cache modes."""
import pytest
from hypothesis import given, note, settings

import math

import ir
import triton_exec
from ir.proxies import hint
from programs import assert_matches_eager, programs
from triton_exec import index, launch

RESIZE_AND_ELEMENTWISE = ("arith", "unary", "max_min", "where", "compare", "cast", "index", "cat",
                          "stack", "pad", "reshape", "split_merge", "expand", "layout", "clamp",
                          "pow", "div", "masked_fill", "split")


def check(program, mode):
    note(program.describe())
    jfn = ir.jit(program.fn, executors=["triton"], cache=mode)
    assert_matches_eager(program, jfn(*program.inputs))
    assert_matches_eager(program, jfn(*program.inputs))     # the cached entry, again
    assert ir.cache_stats(jfn).hits >= 1
    for trace in ir.last_traces(jfn):
        compile(str(trace), "<trace>", "exec")
    for record in triton_exec.last_kernels(jfn):
        check_geometry(record)


def check_geometry(record):
    """Launched lanes (grid x ROWS x COLS, x LOOP with a loop) <= 2 x the elements of the
    domain the kernel tiles, plus one program's (with a loop, one per block of the loop dim:
    each block rounds the other rows up to ROWS): the config is chosen from that domain, after
    the inner-dim merge."""
    lowered, config = record.lowered, record.config
    rows, cols = (index.evaluate(e, lambda leaf: hint(leaf.source))
                  for e in (lowered.rows, lowered.cols))
    grid = launch.grid(lowered, config, lambda leaf: hint(leaf.source))
    tile = config.rows * config.cols * (config.loop or 1)
    lanes = math.prod(grid) * tile
    elements = math.prod(hint(s) for s in lowered.tiled)
    assert elements == rows * cols * (lowered.loop.extent if lowered.loop else 1)
    blocks = grid[1] if lowered.loop else 1
    assert lanes <= 2 * elements + tile * blocks, (lanes, elements, config)


@pytest.mark.parametrize("mode", ["constant values", "symbolic values"])
@settings(max_examples=30)
@given(program=programs(max_ops=5, op_names=RESIZE_AND_ELEMENTWISE))
def test_programs_match_eager(program, mode):
    check(program, mode)


@settings(max_examples=20)
@given(program=programs(max_ops=4, op_names=("index", "cat", "pad", "arith"), int_args=True))
def test_programs_with_int_arguments_match_eager(program):
    check(program, "symbolic values")


def test_the_config_is_chosen_from_the_merged_domain():
    # (256, 2) fp32 merges to [1, 512]: one tile of 512 lanes, not 128 programs of 1024
    import torch
    jfn = ir.jit(lambda x: x * 2, executors=["triton"])
    x = torch.randn(256, 2)
    assert_close_ = torch.testing.assert_close
    assert_close_(jfn(x), x * 2)
    (record,) = triton_exec.last_kernels(jfn)
    assert tuple(record.lowered.tiled) == (512,)
    assert (record.config.rows, record.config.cols) == (1, 512)
    check_geometry(record)
