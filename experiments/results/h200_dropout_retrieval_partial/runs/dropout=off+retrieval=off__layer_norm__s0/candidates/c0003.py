"""
---
id: kernels/layer_norm/persistent
op: layer_norm
category: Normalization
dtypes: [bfloat16]
techniques: [persistent-kernel, grid-stride-loop, two-pass-variance, row-in-registers, fp32-accumulation, single-rounding, int64-indexing]
params:
  PROGS_PER_SM: [2, 4, 8]
  max_warps: [4, 8, 16]
summary: PROGS_PER_SM x SMs programs stride over rows; weight and bias converted to fp32 once per program; per row, mean and centred variance from registers.
---
Design. The affine parameters are two extra rows of input per program in a one-row-per-program
grid; here min(T, PROGS_PER_SM * num_SMs) programs load them once and keep them in fp32
registers while striding over rows p, p + P, ... Each row is read once; mean, then the biased
variance of the centred values (padded lanes zeroed), both in fp32 from registers; one rounding
at the store. Best suited to the wide rows (4096-8192) at thousands of tokens; narrow rows give
each trip little in flight (see the row-tile family). num_warps = min(max_warps,
BLOCK_H / 512), and at least BLOCK_H / 2048 (weight, bias and one row resident).
On CPU (the Triton interpreter) the machine is taken as 2 SMs so the grid-stride loop runs
several trips on the small shapes.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {'PROGS_PER_SM': 8, 'max_warps': 4}  # set by the offline proposer


def _num_sms(device):
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 2


@triton.jit
def _layer_norm_persistent(x_ptr, w_ptr, b_ptr, y_ptr, n_rows, n_cols, stride_x, stride_y, eps,
                           BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    cols = tl.arange(0, BLOCK)
    cmask = cols < n_cols
    w = tl.load(w_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
    for row in range(pid, n_rows, nprog):
        r64 = tl.cast(row, tl.int64)
        x = tl.load(x_ptr + r64 * stride_x + cols, mask=cmask, other=0.0).to(tl.float32)
        mean = tl.sum(x, axis=0) / n_cols
        xc = tl.where(cmask, x - mean, 0.0)
        rstd = tl.rsqrt(tl.sum(xc * xc, axis=0) / n_cols + eps)
        tl.store(y_ptr + r64 * stride_y + cols, (xc * rstd * w + b).to(y_ptr.dtype.element_ty), mask=cmask)


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
        # the weight stays resident: keep <= 64 fp32 per thread per row tensor (no spills at 16384)
        warps = max(min(AKA_PARAMS["max_warps"], max(1, block // 512)), block // 2048)
        grid = (max(1, min(n_rows, AKA_PARAMS["PROGS_PER_SM"] * _num_sms(x.device))),)
        _layer_norm_persistent[grid](x2, weight, bias, y, n_rows, h, x2.stride(0), y.stride(0), self.eps,
                                     BLOCK=block, num_warps=warps)
        return y.view(x.shape)
