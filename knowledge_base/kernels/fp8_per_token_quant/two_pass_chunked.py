"""
---
id: kernels/fp8_per_token_quant/two_pass_chunked
op: fp8_per_token_quant
category: Quantization
dtypes: [bfloat16, float8_e4m3fn]
techniques: [fp8-quantization, per-token-scaling, amax, saturation, chunked-reduction, two-pass-l2-resident, int64-indexing]
params:
  CHUNK: [2048, 4096, 8192]
  num_warps: [4, 8, 16]
summary: One program per row walking it in CHUNK pieces twice - per-lane abs-max, then (re-reading from L2) divide, clamp, fp8 store; live state is one chunk whatever H is.
---
Design. Register use is fixed by CHUNK instead of the padded row width, so the 14336-18944 wide
rows (padded to 16384-32768 in the row-in-registers family) run at modest register counts and
high occupancy, with no padded lanes beyond the last chunk's tail. Pass 1 keeps a [CHUNK] vector
of per-lane maxima (one cross-warp reduction per row, not per chunk); its loads ask to stay in
L2 (evict_last). Pass 2 re-reads the row (an L2 hit while the rows in flight fit: 132 SMs x a few
rows x 38 KB at H = 18944 is well under the 60 MiB L2), divides by the scale as the reference,
clamps to +-448, casts to e4m3fn and stores 1 B per element. Scale = max(amax / 448, min_scale)
with the vLLM floor. CHUNK is capped at next_pow2(H) so narrow rows do not carry empty lanes.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"CHUNK": 4096, "num_warps": 8}


@triton.jit
def _fp8_per_token_two_pass(x_ptr, q_ptr, s_ptr, n_cols, stride_x, stride_q, min_scale, CHUNK: tl.constexpr):
    FP8_MAX: tl.constexpr = 448.0
    row = tl.program_id(0).to(tl.int64)
    xr = x_ptr + row * stride_x
    qr = q_ptr + row * stride_q
    offs = tl.arange(0, CHUNK)
    amax = tl.zeros([CHUNK], dtype=tl.float32)
    for start in range(0, n_cols, CHUNK):
        cols = start + offs
        x = tl.load(xr + cols, mask=cols < n_cols, other=0.0, eviction_policy="evict_last").to(tl.float32)
        amax = tl.maximum(amax, tl.abs(x))
    scale = tl.maximum(tl.max(amax, axis=0) / FP8_MAX, min_scale)
    for start in range(0, n_cols, CHUNK):
        cols = start + offs
        m = cols < n_cols
        x = tl.load(xr + cols, mask=m, other=0.0, eviction_policy="evict_first").to(tl.float32)
        q = tl.clamp(x / scale, -FP8_MAX, FP8_MAX)
        tl.store(qr + cols, q.to(q_ptr.dtype.element_ty), mask=m)
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
        chunk = min(AKA_PARAMS["CHUNK"], triton.next_power_of_2(h))
        warps = min(AKA_PARAMS["num_warps"], max(1, chunk // 256))
        _fp8_per_token_two_pass[(n_rows,)](x2, q, scale, h, x2.stride(0), q.stride(0), float(self.min_scale),
                                           CHUNK=chunk, num_warps=warps)
        return q.view(*x.shape[:-1], h), scale.view(*x.shape[:-1], 1)
