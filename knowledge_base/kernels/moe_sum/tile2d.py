"""
---
id: kernels/moe_sum/tile2d
op: moe_sum
category: Reduce
dtypes: [bfloat16]
techniques: [k-rows-as-one-tile, row-major-grid, fp32-accumulation, vectorized-access]
params:
  BH: [256, 512, 1024, 2048]
  num_warps: [2, 4, 8]
summary: 1-D grid over (token, column block) walked row-major; the token's k expert rows loaded as one [KP, BH] tile, weighted by the routing weights and reduced along k in fp32.
---
When to use it: the default top-k combine after the expert GEMMs for power-of-two k (8 experts per
token in DeepSeek-V3, Qwen3-30B-A3B, Mixtral's 2), from decode to prefill: all k rows of a token
are requested at once, so the reduction waits for one memory latency, not k. Siblings:
`multi_token` loops over k (no padded rows for odd k), `persistent` strides a fixed grid over
the tiles for very long prefills.

All k row loads of a program are issued at once (one [KP, BH] tile, KP = next_pow2(k), padded rows
masked), so their latencies overlap instead of serialising behind each FMA. The k routing weights
are one [KP] vector load. Reduction order matches the reference (sum over k, then the scale), one
rounding to bf16. Column blocks keep the grid wide at decode: 1 token x 7168 columns at BH 256
is 28 programs, 32 tokens are 896. Offsets are int64: T*k*H reaches 32768*8*2048 = 5.4e8 here
but grows past 2**31 with longer prefills.
Grid. A 1-D grid walked row-major: program p takes token p // nb and column block p % nb (nb =
cdiv(H, BH)), so consecutive programs cover consecutive columns of one token and the programs in
flight stream a contiguous stretch of expert outputs (a token's k rows are adjacent). It was a
(token, column block) grid with tokens on axis 0, which the GPU walks fastest: the programs in
flight read one column block of many tokens, k * H elements apart. On the H200 (session 6)
torch.compile's flat stream beat silu_and_mul's grid2d, which had that order, by 4-5% at large
shapes. Decode: BH halves (not below 256) until the grid has at least 4 programs per SM, the rule
the row tiles took after torch.compile won their decode shapes on the H200 (session 6); num_warps
shrinks with BH (num_warps * bh / BH), keeping the elements per thread. At BH 1024, 1 x 7168 ran as
7 programs and 16 x 4096 as 64; now 28 and 256. Prefill tiles are unchanged. On CPU (the
interpreter) the machine is taken as one SM. Prediction (unmeasured): decode faster; large shapes
a few percent faster.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"BH": 1024, "num_warps": 4}


@triton.jit
def _moe_sum_tile(y_ptr, w_ptr, out_ptr, H, nb, stride_yt, stride_yk, stride_wt, stride_ot, scale,
                  K: tl.constexpr, KP: tl.constexpr, BH: tl.constexpr):
    pid = tl.program_id(0)
    t = (pid // nb).to(tl.int64)
    cols = (pid % nb) * BH + tl.arange(0, BH)
    cm = cols < H
    j = tl.arange(0, KP)
    km = j < K
    w = tl.load(w_ptr + t * stride_wt + j, mask=km, other=0.0).to(tl.float32)
    y = tl.load(y_ptr + t * stride_yt + j[:, None].to(tl.int64) * stride_yk + cols[None, :],
                mask=km[:, None] & cm[None, :], other=0.0).to(tl.float32)
    acc = tl.sum(y * w[:, None], axis=0) * scale
    tl.store(out_ptr + t * stride_ot + cols, acc.to(out_ptr.dtype.element_ty), mask=cm)


class ModelNew(nn.Module):
    def __init__(self, routed_scaling_factor=1.0):
        super().__init__()
        self.routed_scaling_factor = routed_scaling_factor

    def forward(self, expert_out, topk_weights):
        T, K, H = expert_out.shape
        y = expert_out if expert_out.stride(2) == 1 else expert_out.contiguous()
        w = topk_weights if topk_weights.stride(1) == 1 else topk_weights.contiguous()
        out = torch.empty((T, H), dtype=expert_out.dtype, device=expert_out.device)
        bh = AKA_PARAMS["BH"]
        sms = torch.cuda.get_device_properties(out.device).multi_processor_count if out.is_cuda else 1
        while bh > 256 and T * triton.cdiv(H, bh) < 4 * sms:
            bh //= 2
        warps = max(1, AKA_PARAMS["num_warps"] * bh // AKA_PARAMS["BH"])
        nb = triton.cdiv(H, bh)
        _moe_sum_tile[(T * nb,)](
            y, w, out, H, nb, y.stride(0), y.stride(1), w.stride(0), out.stride(0),
            float(self.routed_scaling_factor), K=K, KP=triton.next_power_of_2(K), BH=bh, num_warps=warps)
        return out
