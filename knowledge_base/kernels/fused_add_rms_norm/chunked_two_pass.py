"""
---
id: kernels/fused_add_rms_norm/chunked_two_pass
op: fused_add_rms_norm
category: Fusion
dtypes: [bfloat16]
techniques: [residual-fusion, kernel-fusion, chunked-reduction, two-pass-l2-resident, per-lane-partial-reductions, bounded-registers, fp32-accumulation, single-rounding, int64-indexing]
params:
  CHUNK: [256, 1024, 2048, 4096]
  max_warps: [4, 8]
summary: One program per row walking it in CHUNK pieces twice - pass 1 adds x + residual, stores the rounded sum as the new residual and accumulates per-lane sums of squares; pass 2 re-reads that stored residual (its own writes, still in L1/L2) and writes y. Registers bounded by CHUNK, not by H.
---
What it does: The residual add and RMSNorm of one row, with live state of one CHUNK whatever the
width. Pass 1: r = bf16(x + residual) is stored to r_out chunk by chunk while fp32 per-lane
partial sums of r^2 accumulate (the statistics of the rounded value, as the reference takes
them). Pass 2 reads r_out back (one stream instead of re-reading both x and residual) and stores
y = r * rstd * w. A debug_barrier between the passes orders the program's own pass-1 stores
before its pass-2 loads across all its threads.

When to use it: `row_tile` and `persistent` hold the whole row in
registers: one read of each input, but BLOCK_H = next_pow2(H) fp32 per row (16384 columns need
>= 8 warps to avoid spills). This kernel trades an extra H-element read (from L2: the row was
written microseconds before) for bounded registers, so it is the candidate for very wide rows
(16k-32k hidden sizes that batch conversion may bring) or when a larger model shares the SM.
On the benchmark widths (2048-8192) expect it to lose to `row_tile` by roughly the extra read;
CPU interpreter timing says nothing about that - pick by `aka kb verify --device cuda`.

Parameters: CHUNK: columns per trip (a power of two, capped at next_pow2(H) so narrow rows have
no all-masked lanes). max_warps caps num_warps = CHUNK / 256 (>= 8 fp32 per thread per tensor).
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"CHUNK": 2048, "max_warps": 8}


@triton.jit
def _add_rms_norm_chunked(x_ptr, r_ptr, w_ptr, y_ptr, ro_ptr, n_cols, stride_x, stride_r, stride_y, stride_ro,
                          eps, CHUNK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    xr = x_ptr + row * stride_x
    rr = r_ptr + row * stride_r
    ror = ro_ptr + row * stride_ro
    yr = y_ptr + row * stride_y
    offs = tl.arange(0, CHUNK)
    acc = tl.zeros([CHUNK], dtype=tl.float32)
    for start in range(0, n_cols, CHUNK):
        cols = start + offs
        m = cols < n_cols
        x = tl.load(xr + cols, mask=m, other=0.0, eviction_policy="evict_first").to(tl.float32)
        res = tl.load(rr + cols, mask=m, other=0.0, eviction_policy="evict_first").to(tl.float32)
        s = (x + res).to(ro_ptr.dtype.element_ty)
        tl.store(ror + cols, s, mask=m, eviction_policy="evict_last")
        sf = s.to(tl.float32)
        acc += sf * sf
    rstd = tl.rsqrt(tl.sum(acc, axis=0) / n_cols + eps)
    tl.debug_barrier()  # pass-1 stores of every thread before any pass-2 load of the same row
    for start in range(0, n_cols, CHUNK):
        cols = start + offs
        m = cols < n_cols
        s = tl.load(ror + cols, mask=m, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=m, other=0.0).to(tl.float32)
        tl.store(yr + cols, (s * rstd * w).to(y_ptr.dtype.element_ty), mask=m)


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
        chunk = min(AKA_PARAMS["CHUNK"], triton.next_power_of_2(h))
        warps = min(AKA_PARAMS["max_warps"], max(1, chunk // 256))
        _add_rms_norm_chunked[(n_rows,)](x2, r2, weight, y, r_out, h, x2.stride(0), r2.stride(0), y.stride(0),
                                         r_out.stride(0), self.eps, CHUNK=chunk, num_warps=warps)
        return y.view(x.shape), r_out.view(x.shape)
