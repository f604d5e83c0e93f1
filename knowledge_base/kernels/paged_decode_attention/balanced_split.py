"""
---
id: kernels/paged_decode_attention/balanced_split
op: paged_decode_attention
category: Fusion
dtypes: [bfloat16]
techniques: [split-kv, flash-decoding, work-balanced-schedule, persistent-grid, last-block-finalize, log-sum-exp-combine, gqa-grouping, paged-kv-cache, online-softmax, gather, tl-dot, int64-offsets, masking]
params:
  BN: [32, 64, 128]
  WAVES: [1, 2, 3, 4, 8]
  FUSED: [0, 1]
  num_warps: [4, 8]
  num_stages: [2, 3, 4]
summary: Flash-decoding with a work-balanced schedule. A fixed grid of (Hkv, about WAVES x 132 / Hkv) programs; each program derives from seq_lens on the device an equal share of the batch's BN-token tiles (a contiguous range of the concatenated sequences), so ragged batches leave no idle SMs and no tail wave. A sequence that lies inside one program is stored in bf16 directly; the others leave fp32 partials with base-2 LSE, merged by the last program to arrive (atomic ticket, FUSED 1, one launch) or by a small combine kernel (FUSED 0).
---
o[b, h] = softmax_j (q[b, h] . K[b, j, h // G] * scale) V[b, j, h // G] over j < seq_lens[b], with
K/V rows gathered through block_tables from a [num_blocks, P, Hkv, D] cache.

Why (split_dispatch at 0.70-0.80 of the copy ceiling on the small and one-KV-head shapes): its grid
(Hkv, B, width / split) is sized from the table width, so with seq_lens spread over (0, max] half
the programs return at once and the live ones are a whole split or a ragged last piece. At 128 x 1
KV head the tuned split of 2048 tokens gives ~320 live programs of up to 1 MB each over 132 SMs:
1.2-2.5 waves, the last one mostly idle, and a finer split only adds programs and combine bytes.
A 16-token page of one KV head is 4 KB of K (D 128), so ~40 KB per SM must be in flight. There
the gather serialises: the loop loads block_tables[b, tok // P] and then K/V at those pages, and
Triton 3.6's pipeliner, seeing a load feeding a load, gives K/V one shared buffer and waits for
it at the top of every iteration (offline sm_90a TTGIR: 1x64x128 buffers and 38,912-39,168 B at
every pipeline depth from 2 to 4), so each tile costs a full memory latency with nothing in flight. The two launches (split and combine) add a fixed few
microseconds against the 28-60 us floors of shapes 0, 1, 5 and 6.

Design:
- Schedule: every program loads seq_lens ([B_PAD] int32, cheap), forms each sequence's tile
  count and their inclusive prefix sum, T tiles in all, and takes the tiles
  [p T / NP, (p + 1) T / NP) of the concatenation: equal work within one tile per program, no
  host sync (CUDA-graph safe). It walks the sequences that range touches (1-3 usually), the GQA
  group's query heads forming one [GP, D] q tile for tl.dot (GP >= 16).
- Gather: BN tokens (BN / P pages) per iteration, int64 page offsets, tokens >= seq_lens[b]
  masked by index. The table entries of tile i + 1 are loaded in iteration i and carried: no
  load feeds a K/V address within an iteration, so the pipeliner keeps num_stages - 1 tiles in
  flight (TTGIR: 2x / 3x64x128 buffers at num_stages 3 / 4, 71,680 / 104,448 B at BN 64).
- Partials: the chunk of sequence b in program p has slot p + b (program and sequence indices
  both only grow along the concatenation), so NP + B slots per KV head hold every chunk. The
  programs of b are p(t) = ceil((t + 1) NP / T) - 1 at its first and last tile.
- FUSED 1: after its partial a program takes a ticket on b's counter (barrier, then acq_rel
  atomic); the one that draws n - 1 reads the n partials through the L2 (.cg), merges them and
  zeroes the counter, so the cached counter buffer stays zero between calls. FUSED 0: the same
  merge in a second launch of (Hkv, B) programs, which return when b had one chunk.
- Merge: [CB, G2, D] partial tiles (G2 = G rounded up to a power of two), online over chunks.
- WAVES sets the number of programs, WAVES x 132 in all: equal shares, so it should match the
  CTAs that fit per SM (shared memory ~ num_stages x 2 x BN x D x 2 B); a value above occupancy
  runs a second, full wave.
- Zero-length sequences are never written (the reference gives NaN there).
"""
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"BN": 32, "WAVES": 2, "FUSED": 1, "num_warps": 4, "num_stages": 4}

SMS = 132                    # H100/H200 SM count: the unit of WAVES
MERGE_ELEMS = 2048           # fp32 elements of one [CB, G2, D] merge tile, at most
B_PAD_MIN = 256              # seq_lens lanes: one compile for every batch up to 256
SMEM_STAGES = 200 * 1024     # K/V bytes of the num_stages - 1 pipeline buffers, at most
_COUNTERS = {}               # device -> int32 tickets, zero between calls (for attention())


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
def _combine(po_ptr, lse_ptr, len_ptr, o_ptr, B, NP, NCH, s_ob, s_oh,
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


def shape_key(q, key_cache, block_tables):
    B, HQ, D = q.shape
    return f"{D}/{HQ}/{key_cache.shape[2]}/{B}/{block_tables.shape[1] * key_cache.shape[1]}"


def num_programs(cfg, B, HK, width):
    """Programs per KV head: WAVES x SMS in all, at most one per tile the table can hold."""
    return max(1, min(triton.cdiv(cfg["WAVES"] * SMS, HK), B * triton.cdiv(width, cfg["BN"])))


def stages(cfg, BN, d_pad):
    """num_stages, lowered where its K/V buffers would not fit one SM (D 256 at BN 128)."""
    return max(2, min(cfg["num_stages"], SMEM_STAGES // (4 * BN * d_pad) + 1))


def counters(n, device):
    """The module's ticket buffer (zeroed once; every call leaves it zero)."""
    buf = _COUNTERS.get(device)
    if buf is None or buf.numel() < n:
        buf = torch.zeros(max(n, 1024), dtype=torch.int32, device=device)
        _COUNTERS[device] = buf
    return buf


def attention(q, key_cache, value_cache, block_tables, seq_lens, scale, cfg, cnt=None):
    """Launch with an explicit config (the tuner's entry point)."""
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
        num_warps=cfg["num_warps"], num_stages=stages(cfg, BN, d_pad))
    if not fused:
        _combine[(HK, B)](po, lse, seq_lens, o, B, NP, NCH, o.stride(0), o.stride(1),
                          G=G, D=D, D_PAD=d_pad, G2=g2, BN=BN, B_PAD=b_pad, CB=cb, num_warps=4)
    return o


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale
        self._counts = None  # int32 tickets per (KV head, sequence), zero between calls

    def forward(self, q, key_cache, value_cache, block_tables, seq_lens):
        n = key_cache.shape[2] * q.shape[0]
        if self._counts is None or self._counts.numel() < n or self._counts.device != q.device:
            self._counts = torch.zeros(n, dtype=torch.int32, device=q.device)
        return attention(q, key_cache, value_cache, block_tables, seq_lens, self.scale, AKA_PARAMS,
                         self._counts)
