"""
---
id: kernels/softcap_window_decode_attention/split_window
op: softcap_window_decode_attention
category: Fusion
dtypes: [bfloat16]
techniques: [sliding-window, logit-softcap, split-kv, flash-decoding, log-sum-exp-combine, gqa-grouping, paged-kv-cache, online-softmax, gather, tl-dot, int64-offsets, masking]
params:
  SPLIT_TOKENS: [256, 512, 1024, 2048]
  BN: [16, 32, 64]
  num_warps: [4, 8]
  num_stages: [1, 2, 3]
summary: Flash-decoding restricted to the window. Each sequence's keys [max(0, L - window), L) are cut into splits of at most SPLIT_TOKENS (halved while B * Hkv * splits < 264); one program per (KV head, sequence, split) runs an online softmax over soft-capped scores with the GQA group as MMA rows, writes an fp32 partial and its base-2 LSE, and a combine launch merges them. Tokens before the window are never gathered.
---
out[b, h] = softmax_j(softcap * tanh(scale * q.k_j / softcap)) V over max(0, L - window) <= j < L.

Design:
- Bytes follow the window, not the context: a Gemma-2 local layer reads at most 4096 tokens of
  the 8192 context, Gemma-3 at most 1024 of up to 128k. The splits are laid over the window span
  [max(0, L - window), L) of each sequence, so the grid is sized from min(window, table width),
  not the context, and splits past a short sequence return at once.
- Parallelism: B * Hkv programs is 8 at batch 1 (Gemma-2-9B), so the span is cut into splits of
  at most SPLIT_TOKENS tokens, halved on the host (down to one 16-token page) until
  B * Hkv * splits >= 264, two programs per SM on the 132-SM H200.
- Soft-cap in fp32 on the raw score before the running max: tanh(y) = 1 - 2 / (exp2(2 y log2 e) + 1),
  which saturates cleanly to +-1 (exp2 overflow gives 1, underflow -1); the capped score is then
  scaled by log2(e) for a base-2 online softmax. Capped scores lie in [-softcap, softcap], so the
  first tile's maximum cannot overflow exp2 in the rescale. softcap <= 0 (Gemma-3) is a
  compile-time branch without the tanh.
- GQA: the Hq / Hkv query heads of a KV head are the rows of one [GP, D] tile (GP >= 16 for
  tl.dot); head_dim 256 (Gemma-2-9B) makes a [64, 256] bf16 K tile 32 KB, so BN stays <= 64.
- Gather through block_tables[b, j // P] with int64 page offsets; tokens outside [lo, L) are
  masked by index, stale padding is never dereferenced. P rounded to bf16 for P @ V; one bf16
  rounding of the combined output. The combine reads only the cdiv(span, SPLIT) splits a
  sequence has; one split for every sequence means no combine launch.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {'SPLIT_TOKENS': 512, 'BN': 32, 'num_warps': 4, 'num_stages': 2}  # set by the offline proposer

TARGET_PROGRAMS = 264        # 2 programs per SM on the 132-SM H200
MIN_SPLIT = 16               # one vLLM page


@triton.jit
def _window_split(q_ptr, kc_ptr, vc_ptr, bt_ptr, len_ptr, o_ptr, po_ptr, lse_ptr, scale, softcap, window,
                  s_qb, s_qh, s_kb, s_ks, s_kh, s_vb, s_vs, s_vh, s_bt, s_ob, s_oh, G, NSPLIT,
                  P: tl.constexpr, D: tl.constexpr, D_PAD: tl.constexpr, GP: tl.constexpr,
                  BN: tl.constexpr, SPLIT_TOKENS: tl.constexpr, CAP: tl.constexpr, DIRECT: tl.constexpr):
    g = tl.program_id(0)
    b = tl.program_id(1)
    sp = tl.program_id(2)
    L = tl.load(len_ptr + b)
    first = tl.maximum(L - window, 0)
    lo = first + sp * SPLIT_TOKENS
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
        s = tl.dot(q, tl.trans(k)) * scale
        if CAP:
            t = 1.0 - 2.0 / (tl.exp2(s * (2.8853900817779268 / softcap)) + 1.0)
            s = softcap * t
        s = tl.where(tmask[None, :], s * 1.4426950408889634, float("-inf"))
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
def _combine(po_ptr, lse_ptr, len_ptr, o_ptr, HQ, NSPLIT, window, s_ob, s_oh,
             D: tl.constexpr, D_PAD: tl.constexpr, SP_PAD: tl.constexpr, SC: tl.constexpr,
             SPLIT_TOKENS: tl.constexpr):
    bh = tl.program_id(0)
    b = bh // HQ
    h = bh % HQ
    L = tl.load(len_ptr + b)
    n_valid = tl.cdiv(L - tl.maximum(L - window, 0), SPLIT_TOKENS)
    base = bh.to(tl.int64) * NSPLIT
    s_all = tl.arange(0, SP_PAD)
    mx = tl.max(tl.load(lse_ptr + base + s_all, mask=s_all < n_valid, other=float("-inf")), axis=0)
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
    def __init__(self, scale, softcap, window):
        super().__init__()
        self.scale = scale
        self.softcap = softcap
        self.window = window

    def forward(self, q, key_cache, value_cache, block_tables, seq_lens):
        B, HQ, D = q.shape
        _, P, HK, _ = key_cache.shape
        G = HQ // HK
        p = AKA_PARAMS
        span = min(self.window, block_tables.shape[1] * P)
        split = p["SPLIT_TOKENS"]
        while split > MIN_SPLIT and B * HK * triton.cdiv(span, split) < TARGET_PROGRAMS:
            split //= 2
        nsplit = triton.cdiv(span, split)
        d_pad = max(16, triton.next_power_of_2(D))
        o = torch.empty_like(q)
        direct = nsplit == 1
        po = o if direct else torch.empty((B * HQ * nsplit, d_pad), dtype=torch.float32, device=q.device)
        lse = o if direct else torch.empty((B * HQ * nsplit,), dtype=torch.float32, device=q.device)
        cap = self.softcap > 0
        _window_split[(HK, B, nsplit)](
            q, key_cache, value_cache, block_tables, seq_lens, o, po, lse, self.scale,
            self.softcap if cap else 1.0, self.window,
            q.stride(0), q.stride(1), key_cache.stride(0), key_cache.stride(1), key_cache.stride(2),
            value_cache.stride(0), value_cache.stride(1), value_cache.stride(2), block_tables.stride(0),
            o.stride(0), o.stride(1), G, nsplit,
            P=P, D=D, D_PAD=d_pad, GP=max(16, triton.next_power_of_2(G)), BN=p["BN"],
            SPLIT_TOKENS=split, CAP=cap, DIRECT=direct, num_warps=p["num_warps"], num_stages=p["num_stages"])
        if not direct:
            sc = 16
            _combine[(B * HQ,)](po, lse, seq_lens, o, HQ, nsplit, self.window, o.stride(0), o.stride(1),
                                D=D, D_PAD=d_pad, SP_PAD=max(sc, triton.next_power_of_2(nsplit)), SC=sc,
                                SPLIT_TOKENS=split, num_warps=4)
        return o
