"""
---
id: kernels/layer_norm/welford_chunked
op: layer_norm
category: Normalization
dtypes: [bfloat16]
techniques: [welford-reduction, chunked-reduction, per-lane-partial-reductions, parallel-variance-combine, two-pass-l2-resident, bounded-registers, fp32-accumulation, single-rounding, int64-indexing]
params:
  CHUNK: [256, 1024, 2048, 4096]
  max_warps: [4, 8]
summary: One program per row; pass 1 keeps a per-lane Welford state (count, mean, M2) updated chunk by chunk and merges the lanes with the many-group form of Chan's parallel combine; pass 2 re-reads the row (L2) and writes the affine output. Numerically stable mean/variance with registers bounded by CHUNK.
---
What it does: LayerNorm whose statistics come from Welford's online algorithm instead of the
two-pass "mean, then centred variance" over a row held in registers. Each lane j of a CHUNK-wide
vector sees columns j, j + CHUNK, ...; it updates (n, mean, M2) per element it owns:
delta = x - mean; mean += delta / n; M2 += delta * (x - mean). The CHUNK lane states are merged
in one step with the many-group form of Chan's combine: mean = sum(n_j * mean_j) / H and
M2 = sum(M2_j) + sum(n_j * (mean_j - mean)^2); empty lanes (n_j = 0) contribute nothing and
the second sum only sees small differences of lane means, so nothing cancels. var = M2 / H.
(A pairwise tl.reduce with a custom combine computes the same; under the CPU interpreter it made
the correctness stage of `aka kb verify` take 191 s, against 12 s with these tl.sum reductions.)
Pass 2 re-reads x chunk by chunk (an L2 hit) and stores (x - mean) * rstd * w + b, rounded once.

When to use it: Welford is stable without holding the row: it never
forms E[x^2] - E[x]^2, so per-token offsets (|mean| >> std) do not cancel digits, and it needs
no second pass over the data for the variance. `row_tile` and `persistent` get the exact
two-pass numerics from registers with one DRAM read, which is the better deal for rows that fit
(all benchmark widths, 1152-8192); this kernel is the fallback for rows too wide to hold (or
where register pressure must stay low), costing an L2 re-read and one divide per element in
pass 1. Expect it to lose to `row_tile` on the benchmark shapes; CPU timing under the
interpreter is meaningless - pick by `aka kb verify --device cuda`.

Parameters: CHUNK: lanes per trip (capped at next_pow2(H)); max_warps caps CHUNK / 256 warps.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"CHUNK": 2048, "max_warps": 8}


@triton.jit
def _layer_norm_welford(x_ptr, w_ptr, b_ptr, y_ptr, n_cols, stride_x, stride_y, eps, CHUNK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    xr = x_ptr + row * stride_x
    yr = y_ptr + row * stride_y
    offs = tl.arange(0, CHUNK)
    mean = tl.zeros([CHUNK], dtype=tl.float32)
    m2 = tl.zeros([CHUNK], dtype=tl.float32)
    cnt = tl.zeros([CHUNK], dtype=tl.float32)
    for start in range(0, n_cols, CHUNK):
        cols = start + offs
        m = cols < n_cols
        x = tl.load(xr + cols, mask=m, other=0.0, eviction_policy="evict_last").to(tl.float32)
        cnt_new = cnt + tl.where(m, 1.0, 0.0)
        delta = x - mean
        mean = tl.where(m, mean + delta / tl.maximum(cnt_new, 1.0), mean)
        m2 = tl.where(m, m2 + delta * (x - mean), m2)
        cnt = cnt_new
    mu = tl.sum(cnt * mean, axis=0) / n_cols
    dm = mean - mu
    ssq = tl.sum(m2, axis=0) + tl.sum(cnt * dm * dm, axis=0)
    rstd = tl.rsqrt(ssq / n_cols + eps)
    for start in range(0, n_cols, CHUNK):
        cols = start + offs
        m = cols < n_cols
        x = tl.load(xr + cols, mask=m, other=0.0, eviction_policy="evict_first").to(tl.float32)
        w = tl.load(w_ptr + cols, mask=m, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + cols, mask=m, other=0.0).to(tl.float32)
        tl.store(yr + cols, ((x - mu) * rstd * w + b).to(y_ptr.dtype.element_ty), mask=m)


class ModelNew(nn.Module):
    def __init__(self, eps: float = 1e-5):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight, bias):
        h = x.shape[-1]
        x2 = x.reshape(-1, h)
        n_rows = x2.shape[0]
        y = torch.empty((n_rows, h), dtype=x.dtype, device=x.device)
        chunk = min(AKA_PARAMS["CHUNK"], triton.next_power_of_2(h))
        warps = min(AKA_PARAMS["max_warps"], max(1, chunk // 256))
        _layer_norm_welford[(n_rows,)](x2, weight, bias, y, h, x2.stride(0), y.stride(0), self.eps,
                                       CHUNK=chunk, num_warps=warps)
        return y.view(x.shape)
