"""
---
id: kernels/l2_norm/row_tile
op: l2_norm
category: Normalization
dtypes: [bfloat16]
techniques: [multi-row-per-program, 2d-tiling, one-pass-reduction, row-in-registers, fp32-accumulation, single-rounding, int64-indexing]
params:
  TILE: [2048, 4096, 8192]
  max_warps: [2, 4, 8]
summary: x viewed as [T*heads, D] rows; ROWS = TILE // BLOCK_D rows per program in one [ROWS, BLOCK_D] tile; y = x * rsqrt(sum(x^2) + eps) in fp32.
---
Design. Each head vector (D = 128) is a row; one row per program would be 256 bytes of work and
a grid of up to 524288 programs, so each program takes a [ROWS, BLOCK_D] tile (32 rows, 8 KB of
bf16 at the default TILE), reduces along D in fp32 and stores once. eps is added to the sum of
squares (not the mean), as the reference and FLA's l2norm do. Heads are contiguous inside a
token, so the flat row view has no gaps and tiles cross tokens freely. Row offsets int64.
num_warps = min(max_warps, tile elements / 512). Few rows (decode): ROWS halves until the grid has
at least 4 programs per SM. Measured on the H200 before that change (timing v4, session 6): 1.23 us
against torch.compile's 1.00 at 1 token and 2.48 against 1.96 at 256 tokens x 16 heads (128
programs of 32 rows), while large shapes were at 0.86-0.95 of the measured ceiling.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {'TILE': 4096, 'max_warps': 4}  # set by the offline proposer


@triton.jit
def _l2_norm_tile(x_ptr, y_ptr, n_rows, n_cols, stride_x, stride_y, eps, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    mask = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
    r64 = rows.to(tl.int64)[:, None]
    x = tl.load(x_ptr + r64 * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    rnorm = tl.rsqrt(tl.sum(x * x, axis=1) + eps)
    tl.store(y_ptr + r64 * stride_y + cols[None, :], (x * rnorm[:, None]).to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x):
        d = x.shape[-1]
        x2 = x.reshape(-1, d)
        n_rows = x2.shape[0]
        y = torch.empty((n_rows, d), dtype=x.dtype, device=x.device)
        block = triton.next_power_of_2(d)
        rows = max(1, AKA_PARAMS["TILE"] // block)
        # Few rows (decode): fewer rows per program, so at least ~4 programs per SM keep loads in
        # flight on every SM (one 32-row program per 32 rows left most SMs idle at 256 x 16 heads).
        sms = torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 1
        while rows > 1 and triton.cdiv(n_rows, rows) < 4 * sms:
            rows //= 2
        warps = min(AKA_PARAMS["max_warps"], max(1, rows * block // 512))
        _l2_norm_tile[(triton.cdiv(n_rows, rows),)](x2, y, n_rows, d, x2.stride(0), y.stride(0), self.eps,
                                                    ROWS=rows, BLOCK=block, num_warps=warps)
        return y.view(x.shape)
