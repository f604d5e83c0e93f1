"""
---
id: kernels/fp8_kv_decode_attention/head_fma
op: fp8_kv_decode_attention
category: Fusion
dtypes: [bfloat16, float8_e4m3fn]
techniques: [fp8-kv-cache, scale-folding, dequant-in-registers, paged-kv-cache, online-softmax, gather, cuda-core-dot, head-per-program, one-pass-reduction, exp2-with-log2e, fp32-accumulation, int64-offsets, masking]
params:
  BN: [16, 32, 64]
  num_warps: [2, 4, 8]
summary: One program per (sequence, query head) walks the whole paged fp8 context in BN-token tiles; fp8 K/V are widened to fp32 in registers, the per-token k_scale folds into the score (q . k_fp8 * k_scale * scale) and v_scale into the softmax weight, so no dequantised tile is ever formed; base-2 online softmax, one launch, bf16 output.
---
What it does: Decode attention over an e4m3 KV cache with per-(token, head) scales. For query
head h (KV head h // G) the program gathers [BN, D] fp8 K tiles through the block table, forms
s_j = (q . k_j) * k_scale_j * scale with an fp32 multiply-and-sum (the scale is a per-row factor,
so it is applied to the BN scores instead of BN * D elements), runs an online softmax in base 2,
and accumulates sum_j (p_j * v_scale_j) v_j from the fp8 V tile - v_scale folded into the
weight the same way. Output = acc / sum_j p_j, rounded once to bf16.

When to use it: `split_kv_fp8` groups the GQA heads of a KV head as MMA
rows and splits the context over programs (flash-decoding with an LSE combine): K/V bytes are
read once per KV head and long contexts at small batch fill the GPU. This kernel reads each fp8
tile once per query head (G = 4-8 times per KV head, from L2 after the first) and has only
B * Hq programs with no split, so at batch 1-16 with 32k-128k contexts expect it to lose badly;
it is the straightforward baseline (no MMA, no partials), the pattern for head sizes the MMA
cannot tile, and a check on `split_kv_fp8`'s combine. CPU interpreter timing is meaningless;
the H200 verify gives the figures.

Parameters: BN: tokens per K/V tile; num_warps as launched.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"BN": 32, "num_warps": 4}


@triton.jit
def _fp8_kv_head_fma(q_ptr, kc_ptr, vc_ptr, ks_ptr, vs_ptr, bt_ptr, len_ptr, o_ptr, scale, G,
                     s_qb, s_qh, s_kb, s_ks, s_kh, s_vb, s_vs, s_vh, s_ksb, s_kss, s_vsb, s_vss, s_bt, s_ob, s_oh,
                     P: tl.constexpr, D: tl.constexpr, D_PAD: tl.constexpr, BN: tl.constexpr):
    b = tl.program_id(0)
    h = tl.program_id(1)
    hk = h // G
    L = tl.load(len_ptr + b)
    d = tl.arange(0, D_PAD)
    dmask = d < D
    q = tl.load(q_ptr + b * s_qb + h * s_qh + d, mask=dmask, other=0.0).to(tl.float32) * (scale * 1.4426950408889634)
    m_i = -1e30
    l_i = 0.0
    acc = tl.zeros((D_PAD,), dtype=tl.float32)
    bt_row = bt_ptr + b.to(tl.int64) * s_bt
    for n0 in range(0, L, BN):
        tok = n0 + tl.arange(0, BN)
        tmask = tok < L
        page = tl.load(bt_row + tok // P, mask=tmask, other=0).to(tl.int64)
        slot = (tok % P).to(tl.int64)
        lmask = tmask[:, None] & dmask[None, :]
        k = tl.load(kc_ptr + (page * s_kb + slot * s_ks + hk * s_kh)[:, None] + d[None, :], mask=lmask,
                    other=0.0).to(tl.float32)
        ksc = tl.load(ks_ptr + page * s_ksb + slot * s_kss + hk, mask=tmask, other=0.0)
        s = tl.where(tmask, tl.sum(k * q[None, :], axis=1) * ksc, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=0))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=0)
        vsc = tl.load(vs_ptr + page * s_vsb + slot * s_vss + hk, mask=tmask, other=0.0)
        v = tl.load(vc_ptr + (page * s_vb + slot * s_vs + hk * s_vh)[:, None] + d[None, :], mask=lmask,
                    other=0.0).to(tl.float32)
        acc = acc * alpha + tl.sum((p * vsc)[:, None] * v, axis=0)
        m_i = m_new
    tl.store(o_ptr + b * s_ob + h * s_oh + d, (acc / l_i).to(o_ptr.dtype.element_ty), mask=dmask)


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, q, key_cache, value_cache, k_scale, v_scale, block_tables, seq_lens):
        B, HQ, D = q.shape
        _, P, HK, _ = key_cache.shape
        for sc in (k_scale, v_scale):
            if sc.stride(2) != 1:
                raise ValueError("k_scale / v_scale must be contiguous over the kv heads")
        o = torch.empty_like(q)
        _fp8_kv_head_fma[(B, HQ)](
            q, key_cache, value_cache, k_scale, v_scale, block_tables, seq_lens, o, self.scale, HQ // HK,
            q.stride(0), q.stride(1), key_cache.stride(0), key_cache.stride(1), key_cache.stride(2),
            value_cache.stride(0), value_cache.stride(1), value_cache.stride(2),
            k_scale.stride(0), k_scale.stride(1), v_scale.stride(0), v_scale.stride(1),
            block_tables.stride(0), o.stride(0), o.stride(1),
            P=P, D=D, D_PAD=triton.next_power_of_2(D), BN=AKA_PARAMS["BN"], num_warps=AKA_PARAMS["num_warps"])
        return o
