"""
---
id: kernels/gated_rms_norm/chunked_loop
op: gated_rms_norm
category: Fusion
dtypes: [bfloat16]
techniques: [kernel-fusion, chunked-reduction, two-pass-l2-resident, per-lane-partial-reductions, bounded-registers, fp32-accumulation, single-rounding, int64-indexing]
params:
  CHUNK: [128, 512, 1024, 2048]
  max_warps: [4, 8]
summary: One program per row walking it in CHUNK pieces twice; pass 1 accumulates per-lane sums of squares of x (norm-then-gate) or of x * silu(z) (gate-then-norm), pass 2 re-reads x and z from L2, recomputes the gate and stores y. Registers bounded by CHUNK.
---
What it does: Gated RMSNorm of one row per program with a live state of one CHUNK. The gate
silu(z) is recomputed in pass 2 rather than kept, so nothing of size H lives in registers; the
norm_before_gate switch is a constexpr, so each variant compiles only its own arithmetic.

When to use it: `row_tile` and `persistent` hold [ROWS, BLOCK_H] tiles
and win on the 128-wide per-head rows (Qwen3-Next) that dominate this op: there, one row per
program would launch up to 10^6 tiny programs, so expect this kernel to lose badly on those
shapes. It is the candidate for the wide Mamba2 rows (1024-5120 and wider intermediate sizes
with n_groups = 1), where a whole-row tile costs registers and the second read of x and z is an
L2 hit. CPU interpreter timing is meaningless; pick by `aka kb verify --device cuda`.

Parameters: CHUNK: columns per trip, capped at next_pow2(H); max_warps caps CHUNK / 256 warps.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"CHUNK": 1024, "max_warps": 8}


@triton.jit
def _silu(z):
    return z / (1.0 + tl.exp(-z))


@triton.jit
def _gated_rms_chunked(x_ptr, z_ptr, w_ptr, y_ptr, n_cols, stride_x, stride_z, stride_y, eps,
                       NORM_BEFORE_GATE: tl.constexpr, CHUNK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    xr = x_ptr + row * stride_x
    zr = z_ptr + row * stride_z
    yr = y_ptr + row * stride_y
    offs = tl.arange(0, CHUNK)
    acc = tl.zeros([CHUNK], dtype=tl.float32)
    for start in range(0, n_cols, CHUNK):
        cols = start + offs
        m = cols < n_cols
        x = tl.load(xr + cols, mask=m, other=0.0, eviction_policy="evict_last").to(tl.float32)
        if not NORM_BEFORE_GATE:
            z = tl.load(zr + cols, mask=m, other=0.0, eviction_policy="evict_last").to(tl.float32)
            x = x * _silu(z)
        acc += x * x
    rstd = tl.rsqrt(tl.sum(acc, axis=0) / n_cols + eps)
    for start in range(0, n_cols, CHUNK):
        cols = start + offs
        m = cols < n_cols
        x = tl.load(xr + cols, mask=m, other=0.0, eviction_policy="evict_first").to(tl.float32)
        g = _silu(tl.load(zr + cols, mask=m, other=0.0, eviction_policy="evict_first").to(tl.float32))
        w = tl.load(w_ptr + cols, mask=m, other=0.0).to(tl.float32)
        if NORM_BEFORE_GATE:
            y = x * rstd * w * g
        else:
            y = x * g * rstd * w
        tl.store(yr + cols, y.to(y_ptr.dtype.element_ty), mask=m)


class ModelNew(nn.Module):
    def __init__(self, eps: float = 1e-6, norm_before_gate: bool = True):
        super().__init__()
        self.eps = eps
        self.norm_before_gate = norm_before_gate

    def forward(self, x, z, weight):
        h = x.shape[-1]
        x2 = x.reshape(-1, h)
        z2 = z.reshape(-1, h)
        n_rows = x2.shape[0]
        y = torch.empty((n_rows, h), dtype=x.dtype, device=x.device)
        chunk = min(AKA_PARAMS["CHUNK"], triton.next_power_of_2(h))
        warps = min(AKA_PARAMS["max_warps"], max(1, chunk // 256))
        _gated_rms_chunked[(n_rows,)](x2, z2, weight, y, h, x2.stride(0), z2.stride(0), y.stride(0), self.eps,
                                      NORM_BEFORE_GATE=self.norm_before_gate, CHUNK=chunk, num_warps=warps)
        return y.view(x.shape)
