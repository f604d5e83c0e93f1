"""
---
id: kernels/fused_rms_norm_fp8_quant/chunked_three_pass
op: fused_rms_norm_fp8_quant
category: Fusion
dtypes: [bfloat16]
techniques: [epilogue-quantization, kernel-fusion, fp8-quantization, per-token-scaling, amax, saturation, chunked-reduction, two-pass-l2-resident, per-lane-partial-reductions, bounded-registers, fp32-accumulation, int64-indexing]
params:
  CHUNK: [256, 1024, 2048, 4096]
  max_warps: [4, 8]
summary: One program per row, three CHUNK-wide walks over it - per-lane sums of squares, then per-lane abs-max of y = x * rstd * w (recomputed in fp32, never rounded), then divide, clamp, fp8 store; the second and third reads of x come from L2. Registers bounded by CHUNK whatever H is.
---
What it does: RMSNorm + dynamic per-token fp8 quantisation of one row with a live state of one
CHUNK: pass 1 rstd, pass 2 amax of the unrounded fp32 y (recomputed from x and w, so y is never
stored), scale = max(amax / 448, 1 / (448 * 512)), pass 3 q = fp8(clamp(y / scale, +-448)) and
the scale store. The row is read from DRAM once; passes 2 and 3 hit the L2 (a 16384-wide bf16
row is 32 KB, and at ~2-4 rows per SM in flight the working set stays far below the H200's
60 MiB L2).

When to use it: `row_tile` and `persistent` hold the row in registers
(BLOCK_H = next_pow2(H) fp32 per row): one read and no recomputation, the better choice while
the row fits - all benchmark widths up to 16384 do at 16 warps. This kernel is for widths where
that tile spills (very wide projections, or a fused kernel that needs its registers elsewhere);
on the benchmark shapes expect it to lose by the two L2 re-reads and the recomputed y. CPU
timing under the interpreter is meaningless; pick by `aka kb verify --device cuda`.

Parameters: CHUNK: columns per trip (capped at next_pow2(H)); max_warps caps CHUNK / 256.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"CHUNK": 2048, "max_warps": 8}


@triton.jit
def _rms_fp8_chunked(x_ptr, w_ptr, q_ptr, s_ptr, n_cols, stride_x, stride_q, eps, CHUNK: tl.constexpr):
    FP8_MAX: tl.constexpr = 448.0
    row = tl.program_id(0).to(tl.int64)
    xr = x_ptr + row * stride_x
    qr = q_ptr + row * stride_q
    offs = tl.arange(0, CHUNK)
    ssq = tl.zeros([CHUNK], dtype=tl.float32)
    for start in range(0, n_cols, CHUNK):
        cols = start + offs
        x = tl.load(xr + cols, mask=cols < n_cols, other=0.0, eviction_policy="evict_last").to(tl.float32)
        ssq += x * x
    rstd = tl.rsqrt(tl.sum(ssq, axis=0) / n_cols + eps)
    amax = tl.zeros([CHUNK], dtype=tl.float32)
    for start in range(0, n_cols, CHUNK):
        cols = start + offs
        m = cols < n_cols
        x = tl.load(xr + cols, mask=m, other=0.0, eviction_policy="evict_last").to(tl.float32)
        w = tl.load(w_ptr + cols, mask=m, other=0.0).to(tl.float32)
        amax = tl.maximum(amax, tl.abs(x * rstd * w))
    scale = tl.maximum(tl.max(amax, axis=0) / FP8_MAX, 1.0 / (FP8_MAX * 512.0))
    for start in range(0, n_cols, CHUNK):
        cols = start + offs
        m = cols < n_cols
        x = tl.load(xr + cols, mask=m, other=0.0, eviction_policy="evict_first").to(tl.float32)
        w = tl.load(w_ptr + cols, mask=m, other=0.0).to(tl.float32)
        q = tl.clamp(x * rstd * w / scale, -FP8_MAX, FP8_MAX)
        tl.store(qr + cols, q.to(q_ptr.dtype.element_ty), mask=m)
    tl.store(s_ptr + row, scale)


class ModelNew(nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        h = x.shape[-1]
        x2 = x.reshape(-1, h)
        n_rows = x2.shape[0]
        q = torch.empty((n_rows, h), dtype=torch.float8_e4m3fn, device=x.device)
        scale = torch.empty((n_rows, 1), dtype=torch.float32, device=x.device)
        chunk = min(AKA_PARAMS["CHUNK"], triton.next_power_of_2(h))
        warps = min(AKA_PARAMS["max_warps"], max(1, chunk // 256))
        _rms_fp8_chunked[(n_rows,)](x2, weight, q, scale, h, x2.stride(0), q.stride(0), self.eps, CHUNK=chunk,
                                    num_warps=warps)
        return q.view(x.shape), scale.view(*x.shape[:-1], 1)
