"""
---
id: kernels/rms_norm/persistent
op: rms_norm
category: Normalization
dtypes: [bfloat16]
techniques: [persistent-kernel, grid-stride-loop, one-pass-reduction, row-in-registers, weight-resident, fp32-accumulation, single-rounding, int64-indexing]
params:
  PROGS_PER_SM: [2, 4, 8]
  max_warps: [4, 8, 16]
summary: min(T, PROGS_PER_SM x SMs) programs stride over the rows; the weight is converted to fp32 once per program and stays in registers; one row whole in registers per trip.
---
What it does: RMSNorm with a machine-sized grid: program p normalises rows p, p + P, p + 2P, ...
(P = min(T, PROGS_PER_SM * num_SMs)). The weight row is loaded and converted once per program
instead of once per row, and the launch has a fixed number of programs however many tokens
there are, so the per-program prologue (index math, weight load) is paid P times, not T times.

When to use it: The prefill shapes (2048-32768 tokens) are where it
can win over `rowwise` (one program per row): thousands of programs each re-read the weight
from L2 and pay a launch-slot each. At decode (1-256 tokens) P = T and it is `rowwise` with one
row per program. It keeps the whole row in registers like `rowwise`, so for rows beyond ~16k
columns `chunked_loop` (bounded registers) is the candidate. Which of the three wins on the H200
is for `aka kb verify --device cuda` to say; CPU timing under the interpreter means nothing.

Parameters: PROGS_PER_SM: programs per SM (2-8; more programs hide latency, fewer reuse the
weight more). max_warps caps num_warps = BLOCK / 512, and num_warps >= BLOCK / 2048 keeps the
resident weight and the row at <= 64 fp32 registers per thread each.
On the CPU interpreter the machine has 2 "SMs", so the small shapes take several trips per program
and the grid-stride loop is exercised.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"PROGS_PER_SM": 4, "max_warps": 8}


def _num_sms(device):
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 2


@triton.jit
def _rms_norm_persistent(x_ptr, w_ptr, y_ptr, n_rows, n_cols, stride_x, stride_y, eps, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    cols = tl.arange(0, BLOCK)
    cmask = cols < n_cols
    w = tl.load(w_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
    for row in range(pid, n_rows, nprog):
        r64 = tl.cast(row, tl.int64)
        x = tl.load(x_ptr + r64 * stride_x + cols, mask=cmask, other=0.0).to(tl.float32)
        rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
        tl.store(y_ptr + r64 * stride_y + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=cmask)


class ModelNew(nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        h = x.shape[-1]
        x2 = x.reshape(-1, h)
        n_rows = x2.shape[0]
        y = torch.empty((n_rows, h), dtype=x.dtype, device=x.device)
        block = triton.next_power_of_2(h)
        warps = max(min(AKA_PARAMS["max_warps"], max(1, block // 512)), block // 2048)
        grid = (max(1, min(n_rows, AKA_PARAMS["PROGS_PER_SM"] * _num_sms(x.device))),)
        _rms_norm_persistent[grid](x2, weight, y, n_rows, h, x2.stride(0), y.stride(0), self.eps,
                                   BLOCK=block, num_warps=warps)
        return y.view(x.shape)
