"""
---
id: kernels/layer_norm/row_tile
op: layer_norm
category: Normalization
dtypes: [bfloat16]
techniques: [two-pass-variance, row-in-registers, one-pass-reduction, multi-row-per-program, 2d-tiling, fp32-accumulation, single-rounding, int64-indexing]
params:
  TILE: [2048, 4096, 8192]
  max_warps: [4, 8, 16]
summary: A [ROWS, BLOCK_H] tile per program; mean, then the variance of the centred values, both from registers (exact two-pass numerics, one DRAM read); affine output rounded once.
---
Design. Every benchmark width (1152-8192) fits in registers, so the row is read once and both
statistics come from registers: the mean, then the biased variance of the centred values
(zeroed on padded lanes with tl.where, otherwise masked lanes would add (BLOCK_H - H) * mean^2).
This is the two-pass formula without a second read; E[x^2] - E[x]^2 would lose digits on the
per-token offsets the inputs carry, and on a row with a large constant offset it can come out
negative, so rsqrt(var + eps) gives NaN for that row. ROWS = TILE // BLOCK_H rows per program (at least 1) so the
narrow vision-tower rows (1152, 1280) still give each program several KB; w and b are loaded
once per program. num_warps = min(max_warps, tile elements / 512).
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"TILE": 4096, "max_warps": 8}


@triton.jit
def _layer_norm_tile(x_ptr, w_ptr, b_ptr, y_ptr, n_rows, n_cols, stride_x, stride_y, eps,
                     ROWS: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    cmask = cols < n_cols
    mask = (rows < n_rows)[:, None] & cmask[None, :]
    r64 = rows.to(tl.int64)[:, None]
    x = tl.load(x_ptr + r64 * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=1) / n_cols
    xc = tl.where(cmask[None, :], x - mean[:, None], 0.0)
    var = tl.sum(xc * xc, axis=1) / n_cols
    rstd = tl.rsqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
    y = xc * rstd[:, None] * w[None, :] + b[None, :]
    tl.store(y_ptr + r64 * stride_y + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, eps: float = 1e-5):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight, bias):
        h = x.shape[-1]
        x2 = x.reshape(-1, h)
        n_rows = x2.shape[0]
        y = torch.empty((n_rows, h), dtype=x.dtype, device=x.device)
        block = triton.next_power_of_2(h)
        rows = max(1, AKA_PARAMS["TILE"] // block)
        warps = min(AKA_PARAMS["max_warps"], max(2, rows * block // 512))
        _layer_norm_tile[(triton.cdiv(n_rows, rows),)](x2, weight, bias, y, n_rows, h, x2.stride(0), y.stride(0),
                                                       self.eps, ROWS=rows, BLOCK=block, num_warps=warps)
        return y.view(x.shape)
