def rope_fusion_0(x, cos, sin, i0, i1, i2, i3, n, i9, i8):
    x_strides = x.stride()
    cos_strides = cos.stride()
    sin_strides = sin.stride()
    out0 = EMPTY((i0, i1, i2, i3), (i1 * i2 * i3, i2 * i3, i3, 1), torch.bfloat16)
    if i0 * i1 * i2 * i3 > 0:
        LAUNCH((((i1 * i2) + 63) // 64 * (((i3) + 31) // 32), ((i0) + 1) // 2), (i0 - 1, i3 // 8, i1 * i2, i2, n // 8, x, x_strides[0] // 8, x_strides[1] // 8, x_strides[2] // 8, cos, cos_strides[0] // 8, i9 // 4, i8 // 4, sin, sin_strides[0] // 8, out0, 64, 32, 8, 2))  # ..., ROWS=64, COLS=32, VEC=8, LOOP=2; num_warps=4
    return out0
