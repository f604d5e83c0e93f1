"""
---
id: kernels/prefill_attention/gqa_packed
op: prefill_attention
category: Fusion
dtypes: [bfloat16]
techniques: [flash-attention, online-softmax, causal-block-skipping, gqa, gqa-grouping, tl-dot, log-sum-exp, fp32-accumulation, int64-offsets, masking]
params:
  BM: [64, 128]
  BN: [32, 64, 128]
  num_warps: [4, 8]
  num_stages: [1, 2, 3]
summary: FlashAttention forward with the GQA group packed into the MMA's M dimension. One program per (KV head, BM/G query tokens x the G query heads sharing it), so every K/V tile is fetched from memory once per group, not once per query head, and the causal diagonal band is only BM/G tokens wide; varlen tiles found in-kernel from cu_seqlens.
---
Causal GQA attention, q [T, Hq, D], k/v [T, Hkv, D], sequences delimited by cu_seqlens.

Design (differs from kernels/prefill_attention/flash_varlen in what a tile is):
- A tile is BT = BM / GP consecutive query tokens times the GP (G = Hq/Hkv rounded up to a power
  of two) query heads of one KV head: row r is token t0 + r // GP, head g*G + r % GP. For a
  fixed token those heads are adjacent in memory (q[t, g*G:(g+1)*G, :]), so the q tile is BT
  contiguous runs of G*D elements. A K/V tile is fetched from L2/DRAM once for all G heads
  (flash_varlen fetches it G times and counts on L2 hits between neighbouring head programs);
  the shared-memory-to-MMA traffic per FLOP is the same in both. Padding rows (G not a power
  of two: Qwen2.5-7B's 7) compute on zeros and are never stored.
- The causal boundary is per token, so the diagonal band of a tile spans only BT keys (fewer
  masked-away MMA FLOPs than a BM-token band): keys
  [0, lo) with lo = floor(t0 / BN) * BN are visible to every row (no mask); keys [lo,
  min(t0 + BT, S)) are masked with key <= token(r) and key < S.
- Grid (Hkv, cdiv(T, BT) + num_seqs): a bound on the (sequence, tile) pairs, so no host sync;
  each program finds its sequence from a cumsum over cu_seqlens, the last tiles run first.
- fp32 scores with scale * log2(e) folded, exp2 online softmax from a finite -1e30 start,
  P in bf16 for the P @ V dot, one bf16 rounding of acc / l. D padded to a power of two with
  masks (small shapes: 24, 48, 80); for D 256 the host caps BM and BN at 64; num_stages clamped
  to about 200 KB of K/V buffers.
- Offline compile (sm_90a, triton 3.6, `aka kb compile-check --op prefill_attention --shapes all`):
  where the D 256 cap makes BM 64, num_warps stays 8, and the QK dot, whose scores feed the PV
  dot, gets all 8 warps on M: both warpgroups compute the whole [64, BN] score ("dot 64x64
  computed 2x"; triton/tl-dot, How the warps split a dot). flash_dispatch's tuned D 256 rows
  (BM 128 on 8 warps) do not. 4 warps at BM 64 would do each score once; not timed on a GPU.
Best when G is large and sequences short (K/V traffic matters); with G = 1 it is flash_varlen
with a different grid.
"""
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"BM": 128, "BN": 64, "num_warps": 8, "num_stages": 2}

_SMEM_BUDGET = 200 * 1024


@triton.jit
def _flash_gqa_packed(q_ptr, k_ptr, v_ptr, o_ptr, cu_ptr, NS, n_tiles, qk_scale,
                      s_qt, s_qh, s_kt, s_kh, s_vt, s_vh, s_ot, s_oh, G,
                      D: tl.constexpr, D_PAD: tl.constexpr, NS_PAD: tl.constexpr,
                      GP: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    g = tl.program_id(0)
    tile = n_tiles - 1 - tl.program_id(1)
    i = tl.arange(0, NS_PAD)
    lo_b = tl.load(cu_ptr + i, mask=i < NS, other=0)
    hi_b = tl.load(cu_ptr + i + 1, mask=i < NS, other=0)
    tiles = (hi_b - lo_b + BM // GP - 1) // (BM // GP)          # BM // GP tokens per tile
    incl = tl.cumsum(tiles, axis=0)
    seq = tl.sum((incl <= tile).to(tl.int32), axis=0)
    if seq >= NS:
        return
    m = tile - tl.sum(tl.where(i == seq, incl - tiles, 0), axis=0)
    start = tl.sum(tl.where(i == seq, lo_b, 0), axis=0).to(tl.int64)
    S = tl.sum(tl.where(i == seq, hi_b - lo_b, 0), axis=0)

    r = tl.arange(0, BM)
    t0 = m * (BM // GP)
    tok = t0 + r // GP
    head = g * G + r % GP
    rmask = (tok < S) & (r % GP < G)
    rd = tl.arange(0, D_PAD)
    dmask = rd < D
    q_off = (start + tok)[:, None] * s_qt + head[:, None] * s_qh + rd[None, :]
    q = tl.load(q_ptr + q_off, mask=rmask[:, None] & dmask[None, :], other=0.0)
    m_i = tl.full((BM,), -1e30, dtype=tl.float32)
    l_i = tl.zeros((BM,), dtype=tl.float32)
    acc = tl.zeros((BM, D_PAD), dtype=tl.float32)
    rn0 = tl.arange(0, BN)
    k_base = k_ptr + g * s_kh + rd[None, :]
    v_base = v_ptr + g * s_vh + rd[None, :]

    lo = t0 // BN * BN
    for n0 in range(0, lo, BN):                           # visible to every row: no mask
        rows = (start + n0 + rn0)[:, None]
        k = tl.load(k_base + rows * s_kt, mask=dmask[None, :], other=0.0)
        s = tl.dot(q, tl.trans(k)) * qk_scale
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_base + rows * s_vt, mask=dmask[None, :], other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new

    hi = tl.minimum(t0 + BM // GP, S)
    for n0 in range(lo, hi, BN):                          # diagonal band
        rn = n0 + rn0
        rows = (start + rn)[:, None]
        kmask = rn < S
        k = tl.load(k_base + rows * s_kt, mask=kmask[:, None] & dmask[None, :], other=0.0)
        s = tl.dot(q, tl.trans(k)) * qk_scale
        s = tl.where((rn[None, :] <= tok[:, None]) & kmask[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_base + rows * s_vt, mask=kmask[:, None] & dmask[None, :], other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new

    out = acc / l_i[:, None]
    o_off = (start + tok)[:, None] * s_ot + head[:, None] * s_oh + rd[None, :]
    tl.store(o_ptr + o_off, out.to(o_ptr.dtype.element_ty), mask=rmask[:, None] & dmask[None, :])


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, q, k, v, cu_seqlens):
        T, HQ, D = q.shape
        HK = k.shape[1]
        G = HQ // HK
        gp = triton.next_power_of_2(G)
        ns = cu_seqlens.shape[0] - 1
        o = torch.empty_like(q)
        p = AKA_PARAMS
        d_pad = max(16, triton.next_power_of_2(D))
        bm, bn = p["BM"], p["BN"]
        if d_pad >= 256:
            bm, bn = min(bm, 64), min(bn, 64)
        bm = max(bm, gp)                      # at least one token per tile
        kv_stage = 2 * bn * d_pad * q.element_size()
        stages = max(1, min(p["num_stages"], (_SMEM_BUDGET - bm * d_pad * q.element_size()) // kv_stage))
        n_tiles = triton.cdiv(T, bm // gp) + ns
        _flash_gqa_packed[(HK, n_tiles)](
            q, k, v, o, cu_seqlens, ns, n_tiles, self.scale * math.log2(math.e),
            q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
            o.stride(0), o.stride(1), G,
            D=D, D_PAD=d_pad, NS_PAD=max(2, triton.next_power_of_2(ns)), GP=gp, BM=bm, BN=bn,
            num_warps=p["num_warps"], num_stages=stages)
        return o
