"""
---
id: kernels/fused_qkv_rope/token_loop
op: fused_qkv_rope
category: Fusion
dtypes: [bfloat16]
techniques: [kernel-fusion, rope, half-split-rotation, position-gather, multi-head-per-program, 2d-tiling, fp32-accumulation, single-rounding, int64-indexing]
params:
  HB: [4, 8, 16]
  num_warps: [2, 4, 8]
summary: One program per token walks its packed qkv row - q head blocks, k head blocks (NeoX rotation in fp32 with cos/sin gathered once per token), then v head blocks (copy) - so every program streams one contiguous row.
---
Design. A token's packed row ((Hq + 2 Hkv) D bf16: 12 KB at Llama-8B, 6-8 KB for the GQA-8
shapes) is read front to back by a single program, which gathers the fp32 cos/sin row at
positions[t] once and reuses it for all Hq + Hkv rotated heads; the head-block family repeats
that dependent gather in every q/k program. Three loops walk HB heads at a time: q (rotate into
q_out), k (rotate into k_out), v (copy into v_out). Rotation (NeoX halves): x1 = x[:D/2],
x2 = x[D/2:], out = [x1 c - x2 s, x2 c + x1 s] in fp32, one rounding. At prefill there are
thousands of ~12-24 KB programs; at decode (T = 1-64) the grid is small and the op is
launch-bound anyway. D/2 constexpr padded to a power of two with masks. Token offsets int64.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {'HB': 8, 'num_warps': 2}  # set by the offline proposer


@triton.jit
def _qkv_rope_token(pos_ptr, qkv_ptr, cache_ptr, qo_ptr, ko_ptr, vo_ptr, n_q_heads, n_kv_heads,
                    s_tok, sq_t, sk_t, sv_t, stride_cache,
                    D: tl.constexpr, HALF: tl.constexpr, HB: tl.constexpr, HALF_P2: tl.constexpr,
                    D_P2: tl.constexpr):
    t64 = tl.program_id(0).to(tl.int64)
    row = qkv_ptr + t64 * s_tok
    pos = tl.load(pos_ptr + t64).to(tl.int64)
    i = tl.arange(0, HALF_P2)
    cmask = i < HALF
    c = tl.load(cache_ptr + pos * stride_cache + i, mask=cmask, other=0.0).to(tl.float32)[None, :]
    s = tl.load(cache_ptr + pos * stride_cache + HALF + i, mask=cmask, other=0.0).to(tl.float32)[None, :]
    hh = tl.arange(0, HB)
    for h0 in range(0, n_q_heads, HB):
        heads = h0 + hh
        mask = (heads < n_q_heads)[:, None] & cmask[None, :]
        src = row + heads[:, None] * D + i[None, :]
        x1 = tl.load(src, mask=mask, other=0.0).to(tl.float32)
        x2 = tl.load(src + HALF, mask=mask, other=0.0).to(tl.float32)
        dst = qo_ptr + t64 * sq_t + heads[:, None] * D + i[None, :]
        tl.store(dst, (x1 * c - x2 * s).to(qo_ptr.dtype.element_ty), mask=mask)
        tl.store(dst + HALF, (x2 * c + x1 * s).to(qo_ptr.dtype.element_ty), mask=mask)
    for h0 in range(0, n_kv_heads, HB):
        heads = h0 + hh
        mask = (heads < n_kv_heads)[:, None] & cmask[None, :]
        src = row + n_q_heads * D + heads[:, None] * D + i[None, :]
        x1 = tl.load(src, mask=mask, other=0.0).to(tl.float32)
        x2 = tl.load(src + HALF, mask=mask, other=0.0).to(tl.float32)
        dst = ko_ptr + t64 * sk_t + heads[:, None] * D + i[None, :]
        tl.store(dst, (x1 * c - x2 * s).to(ko_ptr.dtype.element_ty), mask=mask)
        tl.store(dst + HALF, (x2 * c + x1 * s).to(ko_ptr.dtype.element_ty), mask=mask)
    cols = tl.arange(0, D_P2)
    for h0 in range(0, n_kv_heads, HB):
        heads = h0 + hh
        mask = (heads < n_kv_heads)[:, None] & (cols < D)[None, :]
        v = tl.load(row + (n_q_heads + n_kv_heads) * D + heads[:, None] * D + cols[None, :], mask=mask, other=0.0)
        tl.store(vo_ptr + t64 * sv_t + heads[:, None] * D + cols[None, :], v, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, num_q_heads, num_kv_heads, head_size):
        super().__init__()
        self.num_q_heads = num_q_heads
        self.num_kv_heads = num_kv_heads
        self.head_size = head_size

    def forward(self, positions, qkv, cos_sin_cache):
        hq, hk, d = self.num_q_heads, self.num_kv_heads, self.head_size
        n_tok = qkv.shape[0]
        qo = torch.empty((n_tok, hq, d), dtype=qkv.dtype, device=qkv.device)
        ko = torch.empty((n_tok, hk, d), dtype=qkv.dtype, device=qkv.device)
        vo = torch.empty((n_tok, hk, d), dtype=qkv.dtype, device=qkv.device)
        _qkv_rope_token[(n_tok,)](
            positions, qkv, cos_sin_cache, qo, ko, vo, hq, hk, qkv.stride(0), qo.stride(0), ko.stride(0),
            vo.stride(0), cos_sin_cache.stride(0), D=d, HALF=d // 2, HB=AKA_PARAMS["HB"],
            HALF_P2=triton.next_power_of_2(d // 2), D_P2=triton.next_power_of_2(d), num_warps=AKA_PARAMS["num_warps"])
        return qo, ko, vo
