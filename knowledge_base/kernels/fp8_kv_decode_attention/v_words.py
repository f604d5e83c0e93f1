"""
---
id: kernels/fp8_kv_decode_attention/v_words
op: fp8_kv_decode_attention
category: Fusion
dtypes: [bfloat16, float8_e4m3fn]
techniques: [fp8-kv-cache, scale-folding, dequant-in-registers, split-kv, flash-decoding, log-sum-exp-combine, gqa-grouping, paged-kv-cache, online-softmax, gather, tl-dot, split-join, int64-offsets, masking]
params:
  SPLIT_TOKENS: [256, 512, 1024, 2048]
  BN: [16, 32, 64]
  num_warps: [4, 8]
  num_stages: [1, 2, 3]
  PV_HILO: [0, 1]
summary: split_kv_fp8 with the V tile widened to bf16 in registers before it reaches the MMA. V is read as int16 words (two e4m3 bytes each), each byte's magnitude bits shifted into an fp16 (the value times 2^-8, exactly), scaled per token, rounded to bf16 and joined back into [BN, D]; Triton then stages bf16 V in shared memory and feeds P @ V with ldmatrix.trans, instead of keeping fp8 there and reading it one byte at a time.
---
Why: split_kv_fp8 reaches only 0.24-0.30 of the datasheet roofline on every H200 shape
(results/kb/kernels/fp8_kv_decode_attention/split_kv_fp8.results.json) while the bf16-cache split_kv
of paged_decode_attention, the same loop, reaches about 0.7. Offline sm_90a TTGIR of split_kv_fp8
(shape 0, BN 64, 4 warps) shows why: for `tl.dot(p, v8.to(bf16))` Triton 3.6 keeps the 8-bit V in
shared memory and converts after the dot-operand load (it hoists widening casts past the layout
change to save shared memory), and an 8-bit B operand whose reduction axis is not contiguous
cannot use ldmatrix.trans, so each thread reads V with 64 `ld.shared.b8` per tile. Widening V with
`.to()` or a scale multiply does not help: the compiler moves those past the shared-memory load
too (tried offline: still 64 `ld.shared.b8`). Widening from int16 words with a tl.join does: the
PTX has no `ld.shared.b8`, V reaches the MMA through `ldmatrix...trans.shared.b16`, 168 registers
at num_stages 1.

Design:
- K as in split_kv_fp8: k8.to(bf16) is exact, the per-token k scale multiplies the score columns
  after the dot (q . (ks k8) = ks (q . k8)); the B operand is K's rows, whose reduction axis (D)
  is contiguous, so 8-bit K in shared memory is read with vector loads.
- V: the cache is passed as an int16 view ([.., D / 2], element 2i in the low byte). For a byte
  s eeee mmm, the fp16 with bits s 0eeee mmm0000000 is exactly its e4m3 value times 2^-8 (both
  formats' subnormals line up: 0.mmm x 2^-14 and 0.mmm x 2^-6), so
  value = fp16(bits) x 256 x v_scale, then one bf16 rounding of the dequantised value (as the
  bf16-cache kernels store it). tl.join(lo, hi) and a reshape restore the [BN, D] order.
- P @ V: P rounded to bf16, and with PV_HILO a second dot with P's bf16 residual (P at ~16 bits,
  as split_kv_fp8 does for P x v_scale).
- Splits, GQA rows, page gather, LSE combine: as split_kv_fp8 (SPLIT_TOKENS halved while
  B x Hkv x splits < 264).
- head_dim must be even (the int16 view); every model's is.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"SPLIT_TOKENS": 512, "BN": 64, "num_warps": 4, "num_stages": 1, "PV_HILO": 1}

TARGET_PROGRAMS = 264        # 2 programs per SM on the 132-SM H200
MIN_SPLIT = 16               # one vLLM page


@triton.jit
def _widen_e4m3_words(w, BN: tl.constexpr, D_PAD: tl.constexpr):
    """[BN, D_PAD / 2] int16 words of two e4m3 bytes (element 2i low) -> [BN, D_PAD] bf16 equal to
    the bytes' values times 2^-8, exactly: a byte's sign goes to fp16 bit 15 and its 7 magnitude
    bits to bits 7-13 (fp16 and e4m3 subnormals line up), and bf16 holds every such fp16."""
    lo = (((w & 0x80) << 8) | ((w & 0x7F) << 7)).to(tl.float16, bitcast=True)
    hi = ((w & -32768) | ((w >> 1) & 0x3F80)).to(tl.float16, bitcast=True)
    return tl.reshape(tl.join(lo.to(tl.bfloat16), hi.to(tl.bfloat16)), [BN, D_PAD])


@triton.jit
def _fp8_split(q_ptr, kc_ptr, vc_ptr, ks_ptr, vs_ptr, bt_ptr, len_ptr, o_ptr, po_ptr, lse_ptr, qk_scale,
               s_qb, s_qh, s_kb, s_ks, s_kh, s_vb, s_vs, s_vh, s_kxb, s_kxs, s_kxh, s_vxb, s_vxs, s_vxh, s_bt, s_ob, s_oh, G, NSPLIT,
               P: tl.constexpr, D: tl.constexpr, D_PAD: tl.constexpr, GP: tl.constexpr,
               BN: tl.constexpr, SPLIT_TOKENS: tl.constexpr, PV_HILO: tl.constexpr, DIRECT: tl.constexpr):
    g = tl.program_id(0)
    b = tl.program_id(1)
    sp = tl.program_id(2)
    L = tl.load(len_ptr + b)
    lo = sp * SPLIT_TOKENS
    if lo >= L:
        return
    hi = tl.minimum(lo + SPLIT_TOKENS, L)
    r = tl.arange(0, GP)
    head = g * G + r
    hmask = r < G
    d = tl.arange(0, D_PAD)
    dmask = d < D
    d2 = tl.arange(0, D_PAD // 2)
    d2mask = d2 < D // 2
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
        k8 = tl.load(kc_ptr + (page * s_kb + slot * s_ks + g * s_kh)[:, None] + d[None, :],
                     mask=tmask[:, None] & dmask[None, :], other=0.0)
        ksc = tl.load(ks_ptr + page * s_kxb + slot * s_kxs + g * s_kxh, mask=tmask, other=0.0)
        s = tl.dot(q, tl.trans(k8.to(tl.bfloat16))) * (ksc * qk_scale)[None, :]
        s = tl.where(tmask[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        # V as int16 words (strides in words): two e4m3 bytes each, widened apart in registers
        v16 = tl.load(vc_ptr + (page * s_vb + slot * s_vs + g * s_vh)[:, None] + d2[None, :],
                      mask=tmask[:, None] & d2mask[None, :], other=0)
        vsc = tl.load(vs_ptr + page * s_vxb + slot * s_vxs + g * s_vxh, mask=tmask, other=0.0)
        vb = _widen_e4m3_words(v16, BN, D_PAD)
        pv = p * (vsc * 256.0)[None, :]               # the v scale, and the 2^8 the widening took out
        pv_hi = pv.to(tl.bfloat16)
        acc = acc * alpha[:, None] + tl.dot(pv_hi, vb)
        if PV_HILO:
            acc += tl.dot((pv - pv_hi.to(tl.float32)).to(tl.bfloat16), vb)
        m_i = m_new
    out = acc / l_i[:, None]
    if DIRECT:
        tl.store(o_ptr + b * s_ob + head[:, None] * s_oh + d[None, :], out.to(o_ptr.dtype.element_ty),
                 mask=hmask[:, None] & dmask[None, :])
    else:
        row = (b * (G * tl.num_programs(0)) + head).to(tl.int64) * NSPLIT + sp    # [B, Hq, NSPLIT]
        tl.store(po_ptr + row[:, None] * D_PAD + d[None, :], out, mask=hmask[:, None])
        tl.store(lse_ptr + row, m_i + tl.log2(l_i), mask=hmask)


@triton.jit
def _combine(po_ptr, lse_ptr, len_ptr, o_ptr, HQ, NSPLIT, s_ob, s_oh,
             D: tl.constexpr, D_PAD: tl.constexpr, SP_PAD: tl.constexpr, SC: tl.constexpr,
             SPLIT_TOKENS: tl.constexpr):
    bh = tl.program_id(0)
    b = bh // HQ
    h = bh % HQ
    n_valid = tl.cdiv(tl.load(len_ptr + b), SPLIT_TOKENS)
    base = bh.to(tl.int64) * NSPLIT
    s_all = tl.arange(0, SP_PAD)
    mx = tl.max(tl.load(lse_ptr + base + s_all, mask=s_all < n_valid, other=float("-inf")), axis=0)
    d = tl.arange(0, D_PAD)
    acc = tl.zeros((D_PAD,), dtype=tl.float32)
    wacc = tl.zeros((SC,), dtype=tl.float32)
    for s0 in range(0, n_valid, SC):
        s = s0 + tl.arange(0, SC)
        sm = s < n_valid
        w = tl.exp2(tl.load(lse_ptr + base + s, mask=sm, other=float("-inf")) - mx)
        po = tl.load(po_ptr + (base + s)[:, None] * D_PAD + d[None, :], mask=sm[:, None], other=0.0)
        acc += tl.sum(po * w[:, None], axis=0)
        wacc += w
    tl.store(o_ptr + b * s_ob + h * s_oh + d, (acc / tl.sum(wacc, axis=0)).to(o_ptr.dtype.element_ty), mask=d < D)


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, q, key_cache, value_cache, k_scale, v_scale, block_tables, seq_lens):
        B, HQ, D = q.shape
        _, P, HK, _ = key_cache.shape
        G = HQ // HK
        p = AKA_PARAMS
        max_ctx = block_tables.shape[1] * P
        split = p["SPLIT_TOKENS"]
        while split > MIN_SPLIT and B * HK * triton.cdiv(max_ctx, split) < TARGET_PROGRAMS:
            split //= 2
        nsplit = triton.cdiv(max_ctx, split)
        d_pad = max(16, triton.next_power_of_2(D))
        if D % 2 or value_cache.stride(3) != 1:
            raise ValueError("v_words reads V as int16 pairs: head_dim must be even and D contiguous")
        v16 = value_cache.view(torch.int16)          # [num_blocks, P, Hkv, D / 2], strides in words
        o = torch.empty_like(q)
        direct = nsplit == 1
        po = o if direct else torch.empty((B * HQ * nsplit, d_pad), dtype=torch.float32, device=q.device)
        lse = o if direct else torch.empty((B * HQ * nsplit,), dtype=torch.float32, device=q.device)
        _fp8_split[(HK, B, nsplit)](
            q, key_cache, v16, k_scale, v_scale, block_tables, seq_lens, o, po, lse,
            self.scale * 1.4426950408889634,
            q.stride(0), q.stride(1), key_cache.stride(0), key_cache.stride(1), key_cache.stride(2),
            v16.stride(0), v16.stride(1), v16.stride(2),
            k_scale.stride(0), k_scale.stride(1), k_scale.stride(2),
            v_scale.stride(0), v_scale.stride(1), v_scale.stride(2), block_tables.stride(0),
            o.stride(0), o.stride(1), G, nsplit,
            P=P, D=D, D_PAD=d_pad, GP=max(16, triton.next_power_of_2(G)), BN=p["BN"],
            SPLIT_TOKENS=split, PV_HILO=bool(p["PV_HILO"]), DIRECT=direct, num_warps=p["num_warps"], num_stages=p["num_stages"])
        if not direct:
            sc = 16
            _combine[(B * HQ,)](po, lse, seq_lens, o, HQ, nsplit, o.stride(0), o.stride(1),
                                D=D, D_PAD=d_pad, SP_PAD=max(sc, triton.next_power_of_2(nsplit)), SC=sc,
                                SPLIT_TOKENS=split, num_warps=4)
        return o
