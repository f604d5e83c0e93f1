"""
---
id: kernels/mla_decode_attention/split_dispatch
op: mla_decode_attention
category: Fusion
dtypes: [bfloat16]
techniques: [split-kv, flash-decoding, log-sum-exp-combine, paged-kv-cache, online-softmax, gather, tl-dot, per-shape-dispatch, int64-offsets, masking]
params:
  BH: [16, 32, 64]
  BN: [16, 32, 64]
  SPLIT_TOKENS: [0, 256, 512, 1024, 2048]
  WAVES: [1, 2, 4]
  num_warps: [4, 8]
  num_stages: [1, 2, 3]
tuner: attention
summary: Absorbed-MLA decode with heads as MMA rows and a per-shape dispatch table. Grid (head block, sequence, context split) with the head blocks of one split adjacent so they share the gathered latent rows through L2; the split length is a runtime argument, fixed by the table or chosen so that the grid fills WAVES x 132 SMs; fp32 partials merged by an LSE-weighted combine kernel.
---
score[h, t] = (q_nope[h] . c[t] + q_pe[h] . k_pe[t]) * scale; out[h] = softmax(score[h]) @ c, with
the 576-wide cache row [c (512) | k_pe (64)] shared by all H heads and gathered through
block_tables.

Design:
- All heads read the same cache row, so heads are the M dimension of both GEMMs: a program owns
  BH heads of one sequence; per BN gathered tokens it loads c [BN, 512] and k_pe [BN, 64] once,
  computes q_nope c^T + q_pe k_pe^T ([BH, BN]) and P c ([BH, 512]) with V being the c tile
  already on chip (576 is not a power of two: a 512-wide plus a 64-wide dot).
- At H 128 the op is compute-bound (2 * 1088 FLOP per head per token against 1152 bytes per
  token: ~242 FLOP/byte at H 128, past the H200's ~190 ridge), so BH 64 (a full wgmma M) is
  worth its [64, 512] fp32 accumulator (128 registers a thread at 8 warps); at H 16 the op is
  memory-bound and BH 16 keeps one head block per sequence.
- Parallelism: B * cdiv(H, BH) programs (2 at batch 1, H 128, BH 64), so the context is cut into
  splits; SPLIT_TOKENS 0 takes the largest power of two <= 4096 (down to 16) for which the grid
  reaches WAVES * 132 programs; a table entry may fix the split. The split length is a runtime
  argument (no recompile per batch). Splits past a sequence's length return at once.
- Head block is the fastest grid axis: the cdiv(H, BH) programs of one (sequence, split) run
  together and read the same latent rows, the first from DRAM and the others from L2.
- Partials: acc / l and lse = m + log2(l) per (b, h, split); `_combine` weights the cdiv(len,
  split) existing splits by exp2(lse - max) and rounds once to bf16; one split: the main kernel
  stores bf16 itself.
- Tokens gathered through block_tables[b, t // P] with int64 page offsets, masked by index
  (t < seq_lens[b]); scale * log2(e) folded; finite -1e30 running max; P in bf16 for P @ c.
  Latent/rope widths that are not powers of two (small shapes: 80, 48, 40 / 24, 16, 8) are
  padded with masks. num_stages is clamped so the cache-tile stages plus the q tile stay within
  about 200 KB of shared memory.
- Dispatch: DISPATCH maps "DC/H/B/width/P" (width = max_blocks * P) to a config, written by
  scripts/bake_dispatch_attn.py from scripts/gpu_tune_attn.py's winners, empty until a GPU run
  fills it; other shapes take the nearest entry of the same latent width, AKA_PARAMS if none.
"""
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"BH": 64, "BN": 32, "SPLIT_TOKENS": 0, "WAVES": 1, "num_warps": 8, "num_stages": 2}

# dispatch: begin (scripts/bake_dispatch_attn.py rewrites this block)
DISPATCH = {
    '512/16/8/16384/64': {'BH': 16, 'BN': 32, 'SPLIT_TOKENS': 0, 'WAVES': 1, 'num_warps': 4, 'num_stages': 2},  # 64.3 us, ratio 0.32, shape 7, NVIDIA H200 2026-12-03
    '512/16/64/8192/64': {'BH': 16, 'BN': 32, 'SPLIT_TOKENS': 0, 'WAVES': 2, 'num_warps': 4, 'num_stages': 2},  # 154.1 us, ratio 0.49, shape 8, NVIDIA H200 2026-12-03
    '512/16/96/4096/16': {'BH': 16, 'BN': 32, 'SPLIT_TOKENS': 0, 'WAVES': 2, 'num_warps': 4, 'num_stages': 2},  # 117.2 us, ratio 0.48, shape 11, NVIDIA H200 2026-12-03
    '512/16/128/4096/64': {'BH': 16, 'BN': 32, 'SPLIT_TOKENS': 0, 'WAVES': 2, 'num_warps': 4, 'num_stages': 2},  # 158.0 us, ratio 0.48, shape 10, NVIDIA H200 2026-12-03
    '512/16/128/16384/64': {'BH': 16, 'BN': 32, 'SPLIT_TOKENS': 0, 'WAVES': 2, 'num_warps': 4, 'num_stages': 2},  # 554.6 us, ratio 0.54, shape 9, NVIDIA H200 2026-12-03
    '512/32/32/16384/64': {'BH': 64, 'BN': 32, 'SPLIT_TOKENS': 512, 'WAVES': 1, 'num_warps': 8, 'num_stages': 2},  # 272.3 us, ratio 0.28, shape 12, NVIDIA H200 2026-12-03
    '512/64/64/32768/64': {'BH': 64, 'BN': 32, 'SPLIT_TOKENS': 2048, 'WAVES': 1, 'num_warps': 8, 'num_stages': 2},  # 994.4 us, ratio 0.30, shape 13, NVIDIA H200 2026-12-03
    '512/128/1/32768/64': {'BH': 64, 'BN': 32, 'SPLIT_TOKENS': 512, 'WAVES': 1, 'num_warps': 8, 'num_stages': 2},  # 79.0 us, ratio 0.16, shape 0, NVIDIA H200 2026-12-03
    '512/128/4/2048/64': {'BH': 16, 'BN': 32, 'SPLIT_TOKENS': 0, 'WAVES': 1, 'num_warps': 4, 'num_stages': 2},  # 30.0 us, ratio 0.06, shape 1, NVIDIA H200 2026-12-03
    '512/128/16/8192/64': {'BH': 64, 'BN': 32, 'SPLIT_TOKENS': 1024, 'WAVES': 1, 'num_warps': 8, 'num_stages': 2},  # 186.2 us, ratio 0.14, shape 2, NVIDIA H200 2026-12-03
    '512/128/32/32768/64': {'BH': 64, 'BN': 32, 'SPLIT_TOKENS': 1024, 'WAVES': 1, 'num_warps': 8, 'num_stages': 2},  # 976.1 us, ratio 0.21, shape 6, NVIDIA H200 2026-12-03
    '512/128/64/4096/64': {'BH': 64, 'BN': 32, 'SPLIT_TOKENS': 512, 'WAVES': 1, 'num_warps': 8, 'num_stages': 2},  # 301.7 us, ratio 0.17, shape 3, NVIDIA H200 2026-12-03
    '512/128/128/8192/64': {'BH': 64, 'BN': 32, 'SPLIT_TOKENS': 1024, 'WAVES': 1, 'num_warps': 8, 'num_stages': 2},  # 1023.5 us, ratio 0.19, shape 4, NVIDIA H200 2026-12-03
    '512/128/160/4096/64': {'BH': 64, 'BN': 32, 'SPLIT_TOKENS': 1024, 'WAVES': 1, 'num_warps': 8, 'num_stages': 2},  # 693.3 us, ratio 0.18, shape 5, NVIDIA H200 2026-12-03
}
# dispatch: end

SMS = 132
MAX_SPLIT = 4096
MIN_SPLIT = 16
_SMEM_BUDGET = 200 * 1024


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
def _mla_split(qn_ptr, qp_ptr, kv_ptr, bt_ptr, len_ptr, o_ptr, po_ptr, lse_ptr, qk_scale, H, SPLIT, NSPLIT,
               s_qnb, s_qnh, s_qpb, s_qph, s_kvb, s_kvs, s_bt, s_ob, s_oh,
               DC: tl.constexpr, DR: tl.constexpr, DC_PAD: tl.constexpr, DR_PAD: tl.constexpr,
               P: tl.constexpr, BH: tl.constexpr, BN: tl.constexpr, DIRECT: tl.constexpr):
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
    cmask = dc < DC
    rmask = dr < DR
    q_n = tl.load(qn_ptr + b * s_qnb + heads[:, None] * s_qnh + dc[None, :],
                  mask=hmask[:, None] & cmask[None, :], other=0.0)
    q_p = tl.load(qp_ptr + b * s_qpb + heads[:, None] * s_qph + dr[None, :],
                  mask=hmask[:, None] & rmask[None, :], other=0.0)
    m_i = tl.full((BH,), -1e30, dtype=tl.float32)
    l_i = tl.zeros((BH,), dtype=tl.float32)
    acc = tl.zeros((BH, DC_PAD), dtype=tl.float32)
    bt_row = bt_ptr + b.to(tl.int64) * s_bt
    for n0 in range(lo, hi, BN):
        tok = n0 + tl.arange(0, BN)
        tmask = tok < hi
        page = tl.load(bt_row + tok // P, mask=tmask, other=0).to(tl.int64)
        row = kv_ptr + (page * s_kvb + (tok % P).to(tl.int64) * s_kvs)[:, None]
        c = tl.load(row + dc[None, :], mask=tmask[:, None] & cmask[None, :], other=0.0)
        kpe = tl.load(row + DC + dr[None, :], mask=tmask[:, None] & rmask[None, :], other=0.0)
        s = tl.dot(q_n, tl.trans(c)) + tl.dot(q_p, tl.trans(kpe))
        s = tl.where(tmask[None, :], s * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(c.dtype), c)
        m_i = m_new
    out = acc / l_i[:, None]
    if DIRECT:
        tl.store(o_ptr + b * s_ob + heads[:, None] * s_oh + dc[None, :], out.to(o_ptr.dtype.element_ty),
                 mask=hmask[:, None] & cmask[None, :])
    else:
        row_id = (b * H + heads).to(tl.int64) * NSPLIT + sp          # [B, H, NSPLIT]
        tl.store(po_ptr + row_id[:, None] * DC_PAD + dc[None, :], out, mask=hmask[:, None])
        tl.store(lse_ptr + row_id, m_i + tl.log2(l_i), mask=hmask)


@triton.jit(do_not_specialize=["SPLIT", "NSPLIT"])
def _combine(po_ptr, lse_ptr, len_ptr, o_ptr, H, NSPLIT, SPLIT, s_ob, s_oh,
             DC: tl.constexpr, DC_PAD: tl.constexpr, SC: tl.constexpr):
    bh = tl.program_id(0)
    b = bh // H
    h = bh % H
    n_valid = tl.cdiv(tl.load(len_ptr + b), SPLIT)
    base = bh.to(tl.int64) * NSPLIT
    d = tl.arange(0, DC_PAD)
    mx = tl.full((SC,), -1e30, dtype=tl.float32)
    for s0 in range(0, n_valid, SC):                      # pass 1: the largest lse
        s = s0 + tl.arange(0, SC)
        mx = tl.maximum(mx, tl.load(lse_ptr + base + s, mask=s < n_valid, other=-1e30))
    top = tl.max(mx, axis=0)
    acc = tl.zeros((DC_PAD,), dtype=tl.float32)
    wacc = tl.zeros((SC,), dtype=tl.float32)
    for s0 in range(0, n_valid, SC):                      # pass 2: weighted sum
        s = s0 + tl.arange(0, SC)
        sm = s < n_valid
        w = tl.where(sm, tl.exp2(tl.load(lse_ptr + base + s, mask=sm, other=0.0) - top), 0.0)
        po = tl.load(po_ptr + (base + s)[:, None] * DC_PAD + d[None, :], mask=sm[:, None], other=0.0)
        acc += tl.sum(po * w[:, None], axis=0)
        wacc += w
    tl.store(o_ptr + b * s_ob + h * s_oh + d, (acc / tl.sum(wacc, axis=0)).to(o_ptr.dtype.element_ty),
             mask=d < DC)


def shape_key(q_nope, kv_c_and_k_pe, block_tables):
    B, H, DC = q_nope.shape
    P = kv_c_and_k_pe.shape[1]
    return f"{DC}/{H}/{B}/{block_tables.shape[1] * P}/{P}"


def split_tokens(cfg, B, n_hb, width):
    """Tokens per split: the table's fixed value, or the largest power of two <= MAX_SPLIT that
    still gives WAVES * SMS programs."""
    if cfg["SPLIT_TOKENS"]:
        return cfg["SPLIT_TOKENS"]
    split = MAX_SPLIT
    while split > MIN_SPLIT and B * n_hb * triton.cdiv(width, split) < cfg["WAVES"] * SMS:
        split //= 2
    return split


def attention(q_nope, q_pe, kv_c_and_k_pe, block_tables, seq_lens, scale, cfg):
    """Launch with an explicit config (the tuner's entry point; ModelNew picks cfg per shape)."""
    B, H, DC = q_nope.shape
    DR = q_pe.shape[2]
    P = kv_c_and_k_pe.shape[1]
    bh, bn = cfg["BH"], cfg["BN"]
    dc_pad = max(16, triton.next_power_of_2(DC))
    dr_pad = max(16, triton.next_power_of_2(DR))
    n_hb = triton.cdiv(H, bh)
    width = block_tables.shape[1] * P
    split = split_tokens(cfg, B, n_hb, width)
    nsplit = triton.cdiv(width, split)
    direct = nsplit == 1
    el = q_nope.element_size()
    stage = bn * (dc_pad + dr_pad) * el
    stages = max(1, min(cfg["num_stages"], (_SMEM_BUDGET - bh * (dc_pad + dr_pad) * el) // stage))
    o = torch.empty_like(q_nope)
    po = o if direct else torch.empty((B * H * nsplit, dc_pad), dtype=torch.float32, device=o.device)
    lse = o if direct else torch.empty((B * H * nsplit,), dtype=torch.float32, device=o.device)
    _mla_split[(n_hb, B, nsplit)](
        q_nope, q_pe, kv_c_and_k_pe, block_tables, seq_lens, o, po, lse,
        scale * math.log2(math.e), H, split, nsplit,
        q_nope.stride(0), q_nope.stride(1), q_pe.stride(0), q_pe.stride(1),
        kv_c_and_k_pe.stride(0), kv_c_and_k_pe.stride(1), block_tables.stride(0),
        o.stride(0), o.stride(1),
        DC=DC, DR=DR, DC_PAD=dc_pad, DR_PAD=dr_pad, P=P, BH=bh, BN=bn,
        DIRECT=direct, num_warps=cfg["num_warps"], num_stages=stages)
    if not direct:
        _combine[(B * H,)](po, lse, seq_lens, o, H, nsplit, split, o.stride(0), o.stride(1),
                           DC=DC, DC_PAD=dc_pad, SC=16, num_warps=4)
    return o


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, q_nope, q_pe, kv_c_and_k_pe, block_tables, seq_lens):
        cfg = pick(DISPATCH, shape_key(q_nope, kv_c_and_k_pe, block_tables), AKA_PARAMS)
        return attention(q_nope, q_pe, kv_c_and_k_pe, block_tables, seq_lens, self.scale, cfg)
