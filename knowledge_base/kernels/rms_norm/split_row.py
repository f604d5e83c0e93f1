"""
---
id: kernels/rms_norm/split_row
op: rms_norm
category: Normalization
dtypes: [bfloat16]
techniques: [split-reduction, two-stage-reduction, deterministic-reduction, decode-parallelism, fp32-accumulation, single-rounding, int64-indexing]
params:
  CHUNK: [128, 256, 512, 1024]
  MIN_PROGS_PER_SM: [1, 2, 4]
summary: For decode batches too small to fill the GPU, each row is cut into CHUNK-wide pieces over many programs - launch 1 writes one fp32 sum of squares per (row, chunk); launch 2, same grid, adds its row's partials in a fixed order, forms rstd and scales its own chunk (re-read from L2). Enough rows fall back to one program per row in a single launch.
---
What it does: At T = 1-32 tokens a row-per-program RMSNorm runs 1-32 programs on 132 SMs, each
walking 4-8 K columns alone. Here launch 1 (grid T x n_chunks, n_chunks = ceil(H / CHUNK))
stores sum(x^2) of each piece to an fp32 [T, n_chunks] buffer; launch 2 (same grid) loads the
row's n_chunks partials, sums them (same order in every program of the row, so all chunks of a
row use the identical rstd), and stores its piece as x * rstd * w rounded once. The second read
of x is an L2 hit (the whole decode input is <= 0.5 MB). From MIN_PROGS_PER_SM x SMs rows up,
or when the row is one chunk, a single launch does one row per program (row whole in
registers).

When to use it: `rowwise`, `chunked_loop` and `persistent` give a row
to one program; this kernel spreads it when rows are few, for the price of a second launch
(a few microseconds without CUDA graphs, far less inside one) and an 8-byte partial per chunk.
The decode rows here are 4096-8192 wide: 8-64 programs per row at CHUNK = 128-512. Whether the
latency saved beats the extra launch on the H200 is for `aka kb verify --device cuda`;
at prefill it is `rowwise` with one row per program. CPU timing is meaningless.

Parameters: CHUNK: columns per program in split mode; MIN_PROGS_PER_SM: rows per SM from which
rows are not split. On the CPU interpreter the machine is taken as 4 SMs so that the small
shapes exercise both paths.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"CHUNK": 256, "MIN_PROGS_PER_SM": 2}


@triton.jit
def _chunk_ssq(x_ptr, part_ptr, n_cols, n_chunks, stride_x, CHUNK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1)
    cols = c * CHUNK + tl.arange(0, CHUNK)
    x = tl.load(x_ptr + row * stride_x + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    tl.store(part_ptr + row * n_chunks + c, tl.sum(x * x, axis=0))


@triton.jit
def _chunk_scale(x_ptr, part_ptr, w_ptr, y_ptr, n_cols, n_chunks, stride_x, stride_y, eps,
                 CHUNK: tl.constexpr, NC: tl.constexpr, FUSED: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1)
    cols = c * CHUNK + tl.arange(0, CHUNK)
    m = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=m, other=0.0).to(tl.float32)
    if FUSED:
        ssq = tl.sum(x * x, axis=0)
    else:
        k = tl.arange(0, NC)
        ssq = tl.sum(tl.load(part_ptr + row * n_chunks + k, mask=k < n_chunks, other=0.0), axis=0)
    rstd = tl.rsqrt(ssq / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=m, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * stride_y + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=m)


class ModelNew(nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        h = x.shape[-1]
        x2 = x.reshape(-1, h)
        n_rows = x2.shape[0]
        y = torch.empty((n_rows, h), dtype=x.dtype, device=x.device)
        sms = torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 4
        chunk = min(AKA_PARAMS["CHUNK"], triton.next_power_of_2(h))
        n_chunks = triton.cdiv(h, chunk)
        if n_rows >= AKA_PARAMS["MIN_PROGS_PER_SM"] * sms or n_chunks == 1:
            block = triton.next_power_of_2(h)
            _chunk_scale[(n_rows, 1)](x2, y, weight, y, h, 1, x2.stride(0), y.stride(0), self.eps, CHUNK=block,
                                      NC=1, FUSED=True, num_warps=min(16, max(1, block // 512)))
        else:
            part = torch.empty((n_rows, n_chunks), dtype=torch.float32, device=x.device)
            warps = min(4, max(1, chunk // 128))
            _chunk_ssq[(n_rows, n_chunks)](x2, part, h, n_chunks, x2.stride(0), CHUNK=chunk, num_warps=warps)
            _chunk_scale[(n_rows, n_chunks)](x2, part, weight, y, h, n_chunks, x2.stride(0), y.stride(0), self.eps,
                                             CHUNK=chunk, NC=triton.next_power_of_2(n_chunks), FUSED=False,
                                             num_warps=warps)
        return y.view(x.shape)
