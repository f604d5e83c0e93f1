"""
---
id: kernels/paged_decode_attention/split_dispatch
op: paged_decode_attention
category: Fusion
dtypes: [bfloat16]
techniques: [split-kv, flash-decoding, log-sum-exp-combine, gqa-grouping, paged-kv-cache, online-softmax, gather, tl-dot, per-shape-dispatch, int64-offsets, masking]
params:
  SPLIT_TOKENS: [0, 256, 512, 1024, 2048]
  WAVES: [1, 2, 4]
  BN: [16, 32, 64, 128]
  num_warps: [2, 4, 8]
  num_stages: [1, 2, 3, 4]
summary: Flash-decoding over a paged cache with a per-shape dispatch table. Grid (KV head, sequence, context split); the split length is a runtime argument, either fixed by the table or chosen so that B * Hkv * splits fills WAVES x 132 SMs; the GQA group forms one MMA tile; fp32 partials merged by an LSE-weighted combine kernel, skipped when one split covers the table width.
---
o[b, h] = softmax_j (q[b, h] . K[b, j, h // G] * scale) V[b, j, h // G] over j < seq_lens[b], with
K/V rows gathered through block_tables from a [num_blocks, P, Hkv, D] cache.

Design:
- Parallelism: B * Hkv programs is 8 at batch 1 and 1024 at batch 128 (Llama-3.1-8B), so no
  one split length fits every batch. SPLIT_TOKENS 0 picks it per call: the largest power of
  two from 2048 down to one 16-token page for which B * Hkv * cdiv(width, split) >= WAVES *
  132; a table entry may fix it instead. The split length is a runtime argument, so changing
  it never recompiles; only BN, warps, stages, D and the group size are compile-time.
- Grid (Hkv, B, cdiv(max_blocks * P, split)), sized from the block-table width, which bounds
  every sequence without reading seq_lens on the host; splits past a sequence's length return
  at once, so a ragged batch costs only the launch of its empty programs.
- GQA: the G = Hq / Hkv query heads of a KV head are the rows of a [GP, D] q tile (GP = G padded
  to >= 16 for tl.dot); each gathered [BN, D] K/V tile is read once for all of them.
- Gather: token j of sequence b lives at block_tables[b, j // P], slot j % P; int64 offsets
  (page * block stride passes 2^31 with large pools); tokens >= seq_lens[b] are masked by index
  (the last page and the table's padding hold stale data).
- Base-2 online softmax (scale * log2(e) folded), fp32 accumulator; each split writes acc / l
  and lse = m + log2(l); `_combine` weights the cdiv(seq_len, split) existing splits by
  exp2(lse - max) and rounds once to bf16. One split: the split kernel stores bf16 itself.
- Dispatch: DISPATCH maps "D/Hq/Hkv/B/width" (width = max_blocks * P) to a config, written by
  scripts/bake_dispatch_attn.py from scripts/gpu_tune_attn.py's winners, empty until a GPU run
  fills it; shapes it does not cover take the nearest entry of the same head dim, AKA_PARAMS
  when there is none.
- Head dims that are not powers of two (small shapes: 24, 48, 80) are padded with masks.
"""
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"SPLIT_TOKENS": 0, "WAVES": 2, "BN": 64, "num_warps": 4, "num_stages": 2}

# dispatch: begin (scripts/bake_dispatch_attn.py rewrites this block)
DISPATCH = {
    '128/8/1/96/32768': {'SPLIT_TOKENS': 0, 'WAVES': 4, 'BN': 128, 'num_warps': 8, 'num_stages': 2},  # 209.6 us, ratio 0.95, shape 10, NVIDIA H200 2026-12-03
    '128/8/1/128/8192': {'SPLIT_TOKENS': 0, 'WAVES': 1, 'BN': 128, 'num_warps': 8, 'num_stages': 2},  # 86.2 us, ratio 0.76, shape 5, NVIDIA H200 2026-12-03
    '128/8/1/128/16384': {'SPLIT_TOKENS': 0, 'WAVES': 1, 'BN': 32, 'num_warps': 4, 'num_stages': 3},  # 159.9 us, ratio 0.82, shape 4, NVIDIA H200 2026-12-03
    '128/16/1/144/8192': {'SPLIT_TOKENS': 0, 'WAVES': 1, 'BN': 128, 'num_warps': 8, 'num_stages': 2},  # 95.1 us, ratio 0.78, shape 11, NVIDIA H200 2026-12-03
    '128/16/2/8/32768': {'SPLIT_TOKENS': 0, 'WAVES': 2, 'BN': 128, 'num_warps': 8, 'num_stages': 2},  # 49.5 us, ratio 0.74, shape 6, NVIDIA H200 2026-12-03
    '128/16/2/64/16384': {'SPLIT_TOKENS': 0, 'WAVES': 1, 'BN': 32, 'num_warps': 4, 'num_stages': 3},  # 160.1 us, ratio 0.83, shape 7, NVIDIA H200 2026-12-03
    '128/16/4/32/32768': {'SPLIT_TOKENS': 0, 'WAVES': 1, 'BN': 128, 'num_warps': 8, 'num_stages': 2},  # 267.6 us, ratio 1.01, shape 8, NVIDIA H200 2026-12-03
    '128/16/4/64/16384': {'SPLIT_TOKENS': 0, 'WAVES': 1, 'BN': 128, 'num_warps': 8, 'num_stages': 2},  # 268.5 us, ratio 0.99, shape 12, NVIDIA H200 2026-12-03
    '128/28/4/48/8192': {'SPLIT_TOKENS': 0, 'WAVES': 1, 'BN': 64, 'num_warps': 4, 'num_stages': 2},  # 117.6 us, ratio 0.85, shape 9, NVIDIA H200 2026-12-03
    '128/32/8/1/32768': {'SPLIT_TOKENS': 0, 'WAVES': 2, 'BN': 64, 'num_warps': 4, 'num_stages': 2},  # 42.8 us, ratio 0.76, shape 0, NVIDIA H200 2026-12-03
    '128/32/8/16/8192': {'SPLIT_TOKENS': 0, 'WAVES': 2, 'BN': 128, 'num_warps': 8, 'num_stages': 2},  # 85.2 us, ratio 0.81, shape 1, NVIDIA H200 2026-12-03
    '128/32/8/64/8192': {'SPLIT_TOKENS': 0, 'WAVES': 2, 'BN': 128, 'num_warps': 8, 'num_stages': 2},  # 270.4 us, ratio 0.98, shape 2, NVIDIA H200 2026-12-03
    '128/32/8/128/4096': {'SPLIT_TOKENS': 0, 'WAVES': 1, 'BN': 128, 'num_warps': 8, 'num_stages': 2},  # 285.4 us, ratio 0.92, shape 3, NVIDIA H200 2026-12-03
    '256/16/2/32/32768': {'SPLIT_TOKENS': 0, 'WAVES': 1, 'BN': 64, 'num_warps': 4, 'num_stages': 2},  # 317.4 us, ratio 0.85, shape 14, NVIDIA H200 2026-12-03
    '256/16/8/8/8192': {'SPLIT_TOKENS': 0, 'WAVES': 2, 'BN': 64, 'num_warps': 4, 'num_stages': 2},  # 86.4 us, ratio 0.85, shape 13, NVIDIA H200 2026-12-03
}
# dispatch: end

SMS = 132                    # H100/H200 SM count: the unit of WAVES
MAX_SPLIT = 2048
MIN_SPLIT = 16               # one vLLM page


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


@triton.jit(do_not_specialize=["SPLIT", "NSPLIT"])
def _decode_split(q_ptr, kc_ptr, vc_ptr, bt_ptr, len_ptr, o_ptr, po_ptr, lse_ptr, qk_scale,
                  s_qb, s_qh, s_kb, s_ks, s_kh, s_vb, s_vs, s_vh, s_bt, s_ob, s_oh, G, SPLIT, NSPLIT,
                  P: tl.constexpr, D: tl.constexpr, D_PAD: tl.constexpr, GP: tl.constexpr,
                  BN: tl.constexpr, DIRECT: tl.constexpr):
    g = tl.program_id(0)
    b = tl.program_id(1)
    sp = tl.program_id(2)
    L = tl.load(len_ptr + b)
    lo = sp * SPLIT
    if lo >= L:
        return
    hi = tl.minimum(lo + SPLIT, L)
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
        v = tl.load(vc_ptr + (page * s_vb + slot * s_vs + g * s_vh)[:, None] + d[None, :],
                    mask=tmask[:, None] & dmask[None, :], other=0.0)
        s = tl.dot(q, tl.trans(k)) * qk_scale
        s = tl.where(tmask[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
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


@triton.jit(do_not_specialize=["SPLIT", "NSPLIT"])
def _combine(po_ptr, lse_ptr, len_ptr, o_ptr, HQ, NSPLIT, SPLIT, s_ob, s_oh,
             D: tl.constexpr, D_PAD: tl.constexpr, SC: tl.constexpr):
    bh = tl.program_id(0)
    b = bh // HQ
    h = bh % HQ
    n_valid = tl.cdiv(tl.load(len_ptr + b), SPLIT)
    base = bh.to(tl.int64) * NSPLIT
    d = tl.arange(0, D_PAD)
    mx = tl.full((SC,), -1e30, dtype=tl.float32)
    for s0 in range(0, n_valid, SC):                      # pass 1: the largest lse
        s = s0 + tl.arange(0, SC)
        mx = tl.maximum(mx, tl.load(lse_ptr + base + s, mask=s < n_valid, other=-1e30))
    top = tl.max(mx, axis=0)
    acc = tl.zeros((D_PAD,), dtype=tl.float32)
    wacc = tl.zeros((SC,), dtype=tl.float32)
    for s0 in range(0, n_valid, SC):                      # pass 2: weighted sum
        s = s0 + tl.arange(0, SC)
        sm = s < n_valid
        w = tl.where(sm, tl.exp2(tl.load(lse_ptr + base + s, mask=sm, other=0.0) - top), 0.0)
        po = tl.load(po_ptr + (base + s)[:, None] * D_PAD + d[None, :], mask=sm[:, None], other=0.0)
        acc += tl.sum(po * w[:, None], axis=0)
        wacc += w
    tl.store(o_ptr + b * s_ob + h * s_oh + d, (acc / tl.sum(wacc, axis=0)).to(o_ptr.dtype.element_ty),
             mask=d < D)


def shape_key(q, key_cache, block_tables):
    B, HQ, D = q.shape
    return f"{D}/{HQ}/{key_cache.shape[2]}/{B}/{block_tables.shape[1] * key_cache.shape[1]}"


def split_tokens(cfg, B, HK, width):
    """Tokens per split: the table's fixed value, or the largest power of two <= MAX_SPLIT that
    still gives WAVES * SMS programs."""
    if cfg["SPLIT_TOKENS"]:
        return cfg["SPLIT_TOKENS"]
    split = MAX_SPLIT
    while split > MIN_SPLIT and B * HK * triton.cdiv(width, split) < cfg["WAVES"] * SMS:
        split //= 2
    return split


def attention(q, key_cache, value_cache, block_tables, seq_lens, scale, cfg):
    """Launch with an explicit config (the tuner's entry point; ModelNew picks cfg per shape)."""
    B, HQ, D = q.shape
    _, P, HK, _ = key_cache.shape
    G = HQ // HK
    width = block_tables.shape[1] * P
    split = split_tokens(cfg, B, HK, width)
    nsplit = triton.cdiv(width, split)
    d_pad = max(16, triton.next_power_of_2(D))
    o = torch.empty_like(q)
    direct = nsplit == 1
    po = o if direct else torch.empty((B * HQ * nsplit, d_pad), dtype=torch.float32, device=q.device)
    lse = o if direct else torch.empty((B * HQ * nsplit,), dtype=torch.float32, device=q.device)
    _decode_split[(HK, B, nsplit)](
        q, key_cache, value_cache, block_tables, seq_lens, o, po, lse, scale * math.log2(math.e),
        q.stride(0), q.stride(1), key_cache.stride(0), key_cache.stride(1), key_cache.stride(2),
        value_cache.stride(0), value_cache.stride(1), value_cache.stride(2), block_tables.stride(0),
        o.stride(0), o.stride(1), G, split, nsplit,
        P=P, D=D, D_PAD=d_pad, GP=max(16, triton.next_power_of_2(G)), BN=cfg["BN"],
        DIRECT=direct, num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    if not direct:
        _combine[(B * HQ,)](po, lse, seq_lens, o, HQ, nsplit, split, o.stride(0), o.stride(1),
                            D=D, D_PAD=d_pad, SC=16, num_warps=4)
    return o


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, q, key_cache, value_cache, block_tables, seq_lens):
        cfg = pick(DISPATCH, shape_key(q, key_cache, block_tables), AKA_PARAMS)
        return attention(q, key_cache, value_cache, block_tables, seq_lens, self.scale, cfg)
