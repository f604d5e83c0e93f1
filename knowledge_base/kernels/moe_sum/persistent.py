"""
---
id: kernels/moe_sum/persistent
op: moe_sum
category: Reduce
dtypes: [bfloat16]
techniques: [persistent-kernel, grid-stride-loop, k-rows-as-one-tile, fp32-accumulation, vectorized-access, int64-indexing]
params:
  PROGS_PER_SM: [2, 4, 8]
  BH: [256, 512, 1024, 2048]
  max_warps: [4, 8]
summary: min(tiles, PROGS_PER_SM x SMs) programs stride over the row-major (token, column block) tiles; per trip the token's k expert rows come in as one [KP, BH] tile with the k routing weights, are weighted, reduced along k in fp32, scaled and rounded once.
---
What it does: out[t] = s * sum_j w[t, j] * e[t, j, :] with a fixed grid: tile i is (token
i // nb, column block i % nb), program p takes tiles p, p + P, ... Each tile loads the top-k
weights of its token (fp32, [KP] padded to a power of two) and the [KP, BH] block of the k
expert rows, multiplies and sums along k in fp32, multiplies by routed_scaling_factor and stores
bf16. The top-k rows are contiguous ([T, k, H]), so the tile is k strided row segments.

When to use it: `tile2d` is the same tile on a one-program-per-tile
grid and `multi_token` loops over the k rows per token. The prefill shapes (8192-32768 tokens x
7168 columns = up to 10^5 tiles) are where a persistent grid can save program scheduling; at
decode the grid is the tile count and the kernel equals `tile2d`. Moving 2k+1 bytes per output
element at 8 experts, all three are bandwidth-bound; the differences are latency hiding, which
only the H200 verify can rank (CPU interpreter timing is meaningless). On the CPU interpreter
the machine has 2 "SMs", so the small shapes take several trips per program.

Parameters: PROGS_PER_SM: programs per SM; BH: columns per tile (capped at next_pow2(H));
max_warps caps num_warps = KP * BH / 1024.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"PROGS_PER_SM": 4, "BH": 1024, "max_warps": 8}


def _num_sms(device):
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 2


@triton.jit
def _moe_sum_persistent(e_ptr, w_ptr, out_ptr, n_tiles, n_cb, top_k, hidden, stride_et, stride_ek, stride_wt,
                        stride_o, scaling, KP: tl.constexpr, BH: tl.constexpr):
    ks = tl.arange(0, KP)
    kmask = ks < top_k
    offs = tl.arange(0, BH)
    for i in range(tl.program_id(0), n_tiles, tl.num_programs(0)):
        t = tl.cast(i // n_cb, tl.int64)
        cols = (i % n_cb) * BH + offs
        cmask = cols < hidden
        w = tl.load(w_ptr + t * stride_wt + ks, mask=kmask, other=0.0).to(tl.float32)
        e = tl.load(e_ptr + t * stride_et + ks[:, None].to(tl.int64) * stride_ek + cols[None, :],
                    mask=kmask[:, None] & cmask[None, :], other=0.0).to(tl.float32)
        acc = tl.sum(e * w[:, None], axis=0) * scaling
        tl.store(out_ptr + t * stride_o + cols, acc.to(out_ptr.dtype.element_ty), mask=cmask)


class ModelNew(nn.Module):
    def __init__(self, routed_scaling_factor=1.0):
        super().__init__()
        self.routed_scaling_factor = routed_scaling_factor

    def forward(self, expert_out, topk_weights):
        t, k, h = expert_out.shape
        e = expert_out if expert_out.stride(2) == 1 else expert_out.contiguous()
        w = topk_weights if topk_weights.stride(1) == 1 else topk_weights.contiguous()
        out = torch.empty((t, h), dtype=expert_out.dtype, device=expert_out.device)
        if t == 0:
            return out
        bh = min(AKA_PARAMS["BH"], triton.next_power_of_2(h))
        kp = triton.next_power_of_2(k)
        n_cb = triton.cdiv(h, bh)
        n_tiles = t * n_cb
        grid = (min(n_tiles, AKA_PARAMS["PROGS_PER_SM"] * _num_sms(e.device)),)
        warps = min(AKA_PARAMS["max_warps"], max(1, kp * bh // 1024))
        _moe_sum_persistent[grid](e, w, out, n_tiles, n_cb, k, h, e.stride(0), e.stride(1), w.stride(0), out.stride(0),
                                  float(self.routed_scaling_factor), KP=kp, BH=bh, num_warps=warps)
        return out
