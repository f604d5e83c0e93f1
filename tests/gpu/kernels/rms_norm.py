"""Row-wise RMSNorm: the whole row in registers, fp32 statistics, several rows per program when
rows are short (decode) so one launch keeps enough bytes in flight."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _rms_norm_rows(x_ptr, w_ptr, y_ptr, n_rows, n_cols, stride_x, stride_y, eps,
                   BLOCK: tl.constexpr, ROWS: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    cmask = cols < n_cols
    w = tl.load(w_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
    for r in tl.static_range(ROWS):
        row = pid * ROWS + r
        if row < n_rows:
            x = tl.load(x_ptr + row.to(tl.int64) * stride_x + cols, mask=cmask, other=0.0).to(tl.float32)
            rstd = tl.math.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
            tl.store(y_ptr + row.to(tl.int64) * stride_y + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=cmask)


class ModelNew(nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        x2 = x.reshape(-1, x.shape[-1])
        y = torch.empty_like(x2)
        n_rows, n_cols = x2.shape
        block = triton.next_power_of_2(n_cols)
        rows = 1 if n_rows >= 4096 or block >= 4096 else 4
        warps = min(16, max(1, block // 512))
        _rms_norm_rows[(triton.cdiv(n_rows, rows),)](x2, weight, y, n_rows, n_cols, x2.stride(0), y.stride(0),
                                                     self.eps, BLOCK=block, ROWS=rows, num_warps=warps)
        return y.view_as(x)
