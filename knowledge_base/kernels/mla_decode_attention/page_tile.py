"""
---
id: kernels/mla_decode_attention/page_tile
op: mla_decode_attention
category: Fusion
dtypes: [bfloat16]
techniques: [split-kv, flash-decoding, log-sum-exp-combine, paged-kv-cache, online-softmax, tma, tensor-descriptors, shared-memory-bandwidth, tl-dot, int64-offsets, masking]
params:
  BH: [16, 32, 64]
  BN: [16, 32, 64]
  TMA: [0, 1]
  SPLIT_TOKENS: [0, 512, 1024, 2048]
  WAVES: [1, 2, 4]
  num_warps: [4, 8]
  num_stages: [1, 2, 3]
tuner: attention
summary: Absorbed-MLA decode whose cache tiles are whole pieces of one page (BN divides the block size), so a tile is one block-table lookup and one contiguous [BN, 576] slab, loaded by TMA descriptors or one pointer block; BN 64 with two stages in 221 KB of shared memory halves the score wgmma's shared-memory operand traffic per token against split_dispatch's BN 32. Split-KV over (head block, sequence, split) with an LSE combine.
---
score[h, t] = (q_nope[h] . c[t] + q_pe[h] . k_pe[t]) * scale; out[h] = softmax(score[h]) @ c, with
the 576-wide cache row [c (512) | k_pe (64)] shared by all H heads and gathered through
block_tables.

Why (knowledge_base/ops/mla_decode_attention.md, "What you see"): split_dispatch's 128-head
config (64 heads by 32 tokens, 8 warps) issues its score dot as wgmma m64n16k16 with both operands
in shared memory (sm_90a SASS: 72 HGMMA.64x16x16 per warpgroup per tile, the [8, 1] chained-dot
layout making both warpgroups compute the whole [64, 32] score). Each such instruction reads a 2 KB
slice of the query tile and 512 B of cache for 16,384 multiply-adds: 8 clocks of tensor work
against 20 clocks of the SM's 128 bytes per clock of shared memory. Per cached token that is
2 x 72 x 2.5 KB / 32 = 11.25 KB of operand reads, about 88 clocks; at shape 4 (B 128, 8192
tokens, 2 head blocks) 15,900 token-blocks per SM come to ~700 us of the 1023 us the H200
measured. The query re-read shrinks only with a wider score tile: at 64 tokens the instruction is
m64n32k16 (3 KB per 32,768 multiply-adds), 6.75 KB per token. Measured on an H100 (2026-12-05,
results/h100/device-2026-12-05, scripts/gpu_tune_attn.py, first three configs of each grid):
1.61-1.79x split_dispatch on the six large 128- and 64-head shapes, 1.22x at batch 1.

Design:
- Pages as tiles: with BN dividing the block size P, and every split a multiple of BN, a tile of
  BN tokens lies in one page, so it is one scalar block-table load and one contiguous
  [BN, 576] slab (rows page * P + n0 % P ...). TMA 1 loads it through two host descriptors over
  the cache viewed as [num_blocks * P, 576] rows ([BN, DC_PAD] of c, [BN, DR_PAD] of k_pe, the
  hardware zero-filling columns past 512 / 64), so no thread computes an address; TMA 0 loads the
  same slab through one pointer block (cp.async when pipelined). A block size BN does not divide
  takes the per-token gather of split_dispatch, and so does a page smaller than BN (vLLM's
  16-token pages): page tiles cut to 16 tokens, as before 2026-12-06, ran shape 11 at 179.2 us
  on an H100, split_dispatch's 32-token gather 126.8 us (harness runs a day apart).
- The last, partial tile of a split reads the whole slab (still inside the page) and zeroes the
  rows past the sequence with a where(), so stale cache rows (NaN included) never reach P @ c.
- 64-token tiles with 2 stages: the [64, 576] query tile (72 KB) plus two [64, 576] cache stages (144 KB)
  is 221,184 B of shared memory, inside the H200's 227 KB per block; the stage clamp here allows
  224 KB (split_dispatch's 200 KB clamp left such tiles one stage, which spilled).
- Grid (head block, sequence, split), head block fastest so the programs of one split read the
  same slab from L2; split length a runtime argument (WAVES x 132 programs when the table has
  none); fp32 partials with lse = m + log2(l) merged by `_combine`; one split: bf16 direct.
- scale * log2(e) folded into the score; finite -1e30 running max; P in the cache dtype for P @ c.
- Tried offline and left out: wrapping the score dot in a one-trip runtime loop hides the
  chained dot from Triton (the score then splits [4, 2] over the warpgroups instead of being
  computed twice), but the tile loop, no longer innermost, loses its software pipelining (151,552
  B of shared memory: one stage) and ptxas spills 812 B (sm_90a, triton 3.6, shape 4).
- Two loop shapes (PEEL): with wgmma tiles (64 heads and more) whole tiles run unmasked and the partial
  tail apart, since a where() on a TMA tile inside the loop sends it through registers (376 B
  spilled at shape 4); with mma.sync tiles (16 heads) one masked loop, since the second copy of the
  body spilled 164-1004 B there (offline sm_90a, triton 3.6, shapes 9 and 11).
- Guard rails: the descriptors need 16-byte aligned row stride and bases (the 512-wide c block starts the
  row, k_pe at DC elements): a cache that fails them, or a layout that is not [blocks, P, row]
  contiguous in its rows, falls back to the pointer slab.
"""
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

AKA_PARAMS = {"BH": 64, "BN": 64, "TMA": 1, "SPLIT_TOKENS": 0, "WAVES": 1, "num_warps": 8, "num_stages": 2}

# dispatch: begin (filled from a GPU tuner run; empty: the rule in `config`)
DISPATCH = {
    '512/16/8/16384/64': {'BH': 16, 'BN': 64, 'TMA': 0, 'num_warps': 4, 'num_stages': 3, 'SPLIT_TOKENS': 0, 'WAVES': 1},  # 53.8 us, ratio 0.55, shape 7, NVIDIA H100 80GB HBM3 2026-12-05
    '512/16/64/8192/64': {'BH': 16, 'BN': 64, 'TMA': 0, 'num_warps': 4, 'num_stages': 3, 'SPLIT_TOKENS': 0, 'WAVES': 2},  # 139.8 us, ratio 0.77, shape 8, NVIDIA H100 80GB HBM3 2026-12-05
    '512/16/96/4096/16': {'BH': 16, 'BN': 32, 'TMA': 1, 'num_warps': 4, 'num_stages': 2, 'SPLIT_TOKENS': 0, 'WAVES': 2},  # 177.8 us, ratio 0.45, shape 11, NVIDIA H100 80GB HBM3 2026-12-05 (run as BN 16 page tiles then)
    '512/16/128/4096/64': {'BH': 16, 'BN': 64, 'TMA': 0, 'num_warps': 4, 'num_stages': 3, 'SPLIT_TOKENS': 0, 'WAVES': 2},  # 147.6 us, ratio 0.72, shape 10, NVIDIA H100 80GB HBM3 2026-12-05
    '512/16/128/16384/64': {'BH': 16, 'BN': 64, 'TMA': 0, 'num_warps': 4, 'num_stages': 3, 'SPLIT_TOKENS': 0, 'WAVES': 2},  # 495.8 us, ratio 0.85, shape 9, NVIDIA H100 80GB HBM3 2026-12-05
    '512/32/32/16384/64': {'BH': 16, 'BN': 64, 'TMA': 0, 'num_warps': 4, 'num_stages': 3, 'SPLIT_TOKENS': 0, 'WAVES': 2},  # 199.8 us, ratio 0.54, shape 12, NVIDIA H100 80GB HBM3 2026-12-05
    '512/64/64/32768/64': {'BH': 64, 'BN': 64, 'TMA': 1, 'num_warps': 8, 'num_stages': 2, 'SPLIT_TOKENS': 2048, 'WAVES': 1},  # 624.4 us, ratio 0.69, shape 13, NVIDIA H100 80GB HBM3 2026-12-05
    '512/128/1/32768/64': {'BH': 64, 'BN': 64, 'TMA': 1, 'num_warps': 8, 'num_stages': 2, 'SPLIT_TOKENS': 512, 'WAVES': 1},  # 60.5 us, ratio 0.22, shape 0, NVIDIA H100 80GB HBM3 2026-12-05
    '512/128/4/2048/64': {'BH': 64, 'BN': 64, 'TMA': 0, 'num_warps': 8, 'num_stages': 2, 'SPLIT_TOKENS': 0, 'WAVES': 1},  # 31.4 us, ratio 0.08, shape 1, NVIDIA H100 80GB HBM3 2026-12-05
    '512/128/16/8192/64': {'BH': 64, 'BN': 64, 'TMA': 1, 'num_warps': 8, 'num_stages': 2, 'SPLIT_TOKENS': 0, 'WAVES': 1},  # 116.6 us, ratio 0.25, shape 2, NVIDIA H100 80GB HBM3 2026-12-05
    '512/128/32/32768/64': {'BH': 64, 'BN': 64, 'TMA': 1, 'num_warps': 8, 'num_stages': 2, 'SPLIT_TOKENS': 2048, 'WAVES': 1},  # 614.2 us, ratio 0.36, shape 6, NVIDIA H100 80GB HBM3 2026-12-05
    '512/128/64/4096/64': {'BH': 64, 'BN': 64, 'TMA': 1, 'num_warps': 8, 'num_stages': 2, 'SPLIT_TOKENS': 1024, 'WAVES': 1},  # 201.6 us, ratio 0.29, shape 3, NVIDIA H100 80GB HBM3 2026-12-05
    '512/128/128/8192/64': {'BH': 64, 'BN': 64, 'TMA': 1, 'num_warps': 8, 'num_stages': 2, 'SPLIT_TOKENS': 2048, 'WAVES': 1},  # 622.5 us, ratio 0.36, shape 4, NVIDIA H100 80GB HBM3 2026-12-05
    '512/128/160/4096/64': {'BH': 64, 'BN': 64, 'TMA': 1, 'num_warps': 8, 'num_stages': 2, 'SPLIT_TOKENS': 1024, 'WAVES': 1},  # 447.8 us, ratio 0.33, shape 5, NVIDIA H100 80GB HBM3 2026-12-05
}
# dispatch: end

SMS = 132
MAX_SPLIT = 4096
MIN_SPLIT = 16
_SMEM_BUDGET = 224 * 1024


@triton.jit
def _update(q_n, q_p, c, kpe, valid, m_i, l_i, acc, qk_scale, MASKED: tl.constexpr):
    """One tile of the online softmax: scores, running max and sum, acc += P @ c."""
    s = (tl.dot(q_n, tl.trans(c)) + tl.dot(q_p, tl.trans(kpe))) * qk_scale
    if MASKED:
        s = tl.where(valid[None, :], s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(s - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    acc = acc * alpha[:, None] + tl.dot(p.to(c.dtype), c)
    return m_new, l_i, acc


@triton.jit
def _slab(c_desc, r_desc, kv_ptr, bt_row, n0, hi, dc, dr, s_kvb, s_kvs,
          DC: tl.constexpr, DR: tl.constexpr, P: tl.constexpr, BN: tl.constexpr,
          PAGED: tl.constexpr, TMA: tl.constexpr, MASKED: tl.constexpr):
    """The c [BN, DC_PAD] and k_pe [BN, DR_PAD] tiles of tokens n0 .. n0 + BN and their validity."""
    tok = n0 + tl.arange(0, BN)
    valid = tok < hi
    if PAGED:   # the tile lies inside one page: one block-table entry
        page = tl.load(bt_row + n0 // P)
        if TMA:
            r0 = page * P + n0 % P
            c = c_desc.load([r0, 0])
            kpe = r_desc.load([r0, 0])
            if MASKED:   # rows past the sequence hold whatever the cache holds there
                c = tl.where(valid[:, None], c, 0.0)
                kpe = tl.where(valid[:, None], kpe, 0.0)
        else:
            slot = ((n0 % P) + tl.arange(0, BN)).to(tl.int64)
            row = kv_ptr + page.to(tl.int64) * s_kvb + slot[:, None] * s_kvs
            rows_ok = valid[:, None] if MASKED else tl.full((BN, 1), 1, tl.int1)
            c = tl.load(row + dc[None, :], mask=rows_ok & (dc < DC)[None, :], other=0.0)
            kpe = tl.load(row + DC + dr[None, :], mask=rows_ok & (dr < DR)[None, :], other=0.0)
    else:       # per-token gather: tiles cross pages
        page = tl.load(bt_row + tok // P, mask=valid, other=0).to(tl.int64)
        row = kv_ptr + (page * s_kvb + (tok % P).to(tl.int64) * s_kvs)[:, None]
        c = tl.load(row + dc[None, :], mask=valid[:, None] & (dc < DC)[None, :], other=0.0)
        kpe = tl.load(row + DC + dr[None, :], mask=valid[:, None] & (dr < DR)[None, :], other=0.0)
    return c, kpe, valid


@triton.jit(do_not_specialize=["SPLIT", "NSPLIT"])
def _mla_page(qn_ptr, qp_ptr, c_desc, r_desc, kv_ptr, bt_ptr, len_ptr, o_ptr, po_ptr, lse_ptr, qk_scale, H,
              SPLIT, NSPLIT, s_qnb, s_qnh, s_qpb, s_qph, s_kvb, s_kvs, s_bt, s_ob, s_oh,
              DC: tl.constexpr, DR: tl.constexpr, DC_PAD: tl.constexpr, DR_PAD: tl.constexpr,
              P: tl.constexpr, BH: tl.constexpr, BN: tl.constexpr, PAGED: tl.constexpr, TMA: tl.constexpr,
              PEEL: tl.constexpr, DIRECT: tl.constexpr):
    hb = tl.program_id(0)
    b = tl.program_id(1)
    sp = tl.program_id(2)
    L = tl.load(len_ptr + b)
    lo = sp * SPLIT
    if lo >= L:
        return
    hi = tl.minimum(lo + SPLIT, L)
    heads = hb * BH + tl.arange(0, BH)
    hmask = heads < H
    dc = tl.arange(0, DC_PAD)
    dr = tl.arange(0, DR_PAD)
    q_n = tl.load(qn_ptr + b * s_qnb + heads[:, None] * s_qnh + dc[None, :],
                  mask=hmask[:, None] & (dc < DC)[None, :], other=0.0)
    q_p = tl.load(qp_ptr + b * s_qpb + heads[:, None] * s_qph + dr[None, :],
                  mask=hmask[:, None] & (dr < DR)[None, :], other=0.0)
    m_i = tl.full((BH,), -1e30, dtype=tl.float32)
    l_i = tl.zeros((BH,), dtype=tl.float32)
    acc = tl.zeros((BH, DC_PAD), dtype=tl.float32)
    bt_row = bt_ptr + b.to(tl.int64) * s_bt
    if PEEL:   # wgmma tiles: whole tiles unmasked, the masked tail apart (masking in the loop spills)
        full = lo + (hi - lo) // BN * BN
        for n0 in range(lo, full, BN):
            c, kpe, valid = _slab(c_desc, r_desc, kv_ptr, bt_row, n0, hi, dc, dr, s_kvb, s_kvs,
                                  DC, DR, P, BN, PAGED, TMA, False)
            m_i, l_i, acc = _update(q_n, q_p, c, kpe, valid, m_i, l_i, acc, qk_scale, False)
        if full < hi:
            c, kpe, valid = _slab(c_desc, r_desc, kv_ptr, bt_row, full, hi, dc, dr, s_kvb, s_kvs,
                                  DC, DR, P, BN, PAGED, TMA, True)
            m_i, l_i, acc = _update(q_n, q_p, c, kpe, valid, m_i, l_i, acc, qk_scale, True)
    else:      # mma.sync tiles: one masked loop (a second copy of the body spills)
        for n0 in range(lo, hi, BN):
            c, kpe, valid = _slab(c_desc, r_desc, kv_ptr, bt_row, n0, hi, dc, dr, s_kvb, s_kvs,
                                  DC, DR, P, BN, PAGED, TMA, True)
            m_i, l_i, acc = _update(q_n, q_p, c, kpe, valid, m_i, l_i, acc, qk_scale, True)
    out = acc / l_i[:, None]
    if DIRECT:
        tl.store(o_ptr + b * s_ob + heads[:, None] * s_oh + dc[None, :], out.to(o_ptr.dtype.element_ty),
                 mask=hmask[:, None] & (dc < DC)[None, :])
    else:
        row_id = (b * H + heads).to(tl.int64) * NSPLIT + sp          # [B, H, NSPLIT]
        tl.store(po_ptr + row_id[:, None] * DC_PAD + dc[None, :], out, mask=hmask[:, None])
        tl.store(lse_ptr + row_id, m_i + tl.log2(l_i), mask=hmask)


@triton.jit(do_not_specialize=["SPLIT", "NSPLIT"])
def _combine(po_ptr, lse_ptr, len_ptr, o_ptr, H, NSPLIT, SPLIT, s_ob, s_oh,
             DC: tl.constexpr, DC_PAD: tl.constexpr, SC: tl.constexpr):
    """out[b, h] = sum_s exp2(lse_s - max) * partial_s / sum_s exp2(lse_s - max) over the splits
    the sequence reaches."""
    bh = tl.program_id(0)
    b = bh // H
    h = bh % H
    n_valid = tl.cdiv(tl.load(len_ptr + b), SPLIT)
    base = bh.to(tl.int64) * NSPLIT
    d = tl.arange(0, DC_PAD)
    mx = tl.full((SC,), -1e30, dtype=tl.float32)
    for s0 in range(0, n_valid, SC):
        s = s0 + tl.arange(0, SC)
        mx = tl.maximum(mx, tl.load(lse_ptr + base + s, mask=s < n_valid, other=-1e30))
    top = tl.max(mx, axis=0)
    acc = tl.zeros((DC_PAD,), dtype=tl.float32)
    wsum = tl.zeros((SC,), dtype=tl.float32)
    for s0 in range(0, n_valid, SC):
        s = s0 + tl.arange(0, SC)
        sm = s < n_valid
        w = tl.where(sm, tl.exp2(tl.load(lse_ptr + base + s, mask=sm, other=0.0) - top), 0.0)
        po = tl.load(po_ptr + (base + s)[:, None] * DC_PAD + d[None, :], mask=sm[:, None], other=0.0)
        acc += tl.sum(po * w[:, None], axis=0)
        wsum += w
    tl.store(o_ptr + b * s_ob + h * s_oh + d, (acc / tl.sum(wsum, axis=0)).to(o_ptr.dtype.element_ty),
             mask=d < DC)


def shape_key(q_nope, kv_c_and_k_pe, block_tables):
    B, H, DC = q_nope.shape
    P = kv_c_and_k_pe.shape[1]
    return f"{DC}/{H}/{B}/{block_tables.shape[1] * P}/{P}"


def config(q_nope, kv_c_and_k_pe, block_tables):
    """The table's entry for this shape, else the rule: 64-head tiles on 8 warps where the op is
    compute-bound (H >= 64), 16-head tiles on 4 warps below (memory-bound, one head block), there
    with pointer loads: a masked TMA tile goes through registers (sm_90a, shape 9: 182 registers
    and 94 KB with TMA 0, 255 and 166 KB with TMA 1)."""
    key = shape_key(q_nope, kv_c_and_k_pe, block_tables)
    if key in DISPATCH:
        return DISPATCH[key]
    if q_nope.shape[1] >= 64:
        return dict(AKA_PARAMS)
    return {**AKA_PARAMS, "BH": 16, "BN": 64, "TMA": 0, "num_warps": 4, "num_stages": 3, "WAVES": 2}


def split_tokens(cfg, B, n_hb, width, bn):
    """Tokens per split, a multiple of BN (so tiles stay inside pages): the table's fixed value,
    or the largest power of two <= MAX_SPLIT that still gives WAVES * SMS programs."""
    if cfg["SPLIT_TOKENS"]:
        return max(bn, cfg["SPLIT_TOKENS"] // bn * bn)
    split = MAX_SPLIT
    while split > max(MIN_SPLIT, bn) and B * n_hb * triton.cdiv(width, split) < cfg["WAVES"] * SMS:
        split //= 2
    return split


def tma_ok(kv, DC: int, el: int) -> bool:
    """What the two descriptors need: rows contiguous, pages stacked, 16-byte row stride and bases."""
    P = kv.shape[1]
    return (kv.stride(2) == 1 and kv.stride(0) == P * kv.stride(1) and (kv.stride(1) * el) % 16 == 0
            and kv.data_ptr() % 16 == 0 and (DC * el) % 16 == 0)


def attention(q_nope, q_pe, kv_c_and_k_pe, block_tables, seq_lens, scale, cfg):
    """Launch with an explicit config (the tuner's entry point; ModelNew picks cfg per shape)."""
    B, H, DC = q_nope.shape
    DR = q_pe.shape[2]
    kv = kv_c_and_k_pe
    P = kv.shape[1]
    bh = cfg["BH"]
    bn = cfg["BN"]
    paged = P % bn == 0
    el = q_nope.element_size()
    tma = bool(cfg.get("TMA", 1)) and paged and tma_ok(kv, DC, el)
    dc_pad = max(16, triton.next_power_of_2(DC))
    dr_pad = max(16, triton.next_power_of_2(DR))
    n_hb = triton.cdiv(H, bh)
    width = block_tables.shape[1] * P
    split = split_tokens(cfg, B, n_hb, width, bn)
    nsplit = triton.cdiv(width, split)
    direct = nsplit == 1
    stage = bn * (dc_pad + dr_pad) * el
    stages = max(1, min(cfg["num_stages"], (_SMEM_BUDGET - bh * (dc_pad + dr_pad) * el) // stage))
    o = torch.empty_like(q_nope)
    po = o if direct else torch.empty((B * H * nsplit, dc_pad), dtype=torch.float32, device=o.device)
    lse = o if direct else torch.empty((B * H * nsplit,), dtype=torch.float32, device=o.device)
    if tma:
        rows = kv.view(kv.shape[0] * P, kv.shape[2])
        c_desc = TensorDescriptor(rows, (rows.shape[0], DC), (rows.stride(0), 1), [bn, dc_pad])
        r_desc = TensorDescriptor(rows[:, DC:], (rows.shape[0], DR), (rows.stride(0), 1), [bn, dr_pad])
    else:
        c_desc = r_desc = None
    _mla_page[(n_hb, B, nsplit)](
        q_nope, q_pe, c_desc, r_desc, kv, block_tables, seq_lens, o, po, lse,
        scale * math.log2(math.e), H, split, nsplit,
        q_nope.stride(0), q_nope.stride(1), q_pe.stride(0), q_pe.stride(1),
        kv.stride(0), kv.stride(1), block_tables.stride(0), o.stride(0), o.stride(1),
        DC=DC, DR=DR, DC_PAD=dc_pad, DR_PAD=dr_pad, P=P, BH=bh, BN=bn, PAGED=paged, TMA=tma,
        PEEL=bh >= 64, DIRECT=direct, num_warps=cfg["num_warps"], num_stages=stages)
    if not direct:
        _combine[(B * H,)](po, lse, seq_lens, o, H, nsplit, split, o.stride(0), o.stride(1),
                           DC=DC, DC_PAD=dc_pad, SC=16, num_warps=4)
    return o


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, q_nope, q_pe, kv_c_and_k_pe, block_tables, seq_lens):
        cfg = config(q_nope, kv_c_and_k_pe, block_tables)
        return attention(q_nope, q_pe, kv_c_and_k_pe, block_tables, seq_lens, self.scale, cfg)
