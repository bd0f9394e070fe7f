"""The static cost model: SASS (or PTX) instructions per program against the bytes it moves."""

import pytest
import torch

import ir
import triton_exec
from ir.examples import rope, rope_inputs
from triton_exec import cost

SASS = """
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/              @!P0 LDG.E.128 R4, desc[UR4][R2.64] ;
        /*0020*/                   STG.E.128 desc[UR4][R8.64], R4 ;
        /*0030*/                   EXIT ;
.L_x_0:
        /*0040*/                   BRA `(.L_x_0);
        /*0050*/                   NOP;
        /*0060*/                   NOP;
"""


def test_sass_count_leaves_out_padding():
    assert cost.sass_instructions(SASS) == 4


LOOP_SASS = """
        /*0000*/                   MOV R0, RZ ;
.L_x_0:
        /*0010*/                   LDG.E.128 R4, desc[UR4][R2.64] ;
        /*0020*/                   IADD3 R0, R0, 0x1, RZ ;
        /*0030*/                   ISETP.GE.AND P0, PT, R0, 0x4, PT ;
        /*0040*/              @!P0 BRA `(.L_x_0) ;
        /*0050*/                   STG.E.128 desc[UR4][R8.64], R4 ;
        /*0060*/              @P1 BRA `(.L_x_1) ;
        /*0070*/                   MOV R1, RZ ;
.L_x_1:
        /*0080*/                   EXIT ;
.L_x_2:
        /*0090*/                   BRA `(.L_x_2);
"""


def test_the_code_inside_loops_is_counted_apart():
    """A branch back to an earlier label closes a loop (a forward branch does not): its code is
    issued once per trip, the rest once."""
    assert cost.sass_instructions(LOOP_SASS) == 9
    assert cost.sass_loop_instructions(LOOP_SASS) == 4
    c = cost.StaticCost(90, "SASS", 9, 2, 512.0, 512.0, 32, 0, 9, loop_instructions=4)
    assert c.issued(trips=4) == (5 + 4 * 4) * 2 and c.issued(trips=1) == c.warp_instructions
    assert c.bytes_per_issued(4) == pytest.approx(1024 / 42)
    ptx = ("mov.u32 %r1, 0;\n$L__BB0_1:  // %loop\nld.global.b32 %r2, [%rd1];\n"
           "add.s32 %r1, %r1, 1;\n@%p1 bra $L__BB0_1;\n@%p2 bra $L__BB0_2;\n$L__BB0_2:\nret;\n")
    assert (cost.ptx_instructions(ptx), cost.ptx_loop_instructions(ptx)) == (6, 3)


def test_ptx_count_leaves_out_directives_labels_and_comments():
    ptx = ".reg .b32 %r<4>;\n// c\n$L__BB0_1:\n{\n  ld.global.b32 %r1, [%rd1];\n}\n  ret;\n"
    assert cost.ptx_instructions(ptx) == 2


def test_without_a_cubin_the_ptx_is_counted():
    c = cost.static_cost({"ptx": "add.s32 %r1, %r2, %r3;\nret;\n"}, 4, 1024.0, 1024.0)
    assert (c.counted, c.instructions, c.registers) == ("PTX", 2, None)
    assert c.bytes_per_warp_instruction == pytest.approx(2048 / 8)


def test_seed_rope_record_cost():
    x, cos, sin, n = rope_inputs(B=2, H=4, T=16, hs=32, n=8, dtype=torch.bfloat16)
    jfn = ir.jit(rope, executors=["triton"])
    jfn(x, cos, sin, n)
    (record,) = triton_exec.last_kernels(jfn)
    c = record.cost(arch=90)
    config = record.config
    # ROWS walks heads and tokens; a loop in each program walks LOOP of the batch (dim 0)
    assert record.lowered.loop.dim == 0 and config.loop == 2
    programs = -(-x.numel() // 2 // 32 // config.rows)
    assert c.num_warps == config.num_warps and c.arch == 90
    assert c.bytes_loaded == pytest.approx((x.numel() + cos.numel() + sin.numel()) * 2 / programs)
    assert c.bytes_stored == pytest.approx(x.numel() * 2 / programs)
    assert c.instructions > 0 and c.ptx_instructions > 0
    assert c.bytes_per_warp_instruction == pytest.approx(
        c.bytes_moved / (c.instructions * c.num_warps))
    if c.counted == "SASS":         # the tools ship in Triton's NVIDIA backend
        assert c.registers > 0 and c.spill_bytes == 0
    assert "B/warp-instr" in c.summary()
