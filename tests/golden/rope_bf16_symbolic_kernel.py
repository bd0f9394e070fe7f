@triton.jit
def rope_fusion_0_kernel(h1, i3_div8, h2, i2, n_div8, x_ptr, x_stride0_div8, x_stride1_div8, x_stride2_div8, cos_ptr, cos_stride0_div8, i9_div4, i8_div4, sin_ptr, sin_stride0_div8, out0_ptr, ROWS: tl.constexpr, COLS: tl.constexpr, VEC: tl.constexpr, LOOP: tl.constexpr):
    # Runtime sizes and strides arrive divided by their guarded power-of-two divisor; h*: values the launcher computes
    # h1 = i0 - 1
    i3 = i3_div8 * 8
    # h2 = i1 * i2
    n = n_div8 * 8
    x_stride0 = x_stride0_div8 * 8
    x_stride1 = x_stride1_div8 * 8
    x_stride2 = x_stride2_div8 * 8
    cos_stride0 = cos_stride0_div8 * 8
    i9 = i9_div4 * 4
    i8 = i8_div4 * 4
    sin_stride0 = sin_stride0_div8 * 8
    # Tile [ROWS, COLS] of the output domain [i0, i1, i2, i3]; COLS walks the innermost dim; dim 0 is walked by a loop in each program, ROWS walks the other outer dims
    pid = tl.program_id(0)
    col_blocks = (i3 + COLS - 1) // COLS
    rows = (pid // col_blocks) * ROWS + tl.arange(0, ROWS)[:, None]
    # VEC caps the contiguity Triton may assume along COLS, so the access width
    cols = (pid % col_blocks) * COLS + tl.max_contiguous(tl.arange(0, COLS), VEC)[None, :]
    in_domain = (rows < h2) & (cols < i3)
    # Dim 0 in blocks of LOOP indices, one block per program along the grid's second axis; o0: the loop's index
    # (the last block repeats the last index, h1, past the extent)
    o0_start = tl.program_id(1) * LOOP
    # Outer indices of the output, from the row index
    o2 = rows % i2
    o1 = rows // i2
    # Values, as functions of the output index
    m3 = in_domain & (cols < n)  # cat piece 0 of 2
    p5 = o1 * x_stride1
    p6 = o2 * x_stride2
    p9 = o2 * cos_stride0
    v10 = tl.load(cos_ptr + p9 + cols, mask=m3, other=0)  # cos: plain, 8 per access
    m14 = m3 & (cols < i9)  # cat piece 0 of 2
    m18 = m3 & (cols >= i9)  # cat piece 1 of 2
    p22 = o2 * sin_stride0
    v23 = tl.load(sin_ptr + p22 + cols, mask=m3, other=0)  # sin: plain, 8 per access
    m30 = in_domain & (cols >= n)  # cat piece 1 of 2
    # The loop over the LOOP indices of dim 0 in this program's block: the lines above depend on none of them (values of inputs broadcast along dim 0 are read once per program)
    for j in tl.static_range(LOOP):
        o0 = tl.minimum(o0_start + j, h1)
        # Values, as functions of the output index
        p4 = o0 * x_stride0
        v7 = tl.load(x_ptr + p4 + p5 + p6 + cols, mask=m3, other=0)  # x: slice, 8 per access
        v12 = narrow.mul(v7, v10)
        v15 = tl.load(x_ptr + p4 + p5 + p6 + cols + i8, mask=m14, other=0)  # x: slice, 4 per access
        v16 = v15.to(tl.float32)
        v17 = v16 * -1.0
        v19 = tl.load(x_ptr + p4 + p5 + p6 + cols - i9, mask=m18, other=0)  # x: slice, 4 per access
        v20 = v19.to(tl.float32)
        v21 = tl.where(cols < i9, v17, v20)
        v25 = narrow.round(v21, tl.bfloat16)
        v26 = narrow.mul(v25, v23)
        v28 = narrow.add(v12, v26)
        v29 = v28.to(tl.float32)
        v31 = tl.load(x_ptr + p4 + p5 + p6 + cols, mask=m30, other=0)  # x: slice, 8 per access
        v32 = v31.to(tl.float32)
        v33 = tl.where(cols < n, v29, v32)
        p34 = (rows + o0 * h2) * i3
        # Stores
        tl.store(out0_ptr + p34 + cols, v33.to(tl.bfloat16), mask=in_domain)  # t11, 8 per access
