"""Offline PTX compilation (no GPU needed) and the PTX access-width parser."""

import pytest

from triton_exec.offline import access_widths, compile_ptx, max_width, min_width

import kernels_for_offline as kernels

POINTERS = ("src_ptr", "dst_ptr")


def copy_widths(kernel, dtype: str, V: int, BLOCK: int = 1024, num_warps: int = 4):
    """Access widths of a masked-copy kernel launched with 16-byte aligned pointers and a runtime
    ``n_div_v`` that is not a multiple of 16, so only the constexpr V makes the bound divisible."""
    signature = {"src_ptr": dtype, "dst_ptr": dtype, "n_div_v": "i32", "V": "constexpr", "BLOCK": "constexpr"}
    ptx = compile_ptx(kernel, signature, {"V": V, "BLOCK": BLOCK}, POINTERS, num_warps)
    return access_widths(ptx)


@pytest.mark.parametrize(("V", "width"), [(8, 16), (4, 8), (2, 4), (1, 2)])
def test_bf16_masked_copy_access_width_follows_V(V, width):
    # 1024 elements over 4 warps: each thread holds 8 elements, enough for V = 8.
    widths = copy_widths(kernels.masked_copy, "*bf16", V)
    assert set(widths["ld"]) == {width} and set(widths["st"]) == {width}


def test_reversed_less_than_mask_vectorizes():
    widths = copy_widths(kernels.masked_copy_reversed_less, "*bf16", 8)
    assert max_width(widths, "ld") == 16 and max_width(widths, "st") == 16


def test_less_equal_mask_does_not_vectorize():
    widths = copy_widths(kernels.masked_copy_less_equal, "*bf16", 8)
    assert max_width(widths, "ld") == 2 and max_width(widths, "st") == 2


def test_unaligned_pointers_do_not_vectorize():
    signature = {"src_ptr": "*bf16", "dst_ptr": "*bf16", "n_div_v": "i32", "V": "constexpr", "BLOCK": "constexpr"}
    ptx = compile_ptx(kernels.masked_copy, signature, {"V": 8, "BLOCK": 1024}, ["n_div_v"], num_warps=4)
    assert max_width(access_widths(ptx), "ld") == 2


@pytest.mark.parametrize(("BLOCK", "num_warps", "width"), [(64, 4, 4), (64, 1, 8), (512, 4, 16)])
def test_fp32_tile_vectorizes_only_when_each_thread_holds_several_elements(BLOCK, num_warps, width):
    signature = {"src_ptr": "*fp32", "dst_ptr": "*fp32", "BLOCK": "constexpr"}
    ptx = compile_ptx(kernels.unmasked_copy, signature, {"BLOCK": BLOCK}, POINTERS, num_warps)
    assert access_widths(ptx) == {"ld": {width: 1}, "st": {width: 1}}


def test_kernel_calling_a_jit_helper_compiles():
    signature = {"src_ptr": "*fp32", "dst_ptr": "*fp32", "BLOCK": "constexpr"}
    ptx = compile_ptx(kernels.doubling_copy, signature, {"BLOCK": 512}, POINTERS, 4)
    assert access_widths(ptx) == {"ld": {16: 1}, "st": {16: 1}}


def test_compile_ptx_caches_in_process():
    signature = {"src_ptr": "*fp32", "dst_ptr": "*fp32", "BLOCK": "constexpr"}
    first = compile_ptx(kernels.unmasked_copy, signature, {"BLOCK": 256}, POINTERS, 2)
    assert compile_ptx(kernels.unmasked_copy, signature, {"BLOCK": 256}, POINTERS, 2) is first


def test_compile_ptx_rejects_unknown_parameter_names():
    with pytest.raises(ValueError, match="no_such_arg"):
        compile_ptx(kernels.unmasked_copy, {"no_such_arg": "i32"}, {}, (), 4)


HANDCRAFTED_PTX = """
    // ld.global.v4.b32 in a comment is not an access
    @%p1 ld.global.v4.b32 { %r1, %r2, %r3, %r4 }, [ %rd1 + 0 ];
    ld.global.nc.L1::evict_last.v4.b32 { %r5, %r6, %r7, %r8 }, [ %rd2 + 0 ];
    @!%p2 ld.global.L2::cache_hint.v2.b32 { %r9, %r10 }, [ %rd3 + 0 ], %rd9;
    ld.global.b16 { %rs1 }, [ %rd4 + 0 ];
    ld.global.nc.f32 %f1, [ %rd5 ];
    ld.global.u8 %rs2, [ %rd6 ];
    ld.shared.v4.b32 { %r11, %r12, %r13, %r14 }, [ %r15 ];
    @%p1 st.global.v4.b32 [ %rd7 + 0 ], { %r1, %r2, %r3, %r4 };
    st.global.v2.f16 [ %rd8 ], { %rs3, %rs4 };
    atom.global.add.f32 %f2, [ %rd9 ], %f1;
"""


def test_access_widths_parses_handcrafted_ptx():
    widths = access_widths(HANDCRAFTED_PTX)
    assert widths == {"ld": {1: 1, 2: 1, 4: 1, 8: 1, 16: 2}, "st": {4: 1, 16: 1}}
    assert max_width(widths, "ld") == 16 and min_width(widths, "ld") == 1


def test_access_widths_of_ptx_without_global_accesses():
    widths = access_widths("ld.shared.b32 %r1, [ %r2 ];")
    assert widths == {"ld": {}, "st": {}}
    assert max_width(widths, "st") == 0 and min_width(widths, "st") == 0
