"""
---
id: kernels/mla_decode_attention/split_kv
op: mla_decode_attention
category: Fusion
dtypes: [bfloat16]
techniques: [split-kv, flash-decoding, log-sum-exp-combine, paged-kv-cache, online-softmax, gather, tl-dot, int64-offsets, masking]
params:
  BH: [16, 32, 64]
  BN: [16, 32, 64]
  SPLIT_TOKENS: [512, 1024, 2048, 4096]
  num_warps: [4, 8]
  num_stages: [1, 2, 3]
summary: Absorbed-MLA decode with heads as MMA rows. Grid (head block, sequence, context split); each gathered [BN, 576] latent tile feeds a 512-wide and a 64-wide QK dot for BH heads and the P @ c dot; base-2 online softmax; per-split fp32 partials merged by a LSE-weighted combine kernel, skipped when one split suffices.
---
score[h, t] = (q_nope[h] . c[t] + q_pe[h] . k_pe[t]) * scale; out[h] = softmax(score[h]) @ c, with
the 576-wide cache row [c (512) | k_pe (64)] shared by all H heads and gathered through
block_tables.

Design:
- All heads read the same cache row, so heads are the M dimension of both GEMMs: a program owns
  BH heads of one sequence; per BN gathered tokens it loads c [BN, 512] and k_pe [BN, 64] once
  and computes q_nope c^T + q_pe k_pe^T ([BH, BN]) and P c ([BH, 512]). 576 is not a power of
  two: the score is a 512-wide dot plus a 64-wide dot, and V is the c tile already in shared
  memory (the rope part never enters the output).
- Parallelism: B * cdiv(H, BH) programs (1 x 2 at batch 1, H 128, BH 64), so the context is cut
  into splits of at most SPLIT_TOKENS, halved (down to 16 tokens) until B * head blocks *
  splits >= 132, one program per SM: an MLA program is heavy (H 128 shapes are compute-bound,
  ~242 FLOP per cache byte) and a partial is H * 512 fp32 per split, so fewer, longer splits than
  for GQA decode. Splits past a sequence's length return at once.
- Partials: acc / l and lse = m + log2(l) per (b, h, split); `_combine` weights the cdiv(len,
  split) existing splits by exp2(lse - max) and rounds once to bf16. With one split the main
  kernel normalises and stores bf16 itself (no combine launch).
- Tokens are gathered through block_tables[b, t // P] with int64 page offsets and masked by
  index (t < seq_lens[b]); scale * log2(e) folded into one multiply; finite -1e30 running max;
  P in bf16 for the P @ c dot. Latent/rope widths that are not powers of two (small shapes: 80,
  48, 40 / 24, 16, 8) are padded with masks. num_stages is clamped so the cache-tile stages plus
  the q tile stay within about 200 KB of shared memory.
"""
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {'BH': 32, 'BN': 32, 'SPLIT_TOKENS': 2048, 'num_warps': 8, 'num_stages': 2}  # set by the offline proposer

TARGET_PROGRAMS = 132        # one program per SM on H100/H200
MIN_SPLIT = 16
_SMEM_BUDGET = 200 * 1024


@triton.jit
def _mla_split(qn_ptr, qp_ptr, kv_ptr, bt_ptr, len_ptr, o_ptr, po_ptr, lse_ptr, qk_scale, H, NSPLIT,
               s_qnb, s_qnh, s_qpb, s_qph, s_kvb, s_kvs, s_bt, s_ob, s_oh,
               DC: tl.constexpr, DR: tl.constexpr, DC_PAD: tl.constexpr, DR_PAD: tl.constexpr,
               P: tl.constexpr, BH: tl.constexpr, BN: tl.constexpr, SPLIT_TOKENS: tl.constexpr,
               DIRECT: tl.constexpr):
    hb = tl.program_id(0)
    b = tl.program_id(1)
    sp = tl.program_id(2)
    L = tl.load(len_ptr + b)
    lo = sp * SPLIT_TOKENS
    if lo >= L:
        return
    hi = tl.minimum(lo + SPLIT_TOKENS, L)
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
    for n0 in range(lo, hi, BN):
        tok = n0 + tl.arange(0, BN)
        tmask = tok < hi
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
    if DIRECT:
        tl.store(o_ptr + b * s_ob + heads[:, None] * s_oh + dc[None, :], out.to(o_ptr.dtype.element_ty),
                 mask=hmask[:, None] & cmask[None, :])
    else:
        row_id = (b * H + heads).to(tl.int64) * NSPLIT + sp          # [B, H, NSPLIT]
        tl.store(po_ptr + row_id[:, None] * DC_PAD + dc[None, :], out, mask=hmask[:, None])
        tl.store(lse_ptr + row_id, m_i + tl.log2(l_i), mask=hmask)


@triton.jit
def _combine(po_ptr, lse_ptr, len_ptr, o_ptr, H, NSPLIT, s_ob, s_oh,
             DC: tl.constexpr, DC_PAD: tl.constexpr, SP_PAD: tl.constexpr, SC: tl.constexpr,
             SPLIT_TOKENS: tl.constexpr):
    bh = tl.program_id(0)
    b = bh // H
    h = bh % H
    n_valid = tl.cdiv(tl.load(len_ptr + b), SPLIT_TOKENS)
    base = bh.to(tl.int64) * NSPLIT
    s_all = tl.arange(0, SP_PAD)
    mx = tl.max(tl.load(lse_ptr + base + s_all, mask=s_all < n_valid, other=float("-inf")), axis=0)
    d = tl.arange(0, DC_PAD)
    acc = tl.zeros((DC_PAD,), dtype=tl.float32)
    wacc = tl.zeros((SC,), dtype=tl.float32)
    for s0 in range(0, n_valid, SC):
        s = s0 + tl.arange(0, SC)
        sm = s < n_valid
        w = tl.exp2(tl.load(lse_ptr + base + s, mask=sm, other=float("-inf")) - mx)
        po = tl.load(po_ptr + (base + s)[:, None] * DC_PAD + d[None, :], mask=sm[:, None], other=0.0)
        acc += tl.sum(po * w[:, None], axis=0)
        wacc += w
    tl.store(o_ptr + b * s_ob + h * s_oh + d, (acc / tl.sum(wacc, axis=0)).to(o_ptr.dtype.element_ty),
             mask=d < DC)


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
        n_hb = triton.cdiv(H, bh)
        max_ctx = block_tables.shape[1] * P
        split = p["SPLIT_TOKENS"]
        while split > MIN_SPLIT and B * n_hb * triton.cdiv(max_ctx, split) < TARGET_PROGRAMS:
            split //= 2
        nsplit = triton.cdiv(max_ctx, split)
        direct = nsplit == 1
        el = q_nope.element_size()
        stage = bn * (dc_pad + dr_pad) * el
        stages = max(1, min(p["num_stages"], (_SMEM_BUDGET - bh * (dc_pad + dr_pad) * el) // stage))
        o = torch.empty_like(q_nope)
        po = o if direct else torch.empty((B * H * nsplit, dc_pad), dtype=torch.float32, device=o.device)
        lse = o if direct else torch.empty((B * H * nsplit,), dtype=torch.float32, device=o.device)
        _mla_split[(n_hb, B, nsplit)](
            q_nope, q_pe, kv_c_and_k_pe, block_tables, seq_lens, o, po, lse,
            self.scale * math.log2(math.e), H, nsplit,
            q_nope.stride(0), q_nope.stride(1), q_pe.stride(0), q_pe.stride(1),
            kv_c_and_k_pe.stride(0), kv_c_and_k_pe.stride(1), block_tables.stride(0),
            o.stride(0), o.stride(1),
            DC=DC, DR=DR, DC_PAD=dc_pad, DR_PAD=dr_pad, P=P, BH=bh, BN=bn, SPLIT_TOKENS=split,
            DIRECT=direct, num_warps=p["num_warps"], num_stages=stages)
        if not direct:
            _combine[(B * H,)](po, lse, seq_lens, o, H, nsplit, o.stride(0), o.stride(1),
                               DC=DC, DC_PAD=dc_pad, SP_PAD=triton.next_power_of_2(nsplit), SC=16,
                               SPLIT_TOKENS=split, num_warps=4)
        return o
