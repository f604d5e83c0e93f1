"""
---
id: kernels/paged_decode_attention/one_pass
op: paged_decode_attention
category: Fusion
dtypes: [bfloat16]
techniques: [gqa-grouping, paged-kv-cache, online-softmax, gather, tl-dot, one-pass-reduction, int64-offsets, masking]
params:
  BN: [16, 32, 64, 128]
  num_warps: [2, 4, 8]
  num_stages: [1, 2, 3, 4]
summary: PagedAttention-v1-style decode for large batches. One program per (sequence, KV head) walks the whole context with an online softmax over gathered BN-token K/V tiles, the GQA group's query heads as MMA rows, and writes bf16 output directly - a single launch with no fp32 partials, no log-sum-exp merge and no combine kernel.
---
o[b, h] = softmax_j (q[b, h] . K[b, j, h // G] * scale) V[b, j, h // G] over j < seq_lens[b], with
K/V rows gathered through block_tables from a [num_blocks, P, Hkv, D] cache.

Design (the no-split counterpart of kernels/paged_decode_attention/split_kv):
- Grid (Hkv, B): B * Hkv programs, each reading its sequence's K/V for one KV head exactly once.
  No partial outputs, no combine launch, no LSE bookkeeping: the least traffic and launches when
  B * Hkv already covers the SMs several times (128 x 8 at Llama-3.1-8B batch 128). With few
  programs (batch 1: 8) most SMs idle and split_kv is the right family.
- The G = Hq / Hkv query heads of a KV head are the rows of one [GP, D] q tile (GP >= 16 for
  tl.dot): each gathered K/V tile serves all of them.
- Tokens are gathered through block_tables[b, j // P] (int64 page offsets) and masked by index
  (j < seq_lens[b]); stale table padding is never dereferenced.
- Base-2 online softmax in fp32 (scale * log2(e) folded), a finite -1e30 start, P rounded to
  bf16 for the P @ V dot, one bf16 rounding of acc / l. Head dims that are not powers of two
  (small shapes) are padded with masks. num_stages pipelines the K/V gathers of the loop.

When to pick it: serving decode at high concurrency, where the number of sequences times the
number of KV heads already gives every SM several programs (e.g. 32-256 running requests of a
Llama-style model with 8 KV heads), with short to medium contexts. The split-KV siblings
(split_kv, split_dispatch, balanced_split) cut each context into pieces, write fp32 partial
outputs plus log-sum-exp values and merge them afterwards; at high batch that extra traffic and
the second step buy no parallelism, so a split kernel there runs slower than this simple
per-sequence walk. The reverse symptom points away from it: at batch 1-8, or one very long
context, only a handful of programs run, most SMs idle and bandwidth stays far below the HBM
peak; a split-KV sibling fixes that.
"""
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"BN": 64, "num_warps": 4, "num_stages": 2}


@triton.jit
def _decode_one_pass(q_ptr, kc_ptr, vc_ptr, bt_ptr, len_ptr, o_ptr, qk_scale,
                     s_qb, s_qh, s_kb, s_ks, s_kh, s_vb, s_vs, s_vh, s_bt, s_ob, s_oh, G,
                     P: tl.constexpr, D: tl.constexpr, D_PAD: tl.constexpr, GP: tl.constexpr,
                     BN: tl.constexpr):
    g = tl.program_id(0)
    b = tl.program_id(1)
    L = tl.load(len_ptr + b)
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
    for n0 in range(0, L, BN):
        tok = n0 + tl.arange(0, BN)
        tmask = tok < L
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
    tl.store(o_ptr + b * s_ob + head[:, None] * s_oh + d[None, :], out.to(o_ptr.dtype.element_ty),
             mask=hmask[:, None] & dmask[None, :])


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, q, key_cache, value_cache, block_tables, seq_lens):
        B, HQ, D = q.shape
        _, P, HK, _ = key_cache.shape
        G = HQ // HK
        p = AKA_PARAMS
        o = torch.empty_like(q)
        _decode_one_pass[(HK, B)](
            q, key_cache, value_cache, block_tables, seq_lens, o, self.scale * math.log2(math.e),
            q.stride(0), q.stride(1), key_cache.stride(0), key_cache.stride(1), key_cache.stride(2),
            value_cache.stride(0), value_cache.stride(1), value_cache.stride(2), block_tables.stride(0),
            o.stride(0), o.stride(1), G,
            P=P, D=D, D_PAD=max(16, triton.next_power_of_2(D)), GP=max(16, triton.next_power_of_2(G)),
            BN=p["BN"], num_warps=p["num_warps"], num_stages=p["num_stages"])
        return o
