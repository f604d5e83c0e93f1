"""
---
id: kernels/moe_sum/multi_token
op: moe_sum
category: Reduce
dtypes: [bfloat16]
techniques: [multi-row-per-program, fp32-accumulation, vectorized-access, row-major-grid]
params:
  TOKENS_PER_PROG: [1, 2, 4, 8]
  BH: [512, 1024, 2048]
  num_warps: [4, 8]
summary: TOKENS_PER_PROG tokens per program, an unrolled loop over the k expert rows with scalar routing weights, fp32 [BH] accumulator per token.
---
What it does: out[t] = s * sum_j w[t, j] * e[t, j, :], the weighted sum of a token's top-k
expert rows after the experts' down projection ([T, k, H], adjacent rows), in fp32 with one
rounding to bf16. Pick it over `tile2d` when k is not a power of two (k = 6 in
DeepSeek-V2-Lite, k = 10 in Qwen3-Next), where a [k, BH] tile would carry masked padding rows,
or when registers are tight; pick it at prefill, where several tokens per program cut the number
of programs.

The other way round from the [k, BH] tile: the k loop is unrolled at compile time (K is a
constexpr), each iteration a scalar weight load and a [BH] row load, so there is no padded tile
for k = 10 (Qwen3-Next) and register use does not grow with KP. Several tokens per program amortise
the per-program setup at prefill (8192 x 7168 has 57k (token, block) pairs at BH 1024); at decode
the tuner trades TOKENS_PER_PROG against grid width (64 tokens at 4 per program and 7 column
blocks are only 112 programs). The unrolled row loads are independent, so the compiler can keep
them in flight together as in the tile form.
Grid. A 1-D grid walked row-major: program p takes token block p // nb and column block p % nb (nb
= cdiv(H, BH)), so consecutive programs cover consecutive columns of the same tokens and the
programs in flight stream one contiguous stretch of expert outputs (a token's k rows are adjacent).
It was a (token block, column block) grid with token blocks on axis 0, which the GPU walks fastest:
the programs in flight read one column block of many tokens, k * H elements apart. On the H200
(session 6) torch.compile's flat stream beat silu_and_mul's grid2d, which had that order, by 4-5%
at large shapes. Decode: TOKENS_PER_PROG, then BH (not below 256), halve until the grid has at
least 4 programs per SM, the rule the row tiles took after torch.compile won their decode shapes on
the H200 (session 6); num_warps shrinks with BH (num_warps * bh / BH). Before, 1 x 7168 ran as 7
programs, 32 x 2048 as 16 and 64 x 7168 as 112; now 28, 256 and 896. Prefill tiles are unchanged
(2048 x 7168: 3584 programs). On CPU (the interpreter) the machine is taken as one SM. Prediction
(unmeasured): decode faster; large shapes a few percent faster.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"TOKENS_PER_PROG": 4, "BH": 1024, "num_warps": 4}


@triton.jit
def _moe_sum_rows(y_ptr, w_ptr, out_ptr, T, H, nb, stride_yt, stride_yk, stride_wt, stride_ot, scale,
                  K: tl.constexpr, TPP: tl.constexpr, BH: tl.constexpr):
    pid = tl.program_id(0)
    tb = pid // nb
    cols = (pid % nb) * BH + tl.arange(0, BH)
    cm = cols < H
    for r in tl.static_range(TPP):
        t = tb * TPP + r
        if t < T:
            t64 = t.to(tl.int64)
            acc = tl.zeros([BH], tl.float32)
            for j in tl.static_range(K):
                wj = tl.load(w_ptr + t64 * stride_wt + j).to(tl.float32)
                yj = tl.load(y_ptr + t64 * stride_yt + j * stride_yk + cols, mask=cm, other=0.0)
                acc += yj.to(tl.float32) * wj
            tl.store(out_ptr + t64 * stride_ot + cols, (acc * scale).to(out_ptr.dtype.element_ty), mask=cm)


class ModelNew(nn.Module):
    def __init__(self, routed_scaling_factor=1.0):
        super().__init__()
        self.routed_scaling_factor = routed_scaling_factor

    def forward(self, expert_out, topk_weights):
        T, K, H = expert_out.shape
        y = expert_out if expert_out.stride(2) == 1 else expert_out.contiguous()
        w = topk_weights if topk_weights.stride(1) == 1 else topk_weights.contiguous()
        out = torch.empty((T, H), dtype=expert_out.dtype, device=expert_out.device)
        tpp = AKA_PARAMS["TOKENS_PER_PROG"]
        bh = AKA_PARAMS["BH"]
        sms = torch.cuda.get_device_properties(out.device).multi_processor_count if out.is_cuda else 1
        while tpp > 1 and triton.cdiv(T, tpp) * triton.cdiv(H, bh) < 4 * sms:
            tpp //= 2
        while bh > 256 and triton.cdiv(T, tpp) * triton.cdiv(H, bh) < 4 * sms:
            bh //= 2
        warps = max(1, AKA_PARAMS["num_warps"] * bh // AKA_PARAMS["BH"])
        nb = triton.cdiv(H, bh)
        _moe_sum_rows[(triton.cdiv(T, tpp) * nb,)](
            y, w, out, T, H, nb, y.stride(0), y.stride(1), w.stride(0), out.stride(0),
            float(self.routed_scaling_factor), K=K, TPP=tpp, BH=bh, num_warps=warps)
        return out
