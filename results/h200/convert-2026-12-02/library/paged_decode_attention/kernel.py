"""
---
id: kernels/paged_decode_attention/split_kv
op: paged_decode_attention
category: Fusion
dtypes: [bfloat16]
techniques: [split-kv, flash-decoding, log-sum-exp-combine, gqa-grouping, paged-kv-cache, online-softmax, gather, tl-dot, int64-offsets, masking]
params:
  SPLIT_TOKENS: [256, 512, 1024, 2048]
  BN: [16, 32, 64, 128]
  num_warps: [2, 4, 8]
  num_stages: [1, 2, 3]
summary: Flash-decoding over a paged cache. Grid (KV head, sequence, context split of at most SPLIT_TOKENS, smaller when B * Hkv leaves SMs idle); the GQA group's query heads form one MMA tile so K/V are read once per KV head; per-split fp32 partial output and base-2 LSE, merged by a second kernel (skipped when one split covers the longest possible context).
---
o[b, h] = softmax_j (q[b, h] . K[b, j, h // G] * scale) V[b, j, h // G] over j < seq_lens[b], with
K/V rows gathered through block_tables from a [num_blocks, P, Hkv, D] cache.

Design:
- Parallelism: B * Hkv programs is 8 at batch 1 (Llama-3.1-8B), far under 132 SMs, so the
  context is cut into splits of at most SPLIT_TOKENS tokens (vLLM's PagedAttention v2 uses
  512), halved on the host (down to one 16-token page) until B * Hkv * splits >= 264, two
  programs per SM. Grid (Hkv, B, cdiv(max_blocks * P, split)), sized from the block-table
  width, which bounds every sequence without reading seq_lens on the host; splits past a
  sequence's length return at once.
- GQA: the G = Hq / Hkv query heads of a KV head are the rows of a [GP, D] q tile (GP = G padded
  to >= 16 for tl.dot); each gathered [BN, D] K/V tile serves all of them.
- Gather: token j of sequence b lives at block_tables[b, j // P], slot j % P; offsets are int64
  (page * block stride reaches 2^31 with large pools). Tokens >= seq_lens[b] are masked by index
  (the last page and the padding entries of the table hold stale data).
- Online softmax in base 2 (scale * log2(e) folded), fp32 accumulator; each split writes
  acc / l and lse = m + log2(l). `_combine` weights the splits of a (b, h) by exp2(lse - max),
  reading only the cdiv(seq_len, SPLIT_TOKENS) splits that exist, and rounds once to bf16.
- When one split covers the whole table width (short contexts), the split kernel normalises
  and stores bf16 itself and no combine is launched.
- Head dims that are not powers of two (small shapes: 24, 48, 80) are padded with masks.
"""
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {'SPLIT_TOKENS': 512, 'BN': 64, 'num_warps': 4, 'num_stages': 2}  # set by the offline proposer

TARGET_PROGRAMS = 264        # 2 programs per SM on the 132-SM H100/H200
MIN_SPLIT = 16               # one vLLM page


@triton.jit
def _decode_split(q_ptr, kc_ptr, vc_ptr, bt_ptr, len_ptr, o_ptr, po_ptr, lse_ptr, qk_scale,
                  s_qb, s_qh, s_kb, s_ks, s_kh, s_vb, s_vs, s_vh, s_bt, s_ob, s_oh, G, NSPLIT,
                  P: tl.constexpr, D: tl.constexpr, D_PAD: tl.constexpr, GP: tl.constexpr,
                  BN: tl.constexpr, SPLIT_TOKENS: tl.constexpr, DIRECT: tl.constexpr):
    g = tl.program_id(0)
    b = tl.program_id(1)
    sp = tl.program_id(2)
    L = tl.load(len_ptr + b)
    lo = sp * SPLIT_TOKENS
    if lo >= L:
        return
    hi = tl.minimum(lo + SPLIT_TOKENS, L)
    r = tl.arange(0, GP)
    head = g * G + r
    hmask = r < G
    d = tl.arange(0, D_PAD)
    dmask = d < D
    q = tl.load(q_ptr + b * s_qb + head[:, None] * s_qh + d[None, :],
                mask=hmask[:, None] & dmask[None, :], other=0.0)
    m_i = tl.full((GP,), -1e30, dtype=tl.float32)
    l_i = tl.zeros((GP,), dtype=tl.float32)
    acc = tl.zeros((GP, D_PAD), dtype=tl.float32)
    bt_row = bt_ptr + b.to(tl.int64) * s_bt
    for n0 in range(lo, hi, BN):
        tok = n0 + tl.arange(0, BN)
        tmask = tok < hi
        page = tl.load(bt_row + tok // P, mask=tmask, other=0).to(tl.int64)
        slot = (tok % P).to(tl.int64)
        k = tl.load(kc_ptr + (page * s_kb + slot * s_ks + g * s_kh)[:, None] + d[None, :],
                    mask=tmask[:, None] & dmask[None, :], other=0.0)
        s = tl.dot(q, tl.trans(k)) * qk_scale
        s = tl.where(tmask[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(vc_ptr + (page * s_vb + slot * s_vs + g * s_vh)[:, None] + d[None, :],
                    mask=tmask[:, None] & dmask[None, :], other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    out = acc / l_i[:, None]
    if DIRECT:
        tl.store(o_ptr + b * s_ob + head[:, None] * s_oh + d[None, :], out.to(o_ptr.dtype.element_ty),
                 mask=hmask[:, None] & dmask[None, :])
    else:
        row = (b * (G * tl.num_programs(0)) + head).to(tl.int64) * NSPLIT + sp    # [B, Hq, NSPLIT]
        tl.store(po_ptr + row[:, None] * D_PAD + d[None, :], out, mask=hmask[:, None])
        tl.store(lse_ptr + row, m_i + tl.log2(l_i), mask=hmask)


@triton.jit
def _combine(po_ptr, lse_ptr, len_ptr, o_ptr, HQ, NSPLIT, s_ob, s_oh,
             D: tl.constexpr, D_PAD: tl.constexpr, SP_PAD: tl.constexpr, SC: tl.constexpr,
             SPLIT_TOKENS: tl.constexpr):
    bh = tl.program_id(0)
    b = bh // HQ
    h = bh % HQ
    n_valid = tl.cdiv(tl.load(len_ptr + b), SPLIT_TOKENS)
    base = bh.to(tl.int64) * NSPLIT
    s_all = tl.arange(0, SP_PAD)
    lse = tl.load(lse_ptr + base + s_all, mask=s_all < n_valid, other=float("-inf"))
    mx = tl.max(lse, axis=0)
    d = tl.arange(0, D_PAD)
    acc = tl.zeros((D_PAD,), dtype=tl.float32)
    wacc = tl.zeros((SC,), dtype=tl.float32)
    for s0 in range(0, n_valid, SC):
        s = s0 + tl.arange(0, SC)
        sm = s < n_valid
        w = tl.exp2(tl.load(lse_ptr + base + s, mask=sm, other=float("-inf")) - mx)
        po = tl.load(po_ptr + (base + s)[:, None] * D_PAD + d[None, :], mask=sm[:, None], other=0.0)
        acc += tl.sum(po * w[:, None], axis=0)
        wacc += w
    tl.store(o_ptr + b * s_ob + h * s_oh + d, (acc / tl.sum(wacc, axis=0)).to(o_ptr.dtype.element_ty), mask=d < D)


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, q, key_cache, value_cache, block_tables, seq_lens):
        B, HQ, D = q.shape
        _, P, HK, _ = key_cache.shape
        G = HQ // HK
        p = AKA_PARAMS
        bn = p["BN"]
        max_ctx = block_tables.shape[1] * P
        split = p["SPLIT_TOKENS"]
        while split > MIN_SPLIT and B * HK * triton.cdiv(max_ctx, split) < TARGET_PROGRAMS:
            split //= 2
        nsplit = triton.cdiv(max_ctx, split)
        d_pad = max(16, triton.next_power_of_2(D))
        o = torch.empty_like(q)
        direct = nsplit == 1
        po = o if direct else torch.empty((B * HQ * nsplit, d_pad), dtype=torch.float32, device=q.device)
        lse = o if direct else torch.empty((B * HQ * nsplit,), dtype=torch.float32, device=q.device)
        _decode_split[(HK, B, nsplit)](
            q, key_cache, value_cache, block_tables, seq_lens, o, po, lse, self.scale * math.log2(math.e),
            q.stride(0), q.stride(1), key_cache.stride(0), key_cache.stride(1), key_cache.stride(2),
            value_cache.stride(0), value_cache.stride(1), value_cache.stride(2), block_tables.stride(0),
            o.stride(0), o.stride(1), G, nsplit,
            P=P, D=D, D_PAD=d_pad, GP=max(16, triton.next_power_of_2(G)), BN=bn, SPLIT_TOKENS=split,
            DIRECT=direct, num_warps=p["num_warps"], num_stages=p["num_stages"])
        if not direct:
            _combine[(B * HQ,)](po, lse, seq_lens, o, HQ, nsplit, o.stride(0), o.stride(1),
                                D=D, D_PAD=d_pad, SP_PAD=triton.next_power_of_2(nsplit), SC=16,
                                SPLIT_TOKENS=split, num_warps=4)
        return o
