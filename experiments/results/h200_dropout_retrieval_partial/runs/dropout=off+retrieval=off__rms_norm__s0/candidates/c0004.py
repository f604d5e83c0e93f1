"""
---
id: kernels/rms_norm/chunked_loop
op: rms_norm
category: Normalization
dtypes: [bfloat16]
techniques: [chunked-reduction, two-pass-l2-resident, fp32-accumulation, single-rounding, vectorized-access, int64-indexing]
params:
  CHUNK: [1024, 2048, 4096, 8192]
  max_warps: [4, 8, 16]
summary: One program per row looping over the row in CHUNK-wide pieces; pass 1 accumulates per-lane sums of squares, pass 2 re-reads the row (an L2 hit) to scale and store. Register use is bounded by CHUNK, not by H.
---
Design. For rows wider than a register-resident tile (H > 16384: vocab-sized or unsharded MLP
widths) the row cannot stay in registers without spills. This family fixes the live state at
one CHUNK of fp32 values whatever H is: pass 1 streams the row and accumulates x^2 per lane in
a [CHUNK] fp32 vector (one cross-warp reduction at the end, not one per chunk); pass 2 streams
the row again with the weight chunk, scales and stores. The second read hits L2 while the rows
in flight fit (132 SMs x a few rows x 2H bytes: 8.6 MB at H = 16384, against 60 MiB of L2);
pass-1 loads ask to stay in L2 (evict_last), pass-2 loads and the stores are marked evict_first.
On the benchmark's widths (512-8192) a CHUNK >= H makes each loop one trip, so the cost over the
row-in-registers family is the L2 re-read; CHUNK < H splits the row. Dividing by H (not by the
padded width) keeps odd widths exact. Row offsets int64.
num_warps = min(max_warps, chunk / 256).
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {'CHUNK': 2048, 'max_warps': 4}  # set by the offline proposer


@triton.jit
def _rms_norm_chunked(x_ptr, w_ptr, y_ptr, n_cols, stride_x, stride_y, eps, CHUNK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    xr = x_ptr + row * stride_x
    yr = y_ptr + row * stride_y
    offs = tl.arange(0, CHUNK)
    acc = tl.zeros([CHUNK], dtype=tl.float32)
    for start in range(0, n_cols, CHUNK):
        cols = start + offs
        x = tl.load(xr + cols, mask=cols < n_cols, other=0.0, eviction_policy="evict_last").to(tl.float32)
        acc += x * x
    rstd = tl.rsqrt(tl.sum(acc, axis=0) / n_cols + eps)
    for start in range(0, n_cols, CHUNK):
        cols = start + offs
        m = cols < n_cols
        x = tl.load(xr + cols, mask=m, other=0.0, eviction_policy="evict_first").to(tl.float32)
        w = tl.load(w_ptr + cols, mask=m, other=0.0).to(tl.float32)
        tl.store(yr + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=m, eviction_policy="evict_first")


class ModelNew(nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        h = x.shape[-1]
        x2 = x.reshape(-1, h)
        y = torch.empty((x2.shape[0], h), dtype=x.dtype, device=x.device)
        chunk = min(AKA_PARAMS["CHUNK"], triton.next_power_of_2(h))  # no all-masked lanes on narrow rows
        warps = min(AKA_PARAMS["max_warps"], max(2, chunk // 256))  # >= 8 fp32 per thread per chunk
        _rms_norm_chunked[(x2.shape[0],)](x2, weight, y, h, x2.stride(0), y.stride(0), self.eps, CHUNK=chunk,
                                          num_warps=warps)
        return y.view(x.shape)
