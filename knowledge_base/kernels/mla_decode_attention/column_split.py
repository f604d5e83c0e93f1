"""
---
id: kernels/mla_decode_attention/column_split
op: mla_decode_attention
category: Fusion
dtypes: [bfloat16]
techniques: [output-column-split, occupancy, split-kv, flash-decoding, log-sum-exp-combine, paged-kv-cache, online-softmax, gather, tl-dot, chained-dot-accumulator, int64-offsets, masking]
params:
  BH: [16, 32, 64, 128]
  BN: [16, 32, 64]
  NS: [1, 2]
  SPLIT_TOKENS: [0, 256, 512, 1024, 2048]
  WAVES: [1, 2, 4]
  num_warps: [4, 8]
  num_stages: [1, 2, 3]
summary: Absorbed-MLA decode for 128 heads with the 512 latent output columns split over NS programs (acc [BH, 512 / NS]), so a 64-head program fits one warpgroup and two CTAs share an SM. Each program recomputes the full 576-wide score from its own column half and the other half of the same gathered rows (chained dots), runs the online softmax, and accumulates P @ c for its half only; grid (head block x column part, sequence, context split), fp32 partials with a per-part LSE merged by a combine kernel.
---
score[h, t] = (q_nope[h] . c[t] + q_pe[h] . k_pe[t]) * scale; out[h] = softmax(score[h]) @ c, with
the 576-wide cache row [c (512) | k_pe (64)] shared by all H heads and gathered through
block_tables.

Why (knowledge_base/ops/mla_decode_attention.md, "What you see"): split_dispatch's tuned 128-head
config (64 heads, 32 tokens, 8 warps) compiles for sm_90a to 236 registers a thread and 147 KB of
shared memory, one CTA per SM, and each tile's QK wgmma -> softmax -> PV wgmma chain waits on the
one before. Its TTGIR shows more: Triton gives a dot whose result feeds another dot all warps on
M (score layout warpsPerCTA [8, 1]), and 64 heads are one warpgroup's M, so both warpgroups
compute the same [64, 32] score tile (72 QK wgmma each per tile) while only the PV dot ([4, 2])
is split by columns. It already executes 2 x 1152 + 1024 = 3328 tensor FLOPs per head and token,
1.53x the 2176 needed, and a full-width 64-head program cannot fit 4 warps (the [64, 512] fp32
accumulator is 256 registers a thread there: 2.7 KB of spills).

Design:
- NS = 2 column parts over programs: program (head block, part) owns output columns [part * 256,
  part * 256 + 256); its accumulator is [BH, 256], 128 registers a thread at BH 64 on 4 warps
  (one warpgroup: score and PV layouts [4, 1], no duplicated dot). Per tile of gathered tokens
  it loads its own half c_own, the other half c_oth and k_pe (together the whole row, no byte
  loaded twice, no tensor slicing) and chains s = q_own c_own^T + q_pe k_pe^T + q_oth c_oth^T
  on one accumulator; P @ c_own is the PV dot.
- FLOP cost: both parts compute the full QK (2 x 576 per head and token), PV (2 x 512) is shared
  out: 2 x (1152 + 512) = 3328 FLOPs per head and token, 1.53x the useful 2176, the same tensor
  work split_dispatch's 8-warp config executes (above); what changes is that the two halves are
  independent CTAs of 4 warps that share an SM, so one CTA's wgmma runs under the other's
  softmax, gather waits and barriers, where split_dispatch's two warpgroups step together. The
  price: the q tile is held twice per SM and twice as many programs read each latent row from
  L2; DRAM bytes are unchanged when the parts run together. One part (no recompute) spills at
  64 heads on 4 warps and is the fallback for 32 heads or fewer per program.
- Two CTAs per SM (228 KB shared, 64K registers per SM on H100/H200): shared memory is the q
  tile ([BH, 576] bf16, 72 KB at BH 64, hoisted out of the loop) plus num_stages x [BN, 576]
  bf16 (18 KB a stage at BN 16, 36 KB at BN 32), so BH 64 takes BN 16 x 2 stages (108 KB, 207
  registers) or BN 32 x 1 stage (104 KB, 244 registers, no cp.async). 8 warps on BH 64 would
  duplicate the score dot again; BH 128 on 8 warps gives each warpgroup its own 64 heads
  (no duplication, each latent row read by 2 programs) in one CTA of 180 KB.
- Parallelism and splits as split_dispatch: SPLIT_TOKENS 0 takes the largest power of two <= 4096
  (down to 16) for which B x cdiv(H, BH) x NS x splits reaches WAVES x 132 programs (WAVES 2 is
  one round of two CTAs per SM); a fixed value is used as is (runtime argument: no recompile
  per batch). Splits past a sequence's length return at once. Head block x part is the fastest
  grid axis, so the programs reading one (sequence, split)'s latent rows run together (the first
  from DRAM, the rest from L2).
- Partials: acc / l per (b, h, split) in a [B * H * splits, DC_PAD] fp32 buffer (each part writes
  its columns) and lse = m + log2(l) per (b, h, part, split): the two parts sum the score in a
  different order, so each part is merged with its own lse. `_combine` runs one program per
  (b, h, part); with one split the main kernel stores bf16 itself.
- Tokens gathered through block_tables[b, t // P] with int64 page offsets, masked by index
  (t < seq_lens[b]); scale * log2(e) folded; finite -1e30 running max; P in the cache dtype for
  P @ c. Latent / rope widths that are not powers of two (small shapes: 80, 48, 40 / 24, 16, 8)
  are padded with masks (padded latent width >= 32, so a part is >= 16 wide). num_stages is
  clamped so the stages plus the q tile stay within about 200 KB of shared memory.
- CPU: tests run bf16 through aka.evaluate.interp_fix, which widens bf16 dot operands to fp32
  (the bare Triton 3.6.0 interpreter's bf16 tl.dot is wrong), as for the other MLA kernels.
"""
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"BH": 64, "BN": 16, "NS": 2, "SPLIT_TOKENS": 0, "WAVES": 2, "num_warps": 4, "num_stages": 2}

SMS = 132
MAX_SPLIT = 4096
MIN_SPLIT = 16
_SMEM_BUDGET = 200 * 1024


@triton.jit(do_not_specialize=["SPLIT", "NSPLIT"])
def _mla_cols(qn_ptr, qp_ptr, kv_ptr, bt_ptr, len_ptr, o_ptr, po_ptr, lse_ptr, qk_scale, H, SPLIT, NSPLIT,
              s_qnb, s_qnh, s_qpb, s_qph, s_kvb, s_kvs, s_bt, s_ob, s_oh,
              DC: tl.constexpr, DR: tl.constexpr, DCS: tl.constexpr, DR_PAD: tl.constexpr,
              P: tl.constexpr, BH: tl.constexpr, BN: tl.constexpr, NS: tl.constexpr,
              DIRECT: tl.constexpr):
    pid = tl.program_id(0)
    hb = pid // NS
    part = pid % NS
    b = tl.program_id(1)
    sp = tl.program_id(2)
    L = tl.load(len_ptr + b)
    lo = sp * SPLIT
    if lo >= L:
        return
    hi = tl.minimum(lo + SPLIT, L)
    heads = hb * BH + tl.arange(0, BH)
    hmask = heads < H
    own = part * DCS + tl.arange(0, DCS)                 # this program's output columns
    omask = own < DC
    dr = tl.arange(0, DR_PAD)
    rmask = dr < DR
    qn_rows = qn_ptr + b * s_qnb + heads[:, None] * s_qnh
    q_own = tl.load(qn_rows + own[None, :], mask=hmask[:, None] & omask[None, :], other=0.0)
    q_p = tl.load(qp_ptr + b * s_qpb + heads[:, None] * s_qph + dr[None, :],
                  mask=hmask[:, None] & rmask[None, :], other=0.0)
    if NS == 2:
        oth = (1 - part) * DCS + tl.arange(0, DCS)       # the other half: needed for the score only
        xmask = oth < DC
        q_oth = tl.load(qn_rows + oth[None, :], mask=hmask[:, None] & xmask[None, :], other=0.0)
    m_i = tl.full((BH,), -1e30, dtype=tl.float32)
    l_i = tl.zeros((BH,), dtype=tl.float32)
    acc = tl.zeros((BH, DCS), dtype=tl.float32)
    bt_row = bt_ptr + b.to(tl.int64) * s_bt
    for n0 in range(lo, hi, BN):
        tok = n0 + tl.arange(0, BN)
        tmask = tok < hi
        page = tl.load(bt_row + tok // P, mask=tmask, other=0).to(tl.int64)
        row = kv_ptr + (page * s_kvb + (tok % P).to(tl.int64) * s_kvs)[:, None]
        c = tl.load(row + own[None, :], mask=tmask[:, None] & omask[None, :], other=0.0)
        kpe = tl.load(row + DC + dr[None, :], mask=tmask[:, None] & rmask[None, :], other=0.0)
        s = tl.dot(q_own, tl.trans(c))
        s = tl.dot(q_p, tl.trans(kpe), s)
        if NS == 2:
            cx = tl.load(row + oth[None, :], mask=tmask[:, None] & xmask[None, :], other=0.0)
            s = tl.dot(q_oth, tl.trans(cx), s)
        s = tl.where(tmask[None, :], s * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = tl.dot(p.to(c.dtype), c, acc * alpha[:, None])
        m_i = m_new
    out = acc / l_i[:, None]
    if DIRECT:
        tl.store(o_ptr + b * s_ob + heads[:, None] * s_oh + own[None, :], out.to(o_ptr.dtype.element_ty),
                 mask=hmask[:, None] & omask[None, :])
    else:
        row_id = (b * H + heads).to(tl.int64) * NSPLIT + sp                   # [B, H, NSPLIT]
        tl.store(po_ptr + row_id[:, None] * (NS * DCS) + own[None, :], out, mask=hmask[:, None])
        lse_id = ((b * H + heads).to(tl.int64) * NS + part) * NSPLIT + sp     # [B, H, NS, NSPLIT]
        tl.store(lse_ptr + lse_id, m_i + tl.log2(l_i), mask=hmask)


@triton.jit(do_not_specialize=["SPLIT", "NSPLIT"])
def _combine(po_ptr, lse_ptr, len_ptr, o_ptr, H, NSPLIT, SPLIT, s_ob, s_oh,
             DC: tl.constexpr, DCS: tl.constexpr, NS: tl.constexpr, SC: tl.constexpr):
    pid = tl.program_id(0)                                 # (b, h, part)
    part = pid % NS
    bh = pid // NS
    b = bh // H
    h = bh % H
    n_valid = tl.cdiv(tl.load(len_ptr + b), SPLIT)
    lbase = pid.to(tl.int64) * NSPLIT
    pbase = bh.to(tl.int64) * NSPLIT
    d = part * DCS + tl.arange(0, DCS)
    mx = tl.full((SC,), -1e30, dtype=tl.float32)
    for s0 in range(0, n_valid, SC):                       # pass 1: the largest lse
        s = s0 + tl.arange(0, SC)
        mx = tl.maximum(mx, tl.load(lse_ptr + lbase + s, mask=s < n_valid, other=-1e30))
    top = tl.max(mx, axis=0)
    acc = tl.zeros((DCS,), dtype=tl.float32)
    wacc = tl.zeros((SC,), dtype=tl.float32)
    for s0 in range(0, n_valid, SC):                       # pass 2: weighted sum
        s = s0 + tl.arange(0, SC)
        sm = s < n_valid
        w = tl.where(sm, tl.exp2(tl.load(lse_ptr + lbase + s, mask=sm, other=0.0) - top), 0.0)
        po = tl.load(po_ptr + (pbase + s)[:, None] * (NS * DCS) + d[None, :], mask=sm[:, None], other=0.0)
        acc += tl.sum(po * w[:, None], axis=0)
        wacc += w
    tl.store(o_ptr + b * s_ob + h * s_oh + d, (acc / tl.sum(wacc, axis=0)).to(o_ptr.dtype.element_ty),
             mask=d < DC)


def shape_key(q_nope, kv_c_and_k_pe, block_tables):
    B, H, DC = q_nope.shape
    P = kv_c_and_k_pe.shape[1]
    return f"{DC}/{H}/{B}/{block_tables.shape[1] * P}/{P}"


def split_tokens(cfg, programs, width):
    """Tokens per split: the config's fixed value, or the largest power of two <= MAX_SPLIT that
    still gives WAVES * SMS programs (`programs`: head blocks x parts x sequences)."""
    if cfg["SPLIT_TOKENS"]:
        return cfg["SPLIT_TOKENS"]
    split = MAX_SPLIT
    while split > MIN_SPLIT and programs * triton.cdiv(width, split) < cfg["WAVES"] * SMS:
        split //= 2
    return split


def attention(q_nope, q_pe, kv_c_and_k_pe, block_tables, seq_lens, scale, cfg):
    """Launch with an explicit config (the tuner's entry point; ModelNew passes AKA_PARAMS)."""
    B, H, DC = q_nope.shape
    DR = q_pe.shape[2]
    P = kv_c_and_k_pe.shape[1]
    bh, bn, ns = cfg["BH"], cfg["BN"], cfg["NS"]
    if ns not in (1, 2):
        raise ValueError(f"NS must be 1 or 2, got {ns}")
    dc_pad = max(32, triton.next_power_of_2(DC))
    dr_pad = max(16, triton.next_power_of_2(DR))
    dcs = dc_pad // ns
    n_hb = triton.cdiv(H, bh)
    width = block_tables.shape[1] * P
    split = split_tokens(cfg, B * n_hb * ns, width)
    nsplit = triton.cdiv(width, split)
    direct = nsplit == 1
    el = q_nope.element_size()
    stage = bn * (dc_pad + dr_pad) * el
    stages = max(1, min(cfg["num_stages"], (_SMEM_BUDGET - bh * (dc_pad + dr_pad) * el) // stage))
    o = torch.empty_like(q_nope)
    po = o if direct else torch.empty((B * H * nsplit, dc_pad), dtype=torch.float32, device=o.device)
    lse = o if direct else torch.empty((B * H * ns * nsplit,), dtype=torch.float32, device=o.device)
    _mla_cols[(n_hb * ns, B, nsplit)](
        q_nope, q_pe, kv_c_and_k_pe, block_tables, seq_lens, o, po, lse,
        scale * math.log2(math.e), H, split, nsplit,
        q_nope.stride(0), q_nope.stride(1), q_pe.stride(0), q_pe.stride(1),
        kv_c_and_k_pe.stride(0), kv_c_and_k_pe.stride(1), block_tables.stride(0),
        o.stride(0), o.stride(1),
        DC=DC, DR=DR, DCS=dcs, DR_PAD=dr_pad, P=P, BH=bh, BN=bn, NS=ns,
        DIRECT=direct, num_warps=cfg["num_warps"], num_stages=stages)
    if not direct:
        _combine[(B * H * ns,)](po, lse, seq_lens, o, H, nsplit, split, o.stride(0), o.stride(1),
                                DC=DC, DCS=dcs, NS=ns, SC=16, num_warps=4)
    return o


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, q_nope, q_pe, kv_c_and_k_pe, block_tables, seq_lens):
        return attention(q_nope, q_pe, kv_c_and_k_pe, block_tables, seq_lens, self.scale, AKA_PARAMS)
