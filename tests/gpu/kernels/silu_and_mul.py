"""SwiGLU: a 2-D grid of (row, column block); contiguous 16-byte-vectorisable loads of gate and up."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _silu_mul(x_ptr, y_ptr, d, stride_x, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = cols < d
    g = tl.load(x_ptr + row * stride_x + cols, mask=m, other=0.0).to(tl.float32)
    u = tl.load(x_ptr + row * stride_x + d + cols, mask=m, other=0.0).to(tl.float32)
    out = g / (1.0 + tl.exp(-g)) * u
    tl.store(y_ptr + row * stride_y + cols, out.to(y_ptr.dtype.element_ty), mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        d = x.shape[-1] // 2
        x2 = x.reshape(-1, x.shape[-1])
        y = torch.empty((x2.shape[0], d), dtype=x.dtype, device=x.device)
        block = 1024
        _silu_mul[(x2.shape[0], triton.cdiv(d, block))](x2, y, d, x2.stride(0), y.stride(0), BLOCK=block, num_warps=4)
        return y.view(*x.shape[:-1], d)
