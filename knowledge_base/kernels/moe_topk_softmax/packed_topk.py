"""
---
id: kernels/moe_topk_softmax/packed_topk
op: moe_topk_softmax
category: Index
dtypes: [bfloat16, float32]
techniques: [tokens-per-program, bitonic-sort, index-packing, order-preserving-float-keys, lowest-index-tie-break, fp32-routing]
params:
  BT: [4, 8, 16, 32]
  num_warps: [1, 2, 4, 8]
summary: Each logit packed with its reversed expert id into one integer key whose order is (logit desc, id asc); tl.topk (bitonic) on a [BT, next_pow2(E)] tile picks the k winners in one network instead of k dependent reductions.
---
Key: the logit's bits mapped to an integer with the float's order (negative values get their
magnitude bits flipped; -0.0 is first made +0.0 because the reference treats them as equal), shifted
left by 16, with `65535 - id` in the low 16 bits. All keys are distinct, larger key = larger logit,
and among equal logits the lower id has the larger key, so a descending top-k of the keys yields
exactly the reference's order, ties included (E <= 65536). bf16 logits fit a 16-bit key and pack
into int32; fp32 logits pack into int64. tl.topk needs power-of-two widths: the tile is
next_pow2(E) wide (padding keys are the integer minimum and lose) and the network returns
KP = next_pow2(k) candidates, of which the first k are stored. The logit comes back exactly from
the key, so no gather is needed for the weight exp(x - max) / sum. The bitonic network costs
about log2(E)^2 / 2 compare-exchange stages over the tile independent of k, against k
max-reductions for the iterative form: the better choice depends on k and E (k 10 of 512 vs
k 2 of 8), which is why both variants exist. BT is capped at 1024 x num_warps / BE tokens.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"BT": 16, "num_warps": 4}


@triton.jit
def _topk_softmax_packed(g_ptr, w_ptr, id_ptr, T, E, stride_g,
                         K: tl.constexpr, KP: tl.constexpr, BT: tl.constexpr, BE: tl.constexpr,
                         RENORM: tl.constexpr, BF16: tl.constexpr):
    toks = tl.program_id(0) * BT + tl.arange(0, BT)
    e = tl.arange(0, BE)
    tm = toks < T
    m2 = tm[:, None] & (e < E)[None, :]
    raw = tl.load(g_ptr + toks.to(tl.int64)[:, None] * stride_g + e[None, :], mask=m2, other=0.0)
    x = raw.to(tl.float32)
    x = tl.where(x == 0.0, 0.0, x)                   # -0.0 == +0.0 for the reference's sort
    mx = tl.max(tl.where(m2, x, float("-inf")), axis=1)
    mx = tl.where(tm, mx, 0.0)
    denom = tl.sum(tl.where(m2, tl.exp(x - mx[:, None]), 0.0), axis=1)
    low = 65535 - e[None, :]
    if BF16:
        b = x.to(tl.bfloat16).to(tl.int16, bitcast=True).to(tl.int32)
        key = tl.where(b < 0, b ^ 0x7FFF, b)
        packed = tl.where(m2, (key << 16) | low, -2147483648)
        top = tl.topk(packed, KP)
        top_key = top >> 16
        bits = tl.where(top_key < 0, top_key ^ 0x7FFF, top_key)
        top_x = bits.to(tl.int16).to(tl.bfloat16, bitcast=True).to(tl.float32)
        top_i = 65535 - (top & 0xFFFF)
    else:
        b = x.to(tl.int32, bitcast=True)
        key = tl.where(b < 0, b ^ 0x7FFFFFFF, b).to(tl.int64)
        packed = tl.where(m2, (key << 16) | low.to(tl.int64), -9223372036854775807 - 1)
        top = tl.topk(packed, KP)
        top_key = (top >> 16).to(tl.int32)
        bits = tl.where(top_key < 0, top_key ^ 0x7FFFFFFF, top_key)
        top_x = bits.to(tl.float32, bitcast=True)
        top_i = (65535 - (top & 0xFFFF)).to(tl.int32)
    kk = tl.arange(0, KP)
    km = kk < K
    w = tl.where(km[None, :], tl.exp(top_x - mx[:, None]) / denom[:, None], 0.0)
    if RENORM:
        w = w / tl.sum(w, axis=1)[:, None]
    om = tm[:, None] & km[None, :]
    out = toks.to(tl.int64)[:, None] * K + kk[None, :]
    tl.store(w_ptr + out, w, mask=om)
    tl.store(id_ptr + out, top_i.to(tl.int32), mask=om)


class ModelNew(nn.Module):
    def __init__(self, top_k, renormalize=True):
        super().__init__()
        self.top_k = top_k
        self.renormalize = renormalize

    def forward(self, gating_output):
        E = gating_output.shape[-1]
        if E > 65536:
            raise ValueError("expert ids must fit the 16-bit low field of the key")
        g = gating_output.reshape(-1, E)
        if g.stride(1) != 1:
            g = g.contiguous()
        T, K = g.shape[0], self.top_k
        w = torch.empty((T, K), dtype=torch.float32, device=g.device)
        ids = torch.empty((T, K), dtype=torch.int32, device=g.device)
        be = triton.next_power_of_2(E)
        kp = triton.next_power_of_2(K)
        # at most 32 logits per thread: BT x BE <= 1024 x num_warps (E 512, 4 warps: BT 8)
        bt = max(1, min(AKA_PARAMS["BT"], 1024 * AKA_PARAMS["num_warps"] // be))
        _topk_softmax_packed[(triton.cdiv(T, bt),)](
            g, w, ids, T, E, g.stride(0), K=K, KP=kp, BT=bt, BE=be,
            RENORM=bool(self.renormalize), BF16=g.dtype == torch.bfloat16,
            num_warps=AKA_PARAMS["num_warps"])
        return w.view(*gating_output.shape[:-1], K), ids.view(*gating_output.shape[:-1], K)
