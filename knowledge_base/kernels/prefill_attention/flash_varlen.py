"""
---
id: kernels/prefill_attention/flash_varlen
op: prefill_attention
category: Fusion
dtypes: [bfloat16]
techniques: [flash-attention, online-softmax, causal-block-skipping, gqa, tl-dot, log-sum-exp, fp32-accumulation, software-pipelining, int64-offsets, masking]
params:
  BM: [64, 128]
  BN: [32, 64, 128]
  num_warps: [4, 8]
  num_stages: [1, 2, 3]
summary: FlashAttention-2 forward over packed varlen sequences. One program per (q head, BM query rows of one sequence), tiles found in-kernel from cu_seqlens (no host sync); unmasked KV blocks left of the diagonal, then the masked diagonal band; exp2 online softmax in fp32.
---
Causal GQA attention, q [T, Hq, D], k/v [T, Hkv, D], sequences delimited by cu_seqlens.

Design:
- Grid (Hq, cdiv(T, BM) + num_seqs): the second axis is a bound on the number of (sequence,
  query tile) pairs, sum_i ceil(len_i / BM) <= T / BM + num_seqs, so the grid is known without
  reading cu_seqlens on the host (no .tolist() sync, CUDA-graph safe). Each program locates its
  sequence from a cumsum of per-sequence tile counts; programs past the last tile return.
- Tiles are visited in reverse (last tiles of a sequence do the most KV steps: start them
  first so short tiles fill the tail). Head is the fastest grid axis, so the Hq/Hkv query heads
  sharing a KV head run back to back and read its K/V tiles from L2.
- Causal block skipping: keys [0, lo) with lo = floor(m*BM / BN) * BN are visible to every row
  of the tile: no mask; keys [lo, min((m+1)*BM, S)) form the diagonal band: masked with
  key <= query and key < S. Blocks right of the diagonal are never loaded.
- Scores in fp32, scale * log2(e) folded into one multiply, exp2; P rounded to bf16 for the
  P @ V dot (as FlashAttention does); acc / l and one bf16 rounding at the end. The running max
  starts finite (-1e30) so a fully masked block never computes -inf - (-inf).
- D need not be a power of two (small shapes: 24, 48, 80): the head dim is padded to D_PAD
  with masked loads. For D 256 the host caps BM and BN at 64 (the [BM, 256] fp32 accumulator
  and K/V stages otherwise exceed registers and shared memory); num_stages is clamped to about
  200 KB of K/V buffers.
- Offline compile (sm_90a, triton 3.6, `aka kb compile-check --op prefill_attention --shapes all`):
  where the D 256 cap makes BM 64, num_warps stays 8, and the QK dot, whose scores feed the PV
  dot, gets all 8 warps on M: both warpgroups compute the whole [64, BN] score ("dot 64x64
  computed 2x"; triton/tl-dot, How the warps split a dot). flash_dispatch's tuned D 256 rows
  (BM 128 on 8 warps) do not. 4 warps at BM 64 would do each score once; not timed on a GPU.
"""
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"BM": 128, "BN": 64, "num_warps": 8, "num_stages": 2}

_SMEM_BUDGET = 200 * 1024


@triton.jit
def _flash_varlen(q_ptr, k_ptr, v_ptr, o_ptr, cu_ptr, NS, n_tiles, qk_scale,
                  s_qt, s_qh, s_kt, s_kh, s_vt, s_vh, s_ot, s_oh, GROUP,
                  D: tl.constexpr, D_PAD: tl.constexpr, NS_PAD: tl.constexpr,
                  BM: tl.constexpr, BN: tl.constexpr):
    h = tl.program_id(0)
    tile = n_tiles - 1 - tl.program_id(1)                 # longest (last) tiles first
    # which sequence / query tile: cumsum of per-sequence tile counts
    i = tl.arange(0, NS_PAD)
    lo_b = tl.load(cu_ptr + i, mask=i < NS, other=0)
    hi_b = tl.load(cu_ptr + i + 1, mask=i < NS, other=0)
    tiles = (hi_b - lo_b + BM - 1) // BM
    incl = tl.cumsum(tiles, axis=0)
    seq = tl.sum((incl <= tile).to(tl.int32), axis=0)
    if seq >= NS:
        return
    m = tile - tl.sum(tl.where(i == seq, incl - tiles, 0), axis=0)
    start = tl.sum(tl.where(i == seq, lo_b, 0), axis=0).to(tl.int64)
    S = tl.sum(tl.where(i == seq, hi_b - lo_b, 0), axis=0)
    g = h // GROUP

    rm = m * BM + tl.arange(0, BM)
    rd = tl.arange(0, D_PAD)
    dmask = rd < D
    q = tl.load(q_ptr + (start + rm)[:, None] * s_qt + h * s_qh + rd[None, :],
                mask=(rm[:, None] < S) & dmask[None, :], other=0.0)
    m_i = tl.full((BM,), -1e30, dtype=tl.float32)
    l_i = tl.zeros((BM,), dtype=tl.float32)
    acc = tl.zeros((BM, D_PAD), dtype=tl.float32)
    rn0 = tl.arange(0, BN)
    k_base = k_ptr + g * s_kh + rd[None, :]
    v_base = v_ptr + g * s_vh + rd[None, :]

    lo = (m * BM) // BN * BN
    for n0 in range(0, lo, BN):                           # fully visible blocks: no mask
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

    hi = tl.minimum((m + 1) * BM, S)
    for n0 in range(lo, hi, BN):                          # diagonal band
        rn = n0 + rn0
        rows = (start + rn)[:, None]
        kmask = rn < S
        k = tl.load(k_base + rows * s_kt, mask=kmask[:, None] & dmask[None, :], other=0.0)
        s = tl.dot(q, tl.trans(k)) * qk_scale
        s = tl.where((rn[None, :] <= rm[:, None]) & kmask[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_base + rows * s_vt, mask=kmask[:, None] & dmask[None, :], other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new

    out = acc / l_i[:, None]
    tl.store(o_ptr + (start + rm)[:, None] * s_ot + h * s_oh + rd[None, :],
             out.to(o_ptr.dtype.element_ty), mask=(rm[:, None] < S) & dmask[None, :])


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, q, k, v, cu_seqlens):
        T, HQ, D = q.shape
        HK = k.shape[1]
        ns = cu_seqlens.shape[0] - 1
        o = torch.empty_like(q)
        p = AKA_PARAMS
        d_pad = max(16, triton.next_power_of_2(D))
        bm, bn = p["BM"], p["BN"]
        if d_pad >= 256:
            bm, bn = min(bm, 64), min(bn, 64)
        kv_stage = 2 * bn * d_pad * q.element_size()
        stages = max(1, min(p["num_stages"], (_SMEM_BUDGET - bm * d_pad * q.element_size()) // kv_stage))
        n_tiles = triton.cdiv(T, bm) + ns
        _flash_varlen[(HQ, n_tiles)](
            q, k, v, o, cu_seqlens, ns, n_tiles, self.scale * math.log2(math.e),
            q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
            o.stride(0), o.stride(1), HQ // HK,
            D=D, D_PAD=d_pad, NS_PAD=max(2, triton.next_power_of_2(ns)), BM=bm, BN=bn,
            num_warps=p["num_warps"], num_stages=stages)
        return o
