"""
---
id: kernels/rms_norm_backward/column_dweight
op: rms_norm_backward
category: Normalization
dtypes: [bfloat16]
techniques: [saved-statistics, multi-row-per-program, row-in-registers, column-parallel-reduction, deterministic-reduction, no-partials-buffer, fp32-accumulation, int64-indexing, masking]
params:
  ROWS: [1, 2, 4]
  COLS: [32, 64, 128]
  ROW_CHUNK: [16, 32, 64]
summary: Two buffer-free launches - dx from [ROWS, H] row tiles with the saved rstd, then dweight by a column-parallel walk over all rows in [ROW_CHUNK, COLS] slabs (fixed order, deterministic). Reads dy and x twice; the simple baseline against persistent_rows.
---
What it does: RMSNorm backward as two independent launches that share no scratch buffer.
Launch 1 (dx): one program per ROWS rows holds each [ROWS, H_PAD] tile of dy and x in fp32,
forms g = dy * w, xhat = x * rstd, c = mean(g * xhat) and dx = rstd * (g - xhat * c), rounded
once. Launch 2 (dweight): one program per COLS columns walks all T rows in ROW_CHUNK-row slabs,
loading [ROW_CHUNK, COLS] of dy and x plus ROW_CHUNK rstd values, and accumulates
sum_t dy * x * rstd in an fp32 [ROW_CHUNK, COLS] register tile, reduced along rows at the end and
rounded once. The order of the sum is fixed, so dweight is bit-reproducible run to run.

When to use it: `persistent_rows` reads dy and x once: each persistent
program accumulates its rows' dweight contribution while computing dx and writes one fp32
partial row, summed by a small second launch. This kernel reads dy and x twice (10 bytes per
element moved instead of 6), so expect it to lose at every benchmark shape on bandwidth alone;
it is kept as the simple, buffer-free, deterministic baseline, and for the case where dweight is
not needed at all (frozen norm weights: skip launch 2) or dx must be produced before dweight is
reduced (overlap with the next layer's backward). Launch 2 has only H / COLS programs (32-128 at
H = 4096), too few to fill 132 SMs at COLS = 64 - the second reason to expect a loss. CPU timing
under the interpreter is meaningless; `aka kb verify --device cuda` gives the H200 figures.

Parameters: ROWS: rows per dx program (1 for wide H); COLS: dweight columns per program;
ROW_CHUNK: rows per slab of the dweight walk.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"ROWS": 1, "COLS": 64, "ROW_CHUNK": 32}


@triton.jit
def _dx_rows(dy_ptr, x_ptr, w_ptr, rstd_ptr, dx_ptr, n_rows, n_cols, stride_dy, stride_x, stride_dx,
             ROWS: tl.constexpr, H_PAD: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, H_PAD)
    cmask = cols < n_cols
    rmask = rows < n_rows
    mask = rmask[:, None] & cmask[None, :]
    r64 = rows.to(tl.int64)[:, None]
    dy = tl.load(dy_ptr + r64 * stride_dy + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    x = tl.load(x_ptr + r64 * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
    rstd = tl.load(rstd_ptr + rows, mask=rmask, other=0.0)[:, None]
    g = dy * w[None, :]
    xhat = x * rstd
    c = tl.sum(g * xhat, axis=1)[:, None] / n_cols
    dx = rstd * (g - xhat * c)
    tl.store(dx_ptr + r64 * stride_dx + cols[None, :], dx.to(dx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _dweight_cols(dy_ptr, x_ptr, rstd_ptr, dw_ptr, n_rows, n_cols, stride_dy, stride_x,
                  COLS: tl.constexpr, ROW_CHUNK: tl.constexpr):
    cols = tl.program_id(0) * COLS + tl.arange(0, COLS)
    cmask = cols < n_cols
    acc = tl.zeros([ROW_CHUNK, COLS], dtype=tl.float32)
    for r0 in range(0, n_rows, ROW_CHUNK):
        rows = r0 + tl.arange(0, ROW_CHUNK)
        rmask = rows < n_rows
        mask = rmask[:, None] & cmask[None, :]
        r64 = rows.to(tl.int64)[:, None]
        dy = tl.load(dy_ptr + r64 * stride_dy + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        x = tl.load(x_ptr + r64 * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        rstd = tl.load(rstd_ptr + rows, mask=rmask, other=0.0)
        acc += dy * x * rstd[:, None]
    tl.store(dw_ptr + cols, tl.sum(acc, axis=0).to(dw_ptr.dtype.element_ty), mask=cmask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, dy, x, weight, rstd):
        t, h = x.shape
        p = AKA_PARAMS
        dy = dy.contiguous()
        x = x.contiguous()
        rstd = rstd.contiguous().to(torch.float32)
        dx = torch.empty_like(x)
        dweight = torch.empty_like(weight)
        h_pad = triton.next_power_of_2(h)
        rows = p["ROWS"]
        warps = min(16, max(1, rows * h_pad // 512))
        _dx_rows[(triton.cdiv(t, rows),)](dy, x, weight, rstd, dx, t, h, dy.stride(0), x.stride(0), dx.stride(0),
                                          ROWS=rows, H_PAD=h_pad, num_warps=warps)
        cols = p["COLS"]
        _dweight_cols[(triton.cdiv(h, cols),)](dy, x, rstd, dweight, t, h, dy.stride(0), x.stride(0), COLS=cols,
                                               ROW_CHUNK=p["ROW_CHUNK"], num_warps=4)
        return {"dx": dx, "dweight": dweight}
