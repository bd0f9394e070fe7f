"""Straightforward hand-written Triton kernels for the functions perf/static_cost.py measures: what
a person writes for each in a few minutes, tiled [ROWS, COLS] as our kernels are (a row per
flattened outer index, COLS along the innermost dim), so that their static costs compare at the
same tile. Contiguous inputs and outputs; every value computed over the whole tile.

- `rope_forward`: the seed's RoPE: load x, load the partner half, `tl.where` the cat;
- `rope_backward`: its gradient for x (partner columns of the gradient and of sin);
- `pad_columns`: `F.pad` of the (flattened) innermost dim, a constant fill;
- `cat_columns`: `torch.cat((a, b), -1)`;
- `slice_scale`: `x[:, LO:C - HI] * 2`; `slice_add`: `x[:, LO:C - HI] + x[:, LO - 1:C - HI - 1]`;
- `nhwc_to_nchw_tail`: ConvNeXt's `s + (y * g).permute(0, 3, 1, 2)`, the way Inductor tiles a
  pointwise transpose: rows over (n, c), columns over (h, w), each load at its own address;
- `pad_same`: TF 'same' padding `F.pad(x, (0, 1, 0, 1))`, one masked load per tile.
"""
import triton
import triton.language as tl


@triton.jit
def _tile(R, C, ROWS: tl.constexpr, COLS: tl.constexpr):
    pid = tl.program_id(0)
    col_blocks = (C + COLS - 1) // COLS
    rows = (pid // col_blocks) * ROWS + tl.arange(0, ROWS)[:, None]
    cols = (pid % col_blocks) * COLS + tl.arange(0, COLS)[None, :]
    return rows, cols, (rows < R) & (cols < C)


@triton.jit
def rope_forward(x_ptr, cos_ptr, sin_ptr, out_ptr, R, T, HS: tl.constexpr, N: tl.constexpr,
                 ROWS: tl.constexpr, COLS: tl.constexpr):
    rows, cols, mask = _tile(R, HS, ROWS, COLS)
    t = rows % T
    x = tl.load(x_ptr + rows * HS + cols, mask=mask, other=0).to(tl.float32)
    rotated = mask & (cols < N)
    first = cols < N // 2
    partner = tl.where(first, cols + N // 2, cols - N // 2)
    xp = tl.load(x_ptr + rows * HS + partner, mask=rotated, other=0).to(tl.float32)
    c = tl.load(cos_ptr + t * N + cols, mask=rotated, other=0).to(tl.float32)
    s = tl.load(sin_ptr + t * N + cols, mask=rotated, other=0).to(tl.float32)
    y = x * c + tl.where(first, -xp, xp) * s
    tl.store(out_ptr + rows * HS + cols, tl.where(cols < N, y, x).to(out_ptr.dtype.element_ty),
             mask=mask)


@triton.jit
def rope_backward(dy_ptr, cos_ptr, sin_ptr, dx_ptr, R, T, HS: tl.constexpr, N: tl.constexpr,
                  ROWS: tl.constexpr, COLS: tl.constexpr):
    """dx = dy * cos + (dy * sin)[partner] * (+1 in the first half, -1 in the second)."""
    rows, cols, mask = _tile(R, HS, ROWS, COLS)
    t = rows % T
    dy = tl.load(dy_ptr + rows * HS + cols, mask=mask, other=0).to(tl.float32)
    rotated = mask & (cols < N)
    first = cols < N // 2
    partner = tl.where(first, cols + N // 2, cols - N // 2)
    dyp = tl.load(dy_ptr + rows * HS + partner, mask=rotated, other=0).to(tl.float32)
    c = tl.load(cos_ptr + t * N + cols, mask=rotated, other=0).to(tl.float32)
    sp = tl.load(sin_ptr + t * N + partner, mask=rotated, other=0).to(tl.float32)
    dx = dy * c + tl.where(first, dyp * sp, -(dyp * sp))
    tl.store(dx_ptr + rows * HS + cols, tl.where(cols < N, dx, dy).to(dx_ptr.dtype.element_ty),
             mask=mask)


@triton.jit
def pad_columns(x_ptr, out_ptr, R, C_IN: tl.constexpr, LO: tl.constexpr, HI: tl.constexpr,
                ROWS: tl.constexpr, COLS: tl.constexpr):
    rows, cols, mask = _tile(R, C_IN + LO + HI, ROWS, COLS)
    inside = (cols >= LO) & (cols < LO + C_IN)
    x = tl.load(x_ptr + rows * C_IN + cols - LO, mask=mask & inside, other=0)
    tl.store(out_ptr + rows * (C_IN + LO + HI) + cols, tl.where(inside, x, 0), mask=mask)


@triton.jit
def cat_columns(a_ptr, b_ptr, out_ptr, R, CA: tl.constexpr, CB: tl.constexpr,
                ROWS: tl.constexpr, COLS: tl.constexpr):
    rows, cols, mask = _tile(R, CA + CB, ROWS, COLS)
    first = cols < CA
    a = tl.load(a_ptr + rows * CA + cols, mask=mask & first, other=0)
    b = tl.load(b_ptr + rows * CB + cols - CA, mask=mask & (cols >= CA), other=0)
    tl.store(out_ptr + rows * (CA + CB) + cols, tl.where(first, a, b), mask=mask)


@triton.jit
def slice_scale(x_ptr, out_ptr, R, C: tl.constexpr, LO: tl.constexpr, HI: tl.constexpr,
                ROWS: tl.constexpr, COLS: tl.constexpr):
    rows, cols, mask = _tile(R, C - LO - HI, ROWS, COLS)
    x = tl.load(x_ptr + rows * C + cols + LO, mask=mask, other=0).to(tl.float32)
    tl.store(out_ptr + rows * (C - LO - HI) + cols, (x * 2).to(out_ptr.dtype.element_ty),
             mask=mask)


@triton.jit
def slice_add(x_ptr, out_ptr, R, C: tl.constexpr, LO: tl.constexpr, HI: tl.constexpr,
              ROWS: tl.constexpr, COLS: tl.constexpr):
    rows, cols, mask = _tile(R, C - LO - HI, ROWS, COLS)
    a = tl.load(x_ptr + rows * C + cols + LO, mask=mask, other=0).to(tl.float32)
    b = tl.load(x_ptr + rows * C + cols + LO - 1, mask=mask, other=0).to(tl.float32)
    tl.store(out_ptr + rows * (C - LO - HI) + cols, (a + b).to(out_ptr.dtype.element_ty),
             mask=mask)


@triton.jit
def nhwc_to_nchw_tail(s_ptr, y_ptr, g_ptr, out_ptr, R, C: tl.constexpr, HW: tl.constexpr,
                      ROWS: tl.constexpr, COLS: tl.constexpr):
    """ConvNeXt's block tail `s + (y * g).permute(0, 3, 1, 2)`: s and the output NCHW, y NHWC,
    g per channel; rows walk (n, c), columns (h, w)."""
    rows, cols, mask = _tile(R, HW, ROWS, COLS)
    n, c = rows // C, rows % C
    s = tl.load(s_ptr + rows * HW + cols, mask=mask, other=0).to(tl.float32)
    y = tl.load(y_ptr + n * (HW * C) + cols * C + c, mask=mask, other=0).to(tl.float32)
    g = tl.load(g_ptr + c, mask=rows < R, other=0).to(tl.float32)
    tl.store(out_ptr + rows * HW + cols, (s + y * g).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def pad_same(x_ptr, out_ptr, R, H: tl.constexpr, W: tl.constexpr, ROWS: tl.constexpr,
             COLS: tl.constexpr):
    """TF 'same' padding `F.pad(x, (0, 1, 0, 1))` of [.., H, W]: rows walk the output's
    (.., h), columns its w."""
    rows, cols, mask = _tile(R, W + 1, ROWS, COLS)
    h, plane = rows % (H + 1), rows // (H + 1)
    inside = (h < H) & (cols < W)
    x = tl.load(x_ptr + plane * (H * W) + h * W + cols, mask=mask & inside, other=0)
    tl.store(out_ptr + rows * (W + 1) + cols, x, mask=mask)
