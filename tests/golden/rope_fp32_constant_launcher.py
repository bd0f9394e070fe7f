def rope_fusion_0(x, cos, sin):
    x_strides = x.stride()
    cos_strides = cos.stride()
    sin_strides = sin.stride()
    out0 = EMPTY((2, 4, 16, 32), (2048, 512, 32, 1), torch.float32)
    LAUNCH((1, 1), (x, x_strides[0] // 4, x_strides[1] // 4, x_strides[2] // 4, cos, cos_strides[0] // 4, sin, sin_strides[0] // 4, out0, 64, 32, 4, 2))  # ..., ROWS=64, COLS=32, VEC=4, LOOP=2; num_warps=1
    return out0
