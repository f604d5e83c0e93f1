"""
---
id: kernels/layer_norm/split_welford
op: layer_norm
category: Normalization
dtypes: [bfloat16]
techniques: [split-reduction, two-stage-reduction, welford-reduction, parallel-variance-combine, deterministic-reduction, decode-parallelism, fp32-accumulation, single-rounding, int64-indexing]
params:
  CHUNK: [128, 256, 512, 1024]
  MIN_PROGS_PER_SM: [1, 2, 4]
summary: For decode batches too small to fill the GPU, each row is cut into CHUNK-wide pieces over many programs - launch 1 stores each piece's (mean, M2) from registers; launch 2, same grid, merges the row's pieces with Chan's parallel-variance formula in a fixed order and normalises its own piece (re-read from L2). Enough rows fall back to one program per row, one launch.
---
What it does: At 1-32 tokens a row-per-program LayerNorm leaves most SMs idle. Launch 1 (grid
T x n_chunks) computes, for its piece of n_c columns, the mean and the centred sum of squares
M2 = sum (x - mean_c)^2 exactly from registers and stores both (fp32). Launch 2 (same grid)
loads the row's n_chunks pairs and merges them all at once: mean = sum(n_c mean_c) / H,
M2 = sum(M2_c) + sum(n_c (mean_c - mean)^2) - Chan et al.'s combination, which never subtracts
two large sums, so per-token offsets (|mean| >> std) keep their digits; every program of a row
merges in the same order and gets the identical statistics. It then stores
(x - mean) * rsqrt(M2 / H + eps) * w + b for its piece. The second read of x hits the L2.
From MIN_PROGS_PER_SM x SMs rows up, or for a one-chunk row, one launch does one row per program
with the two-pass statistics from registers.

When to use it: `row_tile`, `persistent` and `welford_chunked` give a
row to one program; at 1 token x 4096 columns that is one SM doing the whole op, latency-bound.
This kernel spreads a decode row over 8-32 programs for the price of a second launch and 8
bytes per piece; at prefill it is one launch of one row per program (`row_tile` with ROWS = 1).
Whether the split beats the launch cost on the H200 is for `aka kb verify --device cuda`; CPU
timing is meaningless. On the CPU interpreter the machine is taken as 4 SMs so that the small
shapes run both paths.

Parameters: CHUNK: columns per program in split mode; MIN_PROGS_PER_SM: rows per SM from which
rows are not split.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"CHUNK": 256, "MIN_PROGS_PER_SM": 2}


@triton.jit
def _chunk_moments(x_ptr, mean_ptr, m2_ptr, n_cols, n_chunks, stride_x, CHUNK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1)
    cols = c * CHUNK + tl.arange(0, CHUNK)
    m = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=m, other=0.0).to(tl.float32)
    n_c = tl.minimum(n_cols - c * CHUNK, CHUNK).to(tl.float32)
    mean = tl.sum(x, axis=0) / n_c
    xc = tl.where(m, x - mean, 0.0)
    tl.store(mean_ptr + row * n_chunks + c, mean)
    tl.store(m2_ptr + row * n_chunks + c, tl.sum(xc * xc, axis=0))


@triton.jit
def _chunk_norm(x_ptr, mean_ptr, m2_ptr, w_ptr, b_ptr, y_ptr, n_cols, n_chunks, stride_x, stride_y, eps,
                CHUNK: tl.constexpr, NC: tl.constexpr, FUSED: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1)
    cols = c * CHUNK + tl.arange(0, CHUNK)
    m = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=m, other=0.0).to(tl.float32)
    if FUSED:
        mean = tl.sum(x, axis=0) / n_cols
        xc = tl.where(m, x - mean, 0.0)
        m2 = tl.sum(xc * xc, axis=0)
    else:
        k = tl.arange(0, NC)
        km = k < n_chunks
        mc = tl.load(mean_ptr + row * n_chunks + k, mask=km, other=0.0)
        nc = tl.where(km, tl.minimum(n_cols - k * CHUNK, CHUNK), 0).to(tl.float32)
        mean = tl.sum(nc * mc, axis=0) / n_cols
        dm = mc - mean
        m2 = tl.sum(tl.load(m2_ptr + row * n_chunks + k, mask=km, other=0.0), axis=0) + tl.sum(nc * dm * dm, axis=0)
    rstd = tl.rsqrt(m2 / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=m, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=m, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * stride_y + cols, ((x - mean) * rstd * w + b).to(y_ptr.dtype.element_ty), mask=m)


class ModelNew(nn.Module):
    def __init__(self, eps: float = 1e-5):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight, bias):
        h = x.shape[-1]
        x2 = x.reshape(-1, h)
        n_rows = x2.shape[0]
        y = torch.empty((n_rows, h), dtype=x.dtype, device=x.device)
        sms = torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 4
        chunk = min(AKA_PARAMS["CHUNK"], triton.next_power_of_2(h))
        n_chunks = triton.cdiv(h, chunk)
        if n_rows >= AKA_PARAMS["MIN_PROGS_PER_SM"] * sms or n_chunks == 1:
            block = triton.next_power_of_2(h)
            _chunk_norm[(n_rows, 1)](x2, y, y, weight, bias, y, h, 1, x2.stride(0), y.stride(0), self.eps,
                                     CHUNK=block, NC=1, FUSED=True, num_warps=min(16, max(1, block // 512)))
        else:
            mean = torch.empty((n_rows, n_chunks), dtype=torch.float32, device=x.device)
            m2 = torch.empty((n_rows, n_chunks), dtype=torch.float32, device=x.device)
            warps = min(4, max(1, chunk // 128))
            _chunk_moments[(n_rows, n_chunks)](x2, mean, m2, h, n_chunks, x2.stride(0), CHUNK=chunk, num_warps=warps)
            _chunk_norm[(n_rows, n_chunks)](x2, mean, m2, weight, bias, y, h, n_chunks, x2.stride(0), y.stride(0),
                                            self.eps, CHUNK=chunk, NC=triton.next_power_of_2(n_chunks), FUSED=False,
                                            num_warps=warps)
        return y.view(x.shape)
