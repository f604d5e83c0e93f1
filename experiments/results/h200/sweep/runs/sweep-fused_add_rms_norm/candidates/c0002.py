"""
---
id: kernels/fused_add_rms_norm/persistent
op: fused_add_rms_norm
category: Fusion
dtypes: [bfloat16]
techniques: [residual-fusion, kernel-fusion, persistent-kernel, grid-stride-loop, one-pass-reduction, row-in-registers, single-rounding, int64-indexing]
params:
  PROGS_PER_SM: [2, 4, 8]
  max_warps: [4, 8, 16]
summary: A machine-sized grid (PROGS_PER_SM x SMs programs) striding over rows; the weight is loaded once per program; one row in registers per trip.
---
Design. min(T, PROGS_PER_SM * num_SMs) programs; program p handles rows p, p + P, p + 2P, ...
The weight row is converted to fp32 once and stays in registers for every row the program
touches, instead of being re-read by each of T programs. Per row: x and residual loaded, added in
fp32, rounded once to bf16 and stored as the new residual; the RMS statistics are taken from
the rounded value (as the reference does), still in registers; y stored. One read of each input,
one write of each output. BLOCK_H = next_pow2(H), masked, divide by H.
The persistent loop needs bytes in flight: a wide row (4096-8192 bf16, 16-32 KB across x and
residual) per trip at 2-8 programs per SM keeps the loads deep enough; for narrow rows the
row-tile family is the better candidate. num_warps = min(max_warps, BLOCK_H / 512), and at
least BLOCK_H / 2048 so the resident weight plus one row stay within registers.
On CPU (the Triton interpreter) the "machine" has 2 SMs, so the small shapes run several
grid-stride trips per program and the loop is actually exercised.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {'PROGS_PER_SM': 4, 'max_warps': 8}  # set by the offline proposer


def _num_sms(device):
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 2


@triton.jit
def _add_rms_norm_persistent(x_ptr, r_ptr, w_ptr, y_ptr, ro_ptr, n_rows, n_cols,
                             stride_x, stride_r, stride_y, stride_ro, eps, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    cols = tl.arange(0, BLOCK)
    cmask = cols < n_cols
    w = tl.load(w_ptr + cols, mask=cmask, other=0.0).to(tl.float32)  # once per program
    for row in range(pid, n_rows, nprog):
        r64 = tl.cast(row, tl.int64)
        x = tl.load(x_ptr + r64 * stride_x + cols, mask=cmask, other=0.0).to(tl.float32)
        res = tl.load(r_ptr + r64 * stride_r + cols, mask=cmask, other=0.0).to(tl.float32)
        s = (x + res).to(ro_ptr.dtype.element_ty)
        tl.store(ro_ptr + r64 * stride_ro + cols, s, mask=cmask)
        sf = s.to(tl.float32)
        rstd = tl.rsqrt(tl.sum(sf * sf, axis=0) / n_cols + eps)
        tl.store(y_ptr + r64 * stride_y + cols, (sf * rstd * w).to(y_ptr.dtype.element_ty), mask=cmask)


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
        # the weight stays resident: keep <= 64 fp32 per thread per row tensor (no spills at 16384)
        warps = max(min(AKA_PARAMS["max_warps"], max(1, block // 512)), block // 2048)
        grid = (max(1, min(n_rows, AKA_PARAMS["PROGS_PER_SM"] * _num_sms(x.device))),)
        _add_rms_norm_persistent[grid](x2, r2, weight, y, r_out, n_rows, h, x2.stride(0), r2.stride(0),
                                       y.stride(0), r_out.stride(0), self.eps, BLOCK=block, num_warps=warps)
        return y.view(x.shape), r_out.view(x.shape)
