"""
---
id: kernels/silu_and_mul/rowmajor
op: silu_and_mul
category: Activation
dtypes: [bfloat16]
techniques: [vectorized-access, elementwise-fusion, row-major-grid, fp32-accumulation, single-rounding, int64-indexing]
params:
  BLOCK: [512, 1024, 2048, 4096]
  num_warps: [2, 4, 8]
summary: A 1-D grid walked row-major (program p takes row p // nb, column block p % nb), so consecutive programs stream consecutive addresses; fp32 silu(g) * u, one rounding.
---
Design. The same work split as grid2d (a row and a BLOCK of columns per program), launched so that
programs the GPU schedules together touch neighbouring memory. grid2d put rows on grid axis 0,
which the hardware walks fastest: programs in flight together read one column block of
consecutive rows, 2I elements apart (57 KB at I = 14336), and the DRAM pages they open serve one
block each. Here program p takes row p // nb and column block p % nb (nb = cdiv(I, BLOCK)): the
programs in flight read a contiguous stretch of gate and of up. torch.compile's flat pointwise
kernel streams the same way, and was 4-5% faster than grid2d at every large shape on the H200
(timing v4, session 6: 8192 x 18944, 211 us against 224; grid2d at 0.98 of the measured copy
ceiling, which a read-heavy stream can exceed). Prediction: this closes that gap.
The 1-D grid has no 65535 limit on either factor. Row offsets int64 (T * 2I reaches 2**28).
silu(g) = g / (1 + exp(-g)) in fp32 (exp(-g) overflowing to inf for g < -88 gives the right -0).
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {'BLOCK': 1024, 'num_warps': 4}  # set by the offline proposer


@triton.jit
def _silu_mul_rowmajor(x_ptr, y_ptr, d, stride_x, stride_y, nb, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    row = (pid // nb).to(tl.int64)
    cols = (pid % nb) * BLOCK + tl.arange(0, BLOCK)
    m = cols < d
    g = tl.load(x_ptr + row * stride_x + cols, mask=m, other=0.0).to(tl.float32)
    u = tl.load(x_ptr + row * stride_x + d + cols, mask=m, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * stride_y + cols, (g / (1.0 + tl.exp(-g)) * u).to(y_ptr.dtype.element_ty), mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        d = x.shape[-1] // 2
        x2 = x.reshape(-1, x.shape[-1])
        rows = x2.shape[0]
        y = torch.empty((rows, d), dtype=x.dtype, device=x.device)
        block = AKA_PARAMS["BLOCK"]
        nb = triton.cdiv(d, block)
        if rows * nb:
            _silu_mul_rowmajor[(rows * nb,)](x2, y, d, x2.stride(0), y.stride(0), nb, BLOCK=block,
                                             num_warps=AKA_PARAMS["num_warps"])
        return y.view(*x.shape[:-1], d)
