"""
---
id: kernels/prefill_attention/flash_dispatch
op: prefill_attention
category: Fusion
dtypes: [bfloat16]
techniques: [flash-attention, online-softmax, causal-block-skipping, gqa, gqa-grouping, tl-dot, tma, tensor-descriptor, software-pipelining, per-shape-dispatch, fp32-accumulation, int64-offsets, masking]
params:
  BM: [64, 128]
  BN: [32, 64, 128]
  PACK: [0, 1]
  TMA: [0, 1]
  num_warps: [4, 8]
  num_stages: [1, 2, 3, 4]
tuner: attention
summary: FlashAttention-2 forward over packed varlen sequences with a per-shape dispatch table. One kernel covers one-head tiles (flash_varlen) and GQA-packed tiles (gqa_packed), K/V through TMA tensor descriptors or pointer loads, pipelined by num_stages; a table keyed by (D, Hq, Hkv, T, num_seqs) picks BM/BN/PACK/TMA/warps/stages per shape, the nearest entry of the same head dim for unseen shapes, AKA_PARAMS when the table is empty.
---
Causal GQA attention, q [T, Hq, D], k/v [T, Hkv, D], sequences delimited by cu_seqlens.

Design:
- A tile is BM MMA rows = BT = BM / HP query tokens x HP query heads. PACK 0: HP = 1, one
  query head per program (grid axis 0 over Hq, the G heads of a KV head run back to back and
  share its K/V through L2). PACK 1: HP = G rounded up to a power of two, the whole GQA group
  in one tile (grid axis 0 over Hkv), so each K/V tile is fetched once per group and the
  causal band is only BT keys wide; padding heads compute on zeros and are never stored.
- Grid (head groups, cdiv(T, BT) + num_seqs): a bound on the (sequence, tile) pairs, so the
  host never reads cu_seqlens (no sync, CUDA-graph safe). A program finds its sequence by a
  cumsum over cu_seqlens in chunks of 32 sequences, so num_seqs is a runtime value and a new
  batch size does not recompile. Tiles run last-first: the last tiles of a sequence do the
  most KV steps, started first they leave short tiles for the tail.
- Causal block skipping: keys [0, lo), lo = floor(t0 / BN) * BN, are visible to every row (no
  mask); keys [lo, min(t0 + BT, S)) are the diagonal band, masked with key <= token and key <
  S; blocks right of the diagonal are never loaded.
- TMA 1 (power-of-two D, k/v contiguous): K and V tiles come through host-built tensor
  descriptors over the [T, Hkv * D] view, one bulk copy per tile that the compiler pipelines
  num_stages deep; band rows past S belong to the next sequence (or are zero-filled past T)
  and are masked like any key > token. q is loaded once with pointers and the output stored
  with pointers and a row mask (a descriptor store would write into the next sequence).
- Scores in fp32 with scale * log2(e) folded into one multiply, exp2 online softmax from a
  finite -1e30 running max (a fully masked block never computes -inf - (-inf)); P rounded to
  bf16 for the P @ V dot as FlashAttention does; one bf16 rounding of acc / l.
- Shared memory: the q tile plus num_stages K/V stages; num_stages is clamped so they stay
  within about 200 KB (the H200 has 227 KB per block). For D 256 a [128, 256] q tile is 64 KB
  and a BN 64 K+V stage 64 KB, so BN 32-64 and 2-3 stages are the only room there.
- Dispatch: DISPATCH maps "D/Hq/Hkv/T/num_seqs" to a config; it is written by
  scripts/bake_dispatch_attn.py from the winners of scripts/gpu_tune_attn.py and empty until a
  GPU run fills it. AKA_PARAMS is the config for shapes the table does not cover when it is
  empty (and what the offline proposer varies).
- D need not be a power of two (small shapes: 24, 48, 80): it is padded to D_PAD with masked
  pointer loads, and TMA is off there.
"""
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

AKA_PARAMS = {"BM": 128, "BN": 64, "PACK": 0, "TMA": 1, "num_warps": 8, "num_stages": 2}

# dispatch: begin (scripts/bake_dispatch_attn.py rewrites this block)
DISPATCH = {
    '128/8/1/12288/1': {'BM': 64, 'BN': 64, 'PACK': 0, 'TMA': 1, 'num_warps': 4, 'num_stages': 3},  # 572.3 us, ratio 2.00, shape 7, NVIDIA H200 2026-12-03
    '128/8/1/12288/2': {'BM': 64, 'BN': 64, 'PACK': 0, 'TMA': 1, 'num_warps': 4, 'num_stages': 3},  # 317.6 us, ratio 2.53, shape 3, NVIDIA H200 2026-12-03
    '128/8/1/12288/4': {'BM': 64, 'BN': 64, 'PACK': 0, 'TMA': 1, 'num_warps': 4, 'num_stages': 3},  # 175.2 us, ratio 3.05, shape 6, NVIDIA H200 2026-12-03
    '128/16/1/10240/3': {'BM': 64, 'BN': 64, 'PACK': 0, 'TMA': 1, 'num_warps': 4, 'num_stages': 3},  # 301.3 us, ratio 2.49, shape 9, NVIDIA H200 2026-12-03
    '128/16/2/512/1': {'BM': 64, 'BN': 64, 'PACK': 0, 'TMA': 1, 'num_warps': 4, 'num_stages': 3},  # 9.8 us, ratio 2.21, shape 4, NVIDIA H200 2026-12-03
    '128/16/2/6144/8': {'BM': 64, 'BN': 64, 'PACK': 0, 'TMA': 1, 'num_warps': 4, 'num_stages': 3},  # 67.9 us, ratio 3.62, shape 5, NVIDIA H200 2026-12-03
    '128/16/4/12288/16': {'BM': 64, 'BN': 64, 'PACK': 0, 'TMA': 1, 'num_warps': 4, 'num_stages': 3},  # 137.4 us, ratio 3.62, shape 8, NVIDIA H200 2026-12-03
    '128/28/4/6144/2': {'BM': 64, 'BN': 64, 'PACK': 0, 'TMA': 1, 'num_warps': 4, 'num_stages': 3},  # 321.5 us, ratio 1.92, shape 10, NVIDIA H200 2026-12-03
    '128/32/8/4096/1': {'BM': 64, 'BN': 64, 'PACK': 0, 'TMA': 1, 'num_warps': 4, 'num_stages': 3},  # 269.6 us, ratio 1.96, shape 0, NVIDIA H200 2026-12-03
    '128/32/8/6144/4': {'BM': 64, 'BN': 64, 'PACK': 0, 'TMA': 1, 'num_warps': 4, 'num_stages': 3},  # 210.4 us, ratio 2.19, shape 1, NVIDIA H200 2026-12-03
    '128/32/8/12288/32': {'BM': 64, 'BN': 64, 'PACK': 0, 'TMA': 1, 'num_warps': 4, 'num_stages': 3},  # 183.7 us, ratio 3.90, shape 2, NVIDIA H200 2026-12-03
    '256/8/1/8192/1': {'BM': 128, 'BN': 64, 'PACK': 1, 'TMA': 1, 'num_warps': 8, 'num_stages': 2},  # 490.7 us, ratio 2.18, shape 13, NVIDIA H200 2026-12-03
    '256/8/4/12288/8': {'BM': 128, 'BN': 64, 'PACK': 1, 'TMA': 1, 'num_warps': 8, 'num_stages': 2},  # 214.9 us, ratio 3.08, shape 12, NVIDIA H200 2026-12-03
    '256/16/2/6144/4': {'BM': 128, 'BN': 64, 'PACK': 1, 'TMA': 1, 'num_warps': 8, 'num_stages': 2},  # 203.4 us, ratio 2.40, shape 14, NVIDIA H200 2026-12-03
    '256/16/8/6144/2': {'BM': 128, 'BN': 64, 'PACK': 1, 'TMA': 1, 'num_warps': 8, 'num_stages': 2},  # 354.1 us, ratio 2.12, shape 11, NVIDIA H200 2026-12-03
}
# dispatch: end

_SMEM_BUDGET = 200 * 1024
_CHUNK = 32                  # sequences located per step of the in-kernel cumsum


def pick(table, key, default):
    """The table's config for `key` ("D/a/b/..."): exact entry, else the nearest entry with the
    same first field by summed |log| distance of the others, else `default`."""
    if key in table:
        return table[key]
    want = [float(x) for x in key.split("/")]
    best, dist = default, float("inf")
    for k, cfg in table.items():
        have = [float(x) for x in k.split("/")]
        if len(have) != len(want) or have[0] != want[0]:
            continue
        d = sum(abs(math.log(max(a, 1.0) / max(b, 1.0))) for a, b in zip(have[1:], want[1:]))
        if d < dist:
            best, dist = cfg, d
    return best


@triton.jit(do_not_specialize=["NS", "n_tiles"])
def _prefill(q_ptr, k_ptr, v_ptr, o_ptr, k_desc, v_desc, cu_ptr, NS, n_tiles, qk_scale,
             s_qt, s_qh, s_kt, s_kh, s_vt, s_vh, s_ot, s_oh, G, HPV,
             D: tl.constexpr, D_PAD: tl.constexpr, HP: tl.constexpr, BM: tl.constexpr,
             BN: tl.constexpr, TMA: tl.constexpr, CHUNK: tl.constexpr):
    hg = tl.program_id(0)
    tile = n_tiles - 1 - tl.program_id(1)
    BT: tl.constexpr = BM // HP
    found = 0
    m = 0
    start = 0
    S = 0
    carry = 0
    for c0 in range(0, NS, CHUNK):
        i = c0 + tl.arange(0, CHUNK)
        ok = i < NS
        lo_b = tl.load(cu_ptr + i, mask=ok, other=0)
        hi_b = tl.load(cu_ptr + i + 1, mask=ok, other=0)
        tiles = (hi_b - lo_b + BT - 1) // BT
        incl = tl.cumsum(tiles, axis=0) + carry
        excl = incl - tiles
        hit = (excl <= tile) & (tile < incl)
        found += tl.sum(hit.to(tl.int32), axis=0)
        m += tl.sum(tl.where(hit, tile - excl, 0), axis=0)
        start += tl.sum(tl.where(hit, lo_b, 0), axis=0)
        S += tl.sum(tl.where(hit, hi_b - lo_b, 0), axis=0)
        carry += tl.sum(tiles, axis=0)
    if found == 0:
        return
    start64 = start.to(tl.int64)
    kvh = (hg * HPV) // G

    r = tl.arange(0, BM)
    t0 = m * BT
    tok = t0 + r // HP
    head = hg * HPV + r % HP
    rvalid = (r % HP < HPV) & (tok < S)
    d = tl.arange(0, D_PAD)
    dmask = d < D
    q = tl.load(q_ptr + (start64 + tok)[:, None] * s_qt + head[:, None] * s_qh + d[None, :],
                mask=rvalid[:, None] & dmask[None, :], other=0.0)
    m_i = tl.full((BM,), -1e30, dtype=tl.float32)
    l_i = tl.zeros((BM,), dtype=tl.float32)
    acc = tl.zeros((BM, D_PAD), dtype=tl.float32)
    rn0 = tl.arange(0, BN)
    k_base = k_ptr + kvh * s_kh + d[None, :]
    v_base = v_ptr + kvh * s_vh + d[None, :]

    lo = (t0 // BN) * BN
    for n0 in range(0, lo, BN):                           # fully visible blocks: no mask
        if TMA:
            k = k_desc.load([start + n0, kvh * D])
            v = v_desc.load([start + n0, kvh * D])
        else:
            rows = (start64 + n0 + rn0)[:, None]
            k = tl.load(k_base + rows * s_kt, mask=dmask[None, :], other=0.0)
            v = tl.load(v_base + rows * s_vt, mask=dmask[None, :], other=0.0)
        s = tl.dot(q, tl.trans(k)) * qk_scale
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new

    hi = tl.minimum(t0 + BT, S)
    for n0 in range(lo, hi, BN):                          # diagonal band
        rn = n0 + rn0
        kmask = rn < S
        if TMA:
            k = k_desc.load([start + n0, kvh * D])
            v = v_desc.load([start + n0, kvh * D])
        else:
            rows = (start64 + rn)[:, None]
            k = tl.load(k_base + rows * s_kt, mask=kmask[:, None] & dmask[None, :], other=0.0)
            v = tl.load(v_base + rows * s_vt, mask=kmask[:, None] & dmask[None, :], other=0.0)
        s = tl.dot(q, tl.trans(k)) * qk_scale
        s = tl.where((rn[None, :] <= tok[:, None]) & kmask[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new

    out = acc / l_i[:, None]
    tl.store(o_ptr + (start64 + tok)[:, None] * s_ot + head[:, None] * s_oh + d[None, :],
             out.to(o_ptr.dtype.element_ty), mask=rvalid[:, None] & dmask[None, :])


def shape_key(q, k, cu_seqlens):
    T, HQ, D = q.shape
    return f"{D}/{HQ}/{k.shape[1]}/{T}/{cu_seqlens.shape[0] - 1}"


def attention(q, k, v, cu_seqlens, scale, cfg):
    """Launch with an explicit config (the tuner's entry point; ModelNew picks cfg per shape)."""
    T, HQ, D = q.shape
    HK = k.shape[1]
    G = HQ // HK
    ns = cu_seqlens.shape[0] - 1
    o = torch.empty_like(q)
    d_pad = max(16, triton.next_power_of_2(D))
    bm, bn = cfg["BM"], cfg["BN"]
    if d_pad >= 256:
        bn = min(bn, 64)               # a [BN, 256] K+V stage of 128 rows is 128 KB
    hp = triton.next_power_of_2(G) if cfg["PACK"] else 1
    if hp > bm // 4:                   # keep at least 4 tokens per tile
        hp = 1
    hpv = G if hp > 1 else 1
    el = q.element_size()
    stages = max(1, min(cfg["num_stages"], (_SMEM_BUDGET - bm * d_pad * el) // (2 * bn * d_pad * el)))
    # TMA needs 16-byte aligned bases and row strides and a non-empty box source
    tma = bool(cfg["TMA"]) and d_pad == D and T > 0 and all(
        t.stride(2) == 1 and t.stride(1) == D and t.stride(0) == HK * D and t.data_ptr() % 16 == 0
        for t in (k, v))
    if tma:
        k_desc = TensorDescriptor(k, (T, HK * D), (HK * D, 1), [bn, D])
        v_desc = TensorDescriptor(v, (T, HK * D), (HK * D, 1), [bn, D])
    else:
        k_desc, v_desc = k, v
    bt = bm // hp
    n_tiles = triton.cdiv(T, bt) + ns
    _prefill[(HQ // hpv, n_tiles)](
        q, k, v, o, k_desc, v_desc, cu_seqlens, ns, n_tiles, scale * math.log2(math.e),
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        o.stride(0), o.stride(1), G, hpv,
        D=D, D_PAD=d_pad, HP=hp, BM=bm, BN=bn, TMA=tma, CHUNK=_CHUNK,
        num_warps=cfg["num_warps"], num_stages=stages)
    return o


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, q, k, v, cu_seqlens):
        cfg = pick(DISPATCH, shape_key(q, k, cu_seqlens), AKA_PARAMS)
        return attention(q, k, v, cu_seqlens, self.scale, cfg)
