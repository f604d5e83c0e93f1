"""
---
id: kernels/mla_decode_attention/one_pass
op: mla_decode_attention
category: Fusion
dtypes: [bfloat16]
techniques: [paged-kv-cache, online-softmax, gather, tl-dot, one-pass-reduction, int64-offsets, masking]
params:
  BH: [16, 32, 64]
  BN: [16, 32, 64]
  num_warps: [4, 8]
  num_stages: [1, 2, 3]
summary: Absorbed-MLA decode without context splits. One program per (head block, sequence) walks the whole paged latent cache with heads as MMA rows (512-wide + 64-wide QK dots, P @ c from the same tile) and stores bf16 directly; one launch, no partials.
---
score[h, t] = (q_nope[h] . c[t] + q_pe[h] . k_pe[t]) * scale; out[h] = softmax(score[h]) @ c, with
the 576-wide cache row [c (512) | k_pe (64)] shared by all H heads and gathered through
block_tables.

Design (the no-split counterpart of kernels/mla_decode_attention/split_kv):
- Grid (cdiv(H, BH), B): each program reads its sequence's latent rows once for BH heads and
  finishes the softmax itself: no [B, H, splits, 512] fp32 partials (one split's partial,
  H * 512 * 4 bytes, equals the cache rows of about 1.8 * H tokens at 1152 bytes each, so at
  H 128 splits add real traffic) and no combine launch. Suited to batches where B * cdiv(H, BH) already fills the SMs (B >= 64 at H 128 and
  BH 64, B >= 132 at H 16); at batch 1-16 most SMs idle and split_kv is the family to use.
- Heads are the M dimension: per BN gathered tokens, c [BN, 512] and k_pe [BN, 64] are loaded
  once and used by q_nope c^T + q_pe k_pe^T ([BH, BN]) and by P @ c ([BH, 512]). The head blocks
  of one sequence run back to back (head block is the fastest grid axis) so the 2nd..nth read of
  a latent tile comes from L2.
- Base-2 online softmax in fp32 (scale * log2(e) folded, finite -1e30 start), P in bf16 for the
  P @ c dot, one bf16 rounding of acc / l. Tokens gathered through block_tables with int64 page
  offsets, masked by index (t < seq_lens[b]). Widths that are not powers of two are padded with
  masks (small shapes); num_stages is clamped so the cache-tile stages plus the q tile stay
  within about 200 KB of shared memory. Register budget: the [BH, 512] fp32 accumulator is 64
  registers per thread at BH 32 on 8 warps; BH 64 wants 8 warps.
"""
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"BH": 32, "BN": 32, "num_warps": 8, "num_stages": 2}

_SMEM_BUDGET = 200 * 1024


@triton.jit
def _mla_one_pass(qn_ptr, qp_ptr, kv_ptr, bt_ptr, len_ptr, o_ptr, qk_scale, H,
                  s_qnb, s_qnh, s_qpb, s_qph, s_kvb, s_kvs, s_bt, s_ob, s_oh,
                  DC: tl.constexpr, DR: tl.constexpr, DC_PAD: tl.constexpr, DR_PAD: tl.constexpr,
                  P: tl.constexpr, BH: tl.constexpr, BN: tl.constexpr):
    hb = tl.program_id(0)
    b = tl.program_id(1)
    L = tl.load(len_ptr + b)
    heads = hb * BH + tl.arange(0, BH)
    hmask = heads < H
    dc = tl.arange(0, DC_PAD)
    dr = tl.arange(0, DR_PAD)
    cmask = dc < DC
    rmask = dr < DR
    q_n = tl.load(qn_ptr + b * s_qnb + heads[:, None] * s_qnh + dc[None, :],
                  mask=hmask[:, None] & cmask[None, :], other=0.0)
    q_p = tl.load(qp_ptr + b * s_qpb + heads[:, None] * s_qph + dr[None, :],
                  mask=hmask[:, None] & rmask[None, :], other=0.0)
    m_i = tl.full((BH,), -1e30, dtype=tl.float32)
    l_i = tl.zeros((BH,), dtype=tl.float32)
    acc = tl.zeros((BH, DC_PAD), dtype=tl.float32)
    bt_row = bt_ptr + b.to(tl.int64) * s_bt
    for n0 in range(0, L, BN):
        tok = n0 + tl.arange(0, BN)
        tmask = tok < L
        page = tl.load(bt_row + tok // P, mask=tmask, other=0).to(tl.int64)
        row = kv_ptr + (page * s_kvb + (tok % P).to(tl.int64) * s_kvs)[:, None]
        c = tl.load(row + dc[None, :], mask=tmask[:, None] & cmask[None, :], other=0.0)
        kpe = tl.load(row + DC + dr[None, :], mask=tmask[:, None] & rmask[None, :], other=0.0)
        s = tl.dot(q_n, tl.trans(c)) + tl.dot(q_p, tl.trans(kpe))
        s = tl.where(tmask[None, :], s * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(c.dtype), c)
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(o_ptr + b * s_ob + heads[:, None] * s_oh + dc[None, :], out.to(o_ptr.dtype.element_ty),
             mask=hmask[:, None] & cmask[None, :])


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, q_nope, q_pe, kv_c_and_k_pe, block_tables, seq_lens):
        B, H, DC = q_nope.shape
        DR = q_pe.shape[2]
        P = kv_c_and_k_pe.shape[1]
        p = AKA_PARAMS
        bh, bn = p["BH"], p["BN"]
        dc_pad = max(16, triton.next_power_of_2(DC))
        dr_pad = max(16, triton.next_power_of_2(DR))
        el = q_nope.element_size()
        stage = bn * (dc_pad + dr_pad) * el
        stages = max(1, min(p["num_stages"], (_SMEM_BUDGET - bh * (dc_pad + dr_pad) * el) // stage))
        o = torch.empty_like(q_nope)
        _mla_one_pass[(triton.cdiv(H, bh), B)](
            q_nope, q_pe, kv_c_and_k_pe, block_tables, seq_lens, o, self.scale * math.log2(math.e), H,
            q_nope.stride(0), q_nope.stride(1), q_pe.stride(0), q_pe.stride(1),
            kv_c_and_k_pe.stride(0), kv_c_and_k_pe.stride(1), block_tables.stride(0),
            o.stride(0), o.stride(1),
            DC=DC, DR=DR, DC_PAD=dc_pad, DR_PAD=dr_pad, P=P, BH=bh, BN=bn,
            num_warps=p["num_warps"], num_stages=stages)
        return o
