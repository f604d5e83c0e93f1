"""
---
id: kernels/fused_add_rms_norm/row_tile
op: fused_add_rms_norm
category: Fusion
dtypes: [bfloat16]
techniques: [residual-fusion, kernel-fusion, one-pass-reduction, row-in-registers, multi-row-per-program, 2d-tiling, single-rounding, int64-indexing]
params:
  TILE: [2048, 4096, 8192]
  max_warps: [4, 8, 16]
summary: A [ROWS, BLOCK_H] tile per program (ROWS = TILE // BLOCK_H, at least 1); r = bf16(x + residual) stored, then RMSNorm of the stored value from registers.
---
Design. Each program owns ROWS whole rows (BLOCK_H = next_pow2(H) columns, masked), so x and
residual are read once and r and y written once: 3 reads + 2 writes of T*H bf16, the minimum.
The sum x + residual runs in fp32 and is rounded once to bf16; the statistics are taken from
that rounded value (what the next layer's residual stream holds and what the reference
normalises), kept in registers, so there is no re-read. ROWS > 1 only for narrow rows
(H <= TILE / 2), where a single row is too little work per program; wide rows (4096-8192) get
one row per program and 8-16 warps. The weight is loaded once per program and broadcast over
the tile's rows. Row offsets are int64 (T*H passes 2**31 at long prefill of wide models).
num_warps = min(max_warps, tile elements / 512): about 16 fp32 values per thread per tensor.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {'TILE': 4096, 'max_warps': 8}  # set by the offline proposer


@triton.jit
def _add_rms_norm_tile(x_ptr, r_ptr, w_ptr, y_ptr, ro_ptr, n_rows, n_cols,
                       stride_x, stride_r, stride_y, stride_ro, eps,
                       ROWS: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    cmask = cols < n_cols
    mask = (rows < n_rows)[:, None] & cmask[None, :]
    r64 = rows.to(tl.int64)[:, None]
    x = tl.load(x_ptr + r64 * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    res = tl.load(r_ptr + r64 * stride_r + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    s = (x + res).to(ro_ptr.dtype.element_ty)  # the new residual stream, rounded once
    tl.store(ro_ptr + r64 * stride_ro + cols[None, :], s, mask=mask)
    sf = s.to(tl.float32)
    w = tl.load(w_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(sf * sf, axis=1) / n_cols + eps)  # masked lanes are 0: divide by H
    y = sf * rstd[:, None] * w[None, :]
    tl.store(y_ptr + r64 * stride_y + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, residual, weight):
        h = x.shape[-1]
        x2 = x.reshape(-1, h)
        r2 = residual.reshape(-1, h)
        n_rows = x2.shape[0]
        y = torch.empty((n_rows, h), dtype=x.dtype, device=x.device)
        r_out = torch.empty((n_rows, h), dtype=x.dtype, device=x.device)
        block = triton.next_power_of_2(h)
        rows = max(1, AKA_PARAMS["TILE"] // block)
        warps = min(AKA_PARAMS["max_warps"], max(2, rows * block // 512))
        _add_rms_norm_tile[(triton.cdiv(n_rows, rows),)](
            x2, r2, weight, y, r_out, n_rows, h, x2.stride(0), r2.stride(0), y.stride(0), r_out.stride(0),
            self.eps, ROWS=rows, BLOCK=block, num_warps=warps)
        return y.view(x.shape), r_out.view(x.shape)
