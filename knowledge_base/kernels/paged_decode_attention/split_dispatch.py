"""
---
id: kernels/paged_decode_attention/split_dispatch
op: paged_decode_attention
category: Fusion
dtypes: [bfloat16]
techniques: [split-kv, flash-decoding, log-sum-exp-combine, gqa-grouping, paged-kv-cache, online-softmax, gather, tl-dot, per-shape-dispatch, work-balanced-schedule, last-block-finalize, int64-offsets, masking]
params:
  SPLIT_TOKENS: [0, 256, 512, 1024, 2048]
  WAVES: [1, 2, 4]
  BN: [16, 32, 64, 128]
  num_warps: [2, 4, 8]
  num_stages: [1, 2, 3, 4]
tuner: attention
summary: Flash-decoding over a paged cache with a per-shape dispatch table over two schedules. The split path's grid is (KV head, sequence, context split), the split length a runtime argument fixed by the table or chosen so that B * Hkv * splits fills WAVES x 132 SMs, fp32 partials merged by an LSE-weighted combine kernel; the balanced path (balanced_split's) gives WAVES x 132 programs equal shares of the batch's tiles, for ragged batches and one KV head. The GQA group forms one MMA tile.
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
- Two paths (cfg "path", a table-only key like balanced's FUSED; AKA_PARAMS, the fallback for
  shapes no entry is near, is the split path's): "split" (above) and "balanced", balanced_split.py's
  schedule: a fixed grid of WAVES x 132 programs per KV head, each taking an equal share of the
  batch's BN-token tiles from seq_lens on the device, partials merged by the last program of a
  sequence to arrive (FUSED 1) or a second launch (FUSED 0). On the H200, at balanced_split's
  untuned defaults it beat the tuned split grid only on the one-KV-head and long ragged shapes (4,
  7, 11, 13, 14); with both paths tuned side by side (scripts/gpu_tune_attn.py, 2026-12-05) it won
  13 of 15 shapes, mostly at BN 32, 3 stages, WAVES 3 (three 4-warp programs per SM), and the
  split grid kept batch 1 x 32768 and 8 x 32768 with two KV heads, where too few tiles exist for
  equal shares to matter. Harness: 0.71-1.00 of the measured copy ceiling, median 0.88.
- Head dims that are not powers of two (small shapes: 24, 48, 80) are padded with masks.
- Tried on a GPU and reverted: loading the split path's next block-table entries one iteration
  ahead, as the balanced path does (commit cf65409, PAGE_PREFETCH). On the H100 the two
  split-path shapes got slower (1 x 32768 57.3 -> 64.0 us, 8 x 32768 64.2 -> 77.9 us): 118 -> 158
  registers cost a program per SM (ops/paged_decode_attention, Tuning knobs).
"""
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"SPLIT_TOKENS": 0, "WAVES": 2, "BN": 64, "num_warps": 4, "num_stages": 2}

# dispatch: begin (scripts/bake_dispatch_attn.py rewrites this block)
DISPATCH = {
    '128/8/1/96/32768': {'BN': 64, 'num_warps': 4, 'num_stages': 3, 'WAVES': 2, 'FUSED': 1, 'path': 'balanced'},  # 200.8 us, ratio 0.98, shape 10, NVIDIA H200 2026-12-05
    '128/8/1/128/8192': {'BN': 32, 'num_warps': 4, 'num_stages': 3, 'WAVES': 3, 'FUSED': 1, 'path': 'balanced'},  # 80.2 us, ratio 0.82, shape 5, NVIDIA H200 2026-12-05
    '128/8/1/128/16384': {'BN': 32, 'num_warps': 4, 'num_stages': 3, 'WAVES': 3, 'FUSED': 1, 'path': 'balanced'},  # 139.0 us, ratio 0.95, shape 4, NVIDIA H200 2026-12-05
    '128/16/1/144/8192': {'BN': 32, 'num_warps': 4, 'num_stages': 3, 'WAVES': 3, 'FUSED': 1, 'path': 'balanced'},  # 86.3 us, ratio 0.86, shape 11, NVIDIA H200 2026-12-05
    '128/16/2/8/32768': {'SPLIT_TOKENS': 0, 'WAVES': 2, 'BN': 128, 'num_warps': 8, 'num_stages': 2},  # 49.5 us, ratio 0.74, shape 6, NVIDIA H200 2026-12-05
    '128/16/2/64/16384': {'BN': 32, 'num_warps': 4, 'num_stages': 3, 'WAVES': 3, 'FUSED': 1, 'path': 'balanced'},  # 139.7 us, ratio 0.95, shape 7, NVIDIA H200 2026-12-05
    '128/16/4/32/32768': {'BN': 32, 'num_warps': 4, 'num_stages': 4, 'WAVES': 3, 'FUSED': 0, 'path': 'balanced'},  # 258.6 us, ratio 1.04, shape 8, NVIDIA H200 2026-12-05
    '128/16/4/64/16384': {'BN': 32, 'num_warps': 4, 'num_stages': 4, 'WAVES': 3, 'FUSED': 0, 'path': 'balanced'},  # 260.4 us, ratio 1.02, shape 12, NVIDIA H200 2026-12-05
    '128/28/4/48/8192': {'BN': 32, 'num_warps': 4, 'num_stages': 3, 'WAVES': 3, 'FUSED': 1, 'path': 'balanced'},  # 109.7 us, ratio 0.91, shape 9, NVIDIA H200 2026-12-05
    '128/32/8/1/32768': {'SPLIT_TOKENS': 0, 'WAVES': 2, 'BN': 64, 'num_warps': 4, 'num_stages': 2},  # 42.8 us, ratio 0.76, shape 0, NVIDIA H200 2026-12-05
    '128/32/8/16/8192': {'BN': 64, 'num_warps': 4, 'num_stages': 3, 'WAVES': 2, 'FUSED': 1, 'path': 'balanced'},  # 81.2 us, ratio 0.85, shape 1, NVIDIA H200 2026-12-05
    '128/32/8/64/8192': {'BN': 64, 'num_warps': 4, 'num_stages': 3, 'WAVES': 2, 'FUSED': 1, 'path': 'balanced'},  # 263.0 us, ratio 1.01, shape 2, NVIDIA H200 2026-12-05
    '128/32/8/128/4096': {'BN': 64, 'num_warps': 4, 'num_stages': 3, 'WAVES': 2, 'FUSED': 1, 'path': 'balanced'},  # 264.0 us, ratio 1.00, shape 3, NVIDIA H200 2026-12-05
    '256/16/2/32/32768': {'BN': 32, 'num_warps': 4, 'num_stages': 3, 'WAVES': 2, 'FUSED': 1, 'path': 'balanced'},  # 261.6 us, ratio 1.03, shape 14, NVIDIA H200 2026-12-05
    '256/16/8/8/8192': {'BN': 32, 'num_warps': 4, 'num_stages': 3, 'WAVES': 2, 'FUSED': 1, 'path': 'balanced'},  # 82.0 us, ratio 0.89, shape 13, NVIDIA H200 2026-12-05
}
# dispatch: end

SMS = 132                    # H100/H200 SM count: the unit of WAVES
MAX_SPLIT = 2048
MIN_SPLIT = 16               # one vLLM page
# the balanced path (cfg "path": "balanced"; knowledge_base/kernels/paged_decode_attention/balanced_split.py)
MERGE_ELEMS = 2048           # fp32 elements of one [CB, G2, D] merge tile, at most
B_PAD_MIN = 256              # seq_lens lanes: one compile for every batch up to 256
SMEM_STAGES = 200 * 1024     # K/V bytes of the num_stages - 1 pipeline buffers, at most
_COUNTERS = {}               # device -> int32 tickets, zero between calls


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


@triton.jit
def _first_program(t, NP, T):
    """The program whose tile range [p T / NP, (p + 1) T / NP) holds tile t."""
    return ((t + 1) * NP + T - 1) // T - 1


@triton.jit
def _schedule(len_ptr, B, BN: tl.constexpr, B_PAD: tl.constexpr):
    bi = tl.arange(0, B_PAD)
    bm = bi < B
    lens = tl.load(len_ptr + bi, mask=bm, other=0)
    tiles = (lens + BN - 1) // BN
    ends = tl.cumsum(tiles, axis=0)
    return bi, bm, tiles, ends, tl.sum(tiles, axis=0)


@triton.jit
def _merge(po_ptr, lse_ptr, o_ptr, b, g, c0, n, NCH, s_ob, s_oh,
           G: tl.constexpr, D: tl.constexpr, D_PAD: tl.constexpr, G2: tl.constexpr, CB: tl.constexpr):
    """o[b, g G + h] from the n partial chunks in slots c0 .. c0 + n - 1 of KV head g."""
    h = tl.arange(0, G2)
    hm = h < G
    d = tl.arange(0, D_PAD)
    base = g.to(tl.int64) * NCH + c0
    m = tl.full((G2,), -1e30, dtype=tl.float32)
    l = tl.zeros((G2,), dtype=tl.float32)
    acc = tl.zeros((G2, D_PAD), dtype=tl.float32)
    for s0 in range(0, n, CB):
        ci = s0 + tl.arange(0, CB)
        cm = ci < n
        rows = (base + ci)[:, None] * G2 + h[None, :]                     # [CB, G2]
        rm = cm[:, None] & hm[None, :]
        lse = tl.load(lse_ptr + rows, mask=rm, other=-1e30, cache_modifier=".cg")
        po = tl.load(po_ptr + rows[:, :, None] * D_PAD + d[None, None, :], mask=rm[:, :, None],
                     other=0.0, cache_modifier=".cg")
        m_new = tl.maximum(m, tl.max(lse, axis=0))
        alpha = tl.exp2(m - m_new)
        w = tl.where(rm, tl.exp2(lse - m_new[None, :]), 0.0)
        acc = acc * alpha[:, None] + tl.sum(w[:, :, None] * po, axis=0)
        l = l * alpha + tl.sum(w, axis=0)
        m = m_new
    out = acc / tl.maximum(l, 1e-30)[:, None]
    tl.store(o_ptr + b * s_ob + (g * G + h)[:, None] * s_oh + d[None, :], out.to(o_ptr.dtype.element_ty),
             mask=hm[:, None] & (d < D)[None, :])


@triton.jit(do_not_specialize=["B", "NP", "NCH"])
def _decode_balanced(q_ptr, kc_ptr, vc_ptr, bt_ptr, len_ptr, o_ptr, po_ptr, lse_ptr, cnt_ptr, qk_scale,
                     s_qb, s_qh, s_kb, s_ks, s_kh, s_vb, s_vs, s_vh, s_bt, s_ob, s_oh, B, NP, NCH,
                     G: tl.constexpr, P: tl.constexpr, D: tl.constexpr, D_PAD: tl.constexpr,
                     G2: tl.constexpr, GP: tl.constexpr, BN: tl.constexpr, B_PAD: tl.constexpr,
                     CB: tl.constexpr, FUSED: tl.constexpr):
    g = tl.program_id(0)
    p = tl.program_id(1)
    bi, bm, tiles, ends, T = _schedule(len_ptr, B, BN, B_PAD)
    NPT = tl.maximum(tl.minimum(T, NP), 1)                # programs in use: none of them empty
    lo = (p * T) // NPT
    hi = ((p + 1) * T) // NPT
    if p < NPT:
        b_first = tl.sum((bm & (ends <= lo)).to(tl.int32), axis=0)
        b_last = tl.sum((bm & (ends - tiles < hi)).to(tl.int32), axis=0) - 1
        r = tl.arange(0, GP)
        hmask = r < G
        d = tl.arange(0, D_PAD)
        dmask = d < D
        for b in range(b_first, b_last + 1):
            e_b = tl.sum(tl.where(bi == b, ends, 0), axis=0)
            s_b = e_b - tl.sum(tl.where(bi == b, tiles, 0), axis=0)
            t0 = tl.maximum(lo, s_b)
            t1 = tl.minimum(hi, e_b)
            if t0 < t1:                                   # zero-length sequences have no tiles
                L = tl.load(len_ptr + b)
                tok_hi = tl.minimum((t1 - s_b) * BN, L)
                q = tl.load(q_ptr + b * s_qb + (g * G + r)[:, None] * s_qh + d[None, :],
                            mask=hmask[:, None] & dmask[None, :], other=0.0)
                m_i = tl.full((GP,), -1e30, dtype=tl.float32)
                l_i = tl.zeros((GP,), dtype=tl.float32)
                acc = tl.zeros((GP, D_PAD), dtype=tl.float32)
                bt_row = bt_ptr + b * s_bt                   # B * max_blocks int32 entries: no overflow
                tok_lo = (t0 - s_b) * BN
                tok = tok_lo + tl.arange(0, BN)
                nxt = tl.load(bt_row + tok // P, mask=tok < tok_hi, other=0)
                for n0 in range(tok_lo, tok_hi, BN):
                    tok = n0 + tl.arange(0, BN)
                    tmask = tok < tok_hi
                    # this tile's pages came with the previous iteration: no load feeds this
                    # iteration's K/V addresses (the docstring's Gather)
                    page = nxt.to(tl.int64)
                    nxt = tl.load(bt_row + (tok + BN) // P, mask=tok + BN < tok_hi, other=0)
                    slot = (tok % P).to(tl.int64)
                    k = tl.load(kc_ptr + (page * s_kb + slot * s_ks + g * s_kh)[:, None] + d[None, :],
                                mask=tmask[:, None] & dmask[None, :], other=0.0)
                    v = tl.load(vc_ptr + (page * s_vb + slot * s_vs + g * s_vh)[:, None] + d[None, :],
                                mask=tmask[:, None] & dmask[None, :], other=0.0)
                    s = tl.dot(q, tl.trans(k)) * qk_scale
                    s = tl.where(tmask[None, :], s, float("-inf"))
                    m_new = tl.maximum(m_i, tl.max(s, axis=1))
                    alpha = tl.exp2(m_i - m_new)
                    pr = tl.exp2(s - m_new[:, None])
                    l_i = l_i * alpha + tl.sum(pr, axis=1)
                    acc = acc * alpha[:, None] + tl.dot(pr.to(v.dtype), v)
                    m_i = m_new
                out = acc / l_i[:, None]
                pf = _first_program(s_b, NPT, T)
                n = _first_program(e_b - 1, NPT, T) - pf + 1
                if n == 1:                                # the whole sequence is this program's
                    tl.store(o_ptr + b * s_ob + (g * G + r)[:, None] * s_oh + d[None, :],
                             out.to(o_ptr.dtype.element_ty), mask=hmask[:, None] & dmask[None, :])
                else:
                    row = (g.to(tl.int64) * NCH + p + b) * G2 + r            # slot p + b, [G2] rows
                    tl.store(po_ptr + row[:, None] * D_PAD + d[None, :], out, mask=(r < G2)[:, None])
                    tl.store(lse_ptr + row, m_i + tl.log2(l_i), mask=r < G2)
                    if FUSED:
                        tl.debug_barrier()                # every thread's partial before the ticket
                        ticket = tl.atomic_add(cnt_ptr + g * B + b, 1, sem="acq_rel", scope="gpu")
                        if ticket == n - 1:               # last of b's programs: merge, reset
                            tl.atomic_xchg(cnt_ptr + g * B + b, 0)
                            _merge(po_ptr, lse_ptr, o_ptr, b, g, pf + b, n, NCH, s_ob, s_oh,
                                   G, D, D_PAD, G2, CB)


@triton.jit(do_not_specialize=["B", "NP", "NCH"])
def _combine_balanced(po_ptr, lse_ptr, len_ptr, o_ptr, B, NP, NCH, s_ob, s_oh,
             G: tl.constexpr, D: tl.constexpr, D_PAD: tl.constexpr, G2: tl.constexpr,
             BN: tl.constexpr, B_PAD: tl.constexpr, CB: tl.constexpr):
    g = tl.program_id(0)
    b = tl.program_id(1)
    bi, bm, tiles, ends, T = _schedule(len_ptr, B, BN, B_PAD)
    e_b = tl.sum(tl.where(bi == b, ends, 0), axis=0)
    s_b = e_b - tl.sum(tl.where(bi == b, tiles, 0), axis=0)
    if s_b < e_b:
        NPT = tl.maximum(tl.minimum(T, NP), 1)
        pf = _first_program(s_b, NPT, T)
        n = _first_program(e_b - 1, NPT, T) - pf + 1
        if n > 1:                                         # n == 1: stored by the decode kernel
            _merge(po_ptr, lse_ptr, o_ptr, b, g, pf + b, n, NCH, s_ob, s_oh, G, D, D_PAD, G2, CB)


def num_programs(cfg, B, HK, width):
    """Programs per KV head: WAVES x SMS in all, at most one per tile the table can hold."""
    return max(1, min(triton.cdiv(cfg["WAVES"] * SMS, HK), B * triton.cdiv(width, cfg["BN"])))


def balanced_stages(cfg, BN, d_pad):
    """num_stages, lowered where its K/V buffers would not fit one SM (D 256 at BN 128)."""
    return max(2, min(cfg["num_stages"], SMEM_STAGES // (4 * BN * d_pad) + 1))


def counters(n, device):
    """The module's ticket buffer (zeroed once; every call leaves it zero)."""
    buf = _COUNTERS.get(device)
    if buf is None or buf.numel() < n:
        buf = torch.zeros(max(n, 1024), dtype=torch.int32, device=device)
        _COUNTERS[device] = buf
    return buf


def attention_balanced(q, key_cache, value_cache, block_tables, seq_lens, scale, cfg, cnt=None):
    """The balanced path with an explicit config (balanced_split.py's attention)."""
    B, HQ, D = q.shape
    _, P, HK, _ = key_cache.shape
    G = HQ // HK
    BN = cfg["BN"]
    NP = num_programs(cfg, B, HK, block_tables.shape[1] * P)
    NCH = NP + B
    d_pad = max(16, triton.next_power_of_2(D))
    g2 = triton.next_power_of_2(G)
    b_pad = max(B_PAD_MIN, triton.next_power_of_2(B))
    cb = max(1, (2 * MERGE_ELEMS if g2 <= 4 else MERGE_ELEMS) // (g2 * d_pad))   # no spills at G 4 either
    o = torch.empty_like(q)
    po = torch.empty((HK * NCH * g2, d_pad), dtype=torch.float32, device=q.device)
    lse = torch.empty((HK * NCH * g2,), dtype=torch.float32, device=q.device)
    fused = bool(cfg["FUSED"])
    if fused and cnt is None:
        cnt = counters(HK * B, q.device)
    _decode_balanced[(HK, NP)](
        q, key_cache, value_cache, block_tables, seq_lens, o, po, lse, cnt if fused else lse,
        scale * math.log2(math.e),
        q.stride(0), q.stride(1), key_cache.stride(0), key_cache.stride(1), key_cache.stride(2),
        value_cache.stride(0), value_cache.stride(1), value_cache.stride(2), block_tables.stride(0),
        o.stride(0), o.stride(1), B, NP, NCH,
        G=G, P=P, D=D, D_PAD=d_pad, G2=g2, GP=max(16, g2), BN=BN, B_PAD=b_pad, CB=cb, FUSED=fused,
        num_warps=cfg["num_warps"], num_stages=balanced_stages(cfg, BN, d_pad))
    if not fused:
        _combine_balanced[(HK, B)](po, lse, seq_lens, o, B, NP, NCH, o.stride(0), o.stride(1),
                          G=G, D=D, D_PAD=d_pad, G2=g2, BN=BN, B_PAD=b_pad, CB=cb, num_warps=4)
    return o


def attention(q, key_cache, value_cache, block_tables, seq_lens, scale, cfg):
    """Launch with an explicit config (the tuner's entry point; ModelNew picks cfg per shape).
    cfg "path" "balanced" takes the work-balanced schedule (attention_balanced), else the split grid."""
    if cfg.get("path") == "balanced":
        return attention_balanced(q, key_cache, value_cache, block_tables, seq_lens, scale, cfg)
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
