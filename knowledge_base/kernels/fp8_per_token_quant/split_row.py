"""
---
id: kernels/fp8_per_token_quant/split_row
op: fp8_per_token_quant
category: Quantization
dtypes: [bfloat16]
techniques: [fp8-quantization, per-token-scaling, amax, saturation, split-reduction, two-stage-reduction, deterministic-reduction, decode-parallelism, int64-indexing]
params:
  CHUNK: [128, 512, 1024, 2048]
  MIN_PROGS_PER_SM: [2, 4]
summary: For few tokens, each row is cut into CHUNK-wide pieces over many programs - launch 1 writes one abs-max per (row, chunk); launch 2, on the same grid, reduces its row's chunk maxima (a tiny read), forms the scale and quantises its own chunk (re-read from L2). Many rows fall back to one chunk per row in a single launch.
---
What it does: At decode, T is 1-32 and a per-row kernel launches 1-32 programs on a 132-SM GPU.
Here every row is split into n_chunks = ceil(H / CHUNK) pieces: launch 1 (grid T x n_chunks)
stores amax |x| per piece to an fp32 [T, n_chunks] buffer; launch 2 (same grid) loads its row's
n_chunks maxima, takes their max (fixed order: deterministic), scale = max(amax / 448,
min_scale), and stores its piece as fp8(clamp(x / scale, +-448)); chunk 0 stores the scale.
The second read of x hits the L2 (the whole decode input is <= 1.2 MB). When T * ceil(H / row)
already gives MIN_PROGS_PER_SM programs per SM, the split is skipped: one program per row takes
the whole row (CHUNK = next_pow2(H)) and does amax and quantisation in one launch.

When to use it: `row_in_registers`, `persistent` and
`two_pass_chunked` give a row to one program: at T = 1 and H = 4096 that is one program moving
12 KB while 131 SMs idle, and the 2-5 us of such a launch is the program's own latency. The
split spreads a decode row over up to H / CHUNK SMs for the price of a second launch (~2-3 us of
launch overhead on a GPU without CUDA graphs), so it should help only where the row is long
(the 14336-18944-wide down-projection inputs) and T is small; at prefill it is
`row_in_registers` with one row per program. Untimed here: CPU interpreter timing means nothing;
the H200 verify decides.

Parameters: CHUNK: columns per program in the split mode; MIN_PROGS_PER_SM: the program count per
SM below which rows are split. On the CPU interpreter the machine is taken as 4 SMs, so the
small shapes run both paths (5 x 1000 is split in two chunks; 7 x 96 and 3 x 333 are not).
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"CHUNK": 512, "MIN_PROGS_PER_SM": 2}


@triton.jit
def _chunk_amax(x_ptr, part_ptr, n_cols, n_chunks, stride_x, CHUNK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1)
    cols = c * CHUNK + tl.arange(0, CHUNK)
    x = tl.load(x_ptr + row * stride_x + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    tl.store(part_ptr + row * n_chunks + c, tl.max(tl.abs(x), axis=0))


@triton.jit
def _chunk_quant(x_ptr, part_ptr, q_ptr, s_ptr, n_cols, n_chunks, stride_x, stride_q, min_scale,
                 CHUNK: tl.constexpr, NC: tl.constexpr, FUSED: tl.constexpr):
    FP8_MAX: tl.constexpr = 448.0
    row = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1)
    cols = c * CHUNK + tl.arange(0, CHUNK)
    m = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=m, other=0.0).to(tl.float32)
    if FUSED:
        amax = tl.max(tl.abs(x), axis=0)
    else:
        k = tl.arange(0, NC)
        amax = tl.max(tl.load(part_ptr + row * n_chunks + k, mask=k < n_chunks, other=0.0), axis=0)
    scale = tl.maximum(amax / FP8_MAX, min_scale)
    q = tl.clamp(x / scale, -FP8_MAX, FP8_MAX)
    tl.store(q_ptr + row * stride_q + cols, q.to(q_ptr.dtype.element_ty), mask=m)
    if c == 0:
        tl.store(s_ptr + row, scale)


class ModelNew(nn.Module):
    def __init__(self, min_scale=1.0 / (448.0 * 512.0)):
        super().__init__()
        self.min_scale = min_scale

    def forward(self, x):
        h = x.shape[-1]
        x2 = x.reshape(-1, h)
        n_rows = x2.shape[0]
        q = torch.empty((n_rows, h), dtype=torch.float8_e4m3fn, device=x.device)
        scale = torch.empty((n_rows, 1), dtype=torch.float32, device=x.device)
        sms = torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 4
        chunk = min(AKA_PARAMS["CHUNK"], triton.next_power_of_2(h))
        n_chunks = triton.cdiv(h, chunk)
        if n_rows >= AKA_PARAMS["MIN_PROGS_PER_SM"] * sms or n_chunks == 1:
            block = triton.next_power_of_2(h)
            warps = min(16, max(1, block // 512))
            _chunk_quant[(n_rows, 1)](x2, scale, q, scale, h, 1, x2.stride(0), q.stride(0), float(self.min_scale),
                                      CHUNK=block, NC=1, FUSED=True, num_warps=warps)
        else:
            part = torch.empty((n_rows, n_chunks), dtype=torch.float32, device=x.device)
            warps = min(8, max(1, chunk // 256))
            _chunk_amax[(n_rows, n_chunks)](x2, part, h, n_chunks, x2.stride(0), CHUNK=chunk, num_warps=warps)
            _chunk_quant[(n_rows, n_chunks)](x2, part, q, scale, h, n_chunks, x2.stride(0), q.stride(0),
                                             float(self.min_scale), CHUNK=chunk, NC=triton.next_power_of_2(n_chunks),
                                             FUSED=False, num_warps=warps)
        return q.view(*x.shape[:-1], h), scale.view(*x.shape[:-1], 1)
