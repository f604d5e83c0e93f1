"""
---
id: kernels/fp8_kv_decode_attention/f16_mma
op: fp8_kv_decode_attention
category: Fusion
dtypes: [bfloat16, float8_e4m3fn]
techniques: [fp8-kv-cache, scale-folding, split-kv, flash-decoding, log-sum-exp-combine, gqa-grouping, paged-kv-cache, online-softmax, gather, tl-dot, int64-offsets, masking, instruction-count]
params:
  SPLIT_TOKENS: [256, 512, 1024, 2048]
  BN: [16, 32, 64, 128]
  num_warps: [2, 4, 8]
  num_stages: [1, 2, 3]
summary: split_kv_fp8 with its MMAs in fp16 instead of bf16. e4m3 widens to fp16 by one packed convert per two elements (to bf16 it also takes a per-element fp16 -> bf16 convert), and P x v_scale in fp16 keeps 11 mantissa bits, so the second, residual P @ V dot that bf16 needed goes too; queries and P are brought into fp16's range by powers of two. A third fewer instructions per cached token in the offline sm_90a compile; on an H100 it still ran 1.19x slower than v_words (geomean, 12 shapes), as its 187 registers cost it a third of v_words' occupancy, and the stall profile shows the warps waiting on global memory (long_scoreboard) twice as long per instruction.
---
out[b, h] = softmax_j(scale * ks_j * (q . k8_j)) sum_j p_j * vs_j * v8_j over j < seq_lens[b].

Why: the fp8 kernels reach 0.36-0.47 of the measured copy ceiling on the H100 (split_kv_fp8 and
v_words, `aka optimize` 2026-12-06, results/h100/device-2026-12-06d/call3), where the bf16-cache
split kernels of paged_decode_attention reach 0.7-1.0 on the same loop. Half the bytes per token
did not make them faster, because the loop is bound by instruction issue. At 3.35 TB/s an H100 SM
must take about 14.5 bytes a clock; a token of one KV head is 264 bytes (K and V rows of 128 e4m3,
two fp32 scales), so the SM has about 18 clocks a token, 73 warp instructions at four a clock.
`aka kb compile-check --op fp8_kv_decode_attention --shapes 2 --ops 14` (offline sm_90a, triton
3.6, BN 64, 4 warps) counts the loop body per 64-token tile at 1100 instructions a warp for
split_kv_fp8 (69 warp instructions a token) and 1208 for v_words (76). The H200 leaves about 57.
Where split_kv_fp8's go: `k8.to(bf16)` is an e4m3x2 -> f16x2 convert (F2FP) and then an
F2F.BF16.F16 per element (136 F2F and 68 PRMT per tile), and PV_HILO's second dot doubles the P @ V
work and its conversions.

Design:
- fp16 operands. Every e4m3 value is exact in fp16 (and in bf16), so `k8.to(fp16)` and
  `v8.to(fp16)` are the one packed convert. The score dot is q(fp16) . k8(fp16), fp32 accumulate.
  The loop is 737 instructions per tile (46 warp instructions a token; 189 registers, two programs
  per SM, no spill): a third fewer than split_kv_fp8's.
- Queries: bf16 -> fp16 is exact for magnitudes 2^-14 .. 2^15. A query past 2^14 (none in any model's
  attention, but the kernel takes any input) is divided by a power of two, which the score scale
  multiplies back. Below 2^-14 fp16 is subnormal, which loses a query element's low bits where its
  product is under 2^-14 times the row's largest: below the output's bf16 rounding.
- P x v_scale: p <= 1 times v_scale, which is the token's |V| max / 448, so its magnitude depends on
  the cache. Each tile multiplies it by 2^e, with e = -floor(log2(the tile's largest v_scale)), which
  puts the largest product in [1, 4). fp16 keeps 11 mantissa bits there (bf16 8: split_kv_fp8
  needed PV_HILO's residual dot to get under the 5e-3 limit). acc is kept times 2^e. A change of e
  between tiles multiplies acc with alpha, and the end divides it out. Powers of two: exact.
- One P @ V dot, accumulating into acc (`tl.dot(p, v, acc * rescale)`).
- The price of 11-bit P: an output element that cancels to near zero in a row of large values
  carries an error of a few 2^-12 of the row's magnitude. With the bench's inputs that is far under
  the bf16 tolerance (atol 1e-2). With V scales 1000x larger (outputs about 500), one element of 144
  that cancelled to -0.875 came out -0.910, outside atol + rtol, while split_kv_fp8's hi + lo P
  (about 16 bits) matched it. A bf16-cache kernel's 8-bit P is coarser still.
- V in shared memory stays 8-bit and is read with `ld.shared.u8` (64 a tile): Triton 3.6 hoists the
  widening past the dot operand's layout change (kernels/fp8_kv_decode_attention/v_words). v_words
  avoids those loads by widening int16 words with integer ops, which cost more instructions
  (LOP3/PRMT/SHF about 400 a tile) than the byte loads do here.
- Splits, GQA rows, page gather, int64 offsets, masking and the LSE combine: as split_kv_fp8.
- Also tried offline: the fp16 MMAs with v_words' word widening (985 a tile: the widening keeps
  its cost), and a cvt.rn.f16x2.e4m3x2 inline-asm widening of V (771: Triton hoists it past the
  layout change as it does `.to()`, and the interpreter cannot run PTX).

Measured (H100, kb verify 2026-12-06, results/h100/device-2026-12-06e/call2/fp8kv_side_by_side.md):
the instruction count did not predict the time. v_words, with 1.6x f16_mma's loop instructions,
was faster on 11 of 12 shapes, 1.19x in geomean (batch 16 x 32k: 425 vs 527 us), f16_mma
0.28-0.35 of the datasheet roofline against v_words' 0.27-0.42; at batch 1 they tie (73.7 vs
75.2 us). So the loop is not issue-bound the way the count assumed. The stall profile (H100,
`aka eval --ncu-stalls`, bench shape 2, results/h100/device-2026-12-06f/call2/ncu) says why: 187
registers a thread against v_words' 138 leave 13 % occupancy against 20 %, and with fewer warps
to switch between, each issued instruction waits on global memory twice as long (long_scoreboard
4.0 warps stalled per issued instruction against 2.0; issue active 24 % against 46 %; 984.6 vs
794.5 us). Shared memory is not it: short_scoreboard 0.9 against 1.1, no mio_throttle among the
top reasons, so the byte-wide V loads (`LDS.U8`) were the wrong lead. What would make the fewer
instructions pay is the registers under v_words'. Offline (sm_90a, bench shape 2, `aka kb
compile-check --set`): 8 warps give 128 registers, no spill, two CTAs of 8 warps an SM (16 warps
against the default's 8 and v_words' 12) at 471 loop instructions a warp (3768 a tile against
v_words' 4832); BN 32 on 4 warps gives 128 registers (4 B spilled) and four CTAs an SM; BN 32 on 8
warps 102. Not yet timed: the prediction is that 8 warps beat the default and at least tie
v_words at shape 2. split_kv_fp8 has no H100 verdict to set beside them (out of
GPU memory beside three other evaluations that call).

When to use it: not over v_words, on the H100 measurement above. It stays as the measured answer
to "do the bf16 converts and the residual P @ V dot cost the fp8 loop its speed": removing them
did not make it faster.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"SPLIT_TOKENS": 512, "BN": 64, "num_warps": 4, "num_stages": 1}

TARGET_PROGRAMS = 264        # 2 programs per SM on the 132-SM H200
MIN_SPLIT = 16               # one vLLM page


@triton.jit
def _fp8_split(q_ptr, kc_ptr, vc_ptr, ks_ptr, vs_ptr, bt_ptr, len_ptr, o_ptr, po_ptr, lse_ptr, qk_scale,
               s_qb, s_qh, s_kb, s_ks, s_kh, s_vb, s_vs, s_vh, s_kxb, s_kxs, s_kxh, s_vxb, s_vxs, s_vxh, s_bt, s_ob, s_oh, G, NSPLIT,
               P: tl.constexpr, D: tl.constexpr, D_PAD: tl.constexpr, GP: tl.constexpr,
               BN: tl.constexpr, SPLIT_TOKENS: tl.constexpr, DIRECT: tl.constexpr):
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
    q = tl.load(q_ptr + b * s_qb + head[:, None] * s_qh + d[None, :],
                mask=hmask[:, None] & dmask[None, :], other=0.0).to(tl.float32)
    # fp16 holds every bf16 value of magnitude 2^-14 .. 2^15 exactly: queries past 2^14 are brought
    # under it by a power of two (exact), which the score scale gives back
    qmax = tl.max(tl.max(tl.abs(q), axis=1), axis=0)
    qpow = tl.where(qmax > 16384.0, tl.exp2(tl.ceil(tl.log2(qmax / 16384.0))), 1.0)
    q = (q * (1.0 / qpow)).to(tl.float16)
    qk_scale = qk_scale * qpow
    m_i = tl.full((GP,), -1e30, dtype=tl.float32)
    l_i = tl.zeros((GP,), dtype=tl.float32)
    acc = tl.zeros((GP, D_PAD), dtype=tl.float32)
    bt_row = bt_ptr + b.to(tl.int64) * s_bt
    vexp = 0.0   # acc is kept times 2^vexp, the power that put the last tile's P x v_scale in [1, 4)
    for n0 in range(lo, hi, BN):
        tok = n0 + tl.arange(0, BN)
        tmask = tok < hi
        page = tl.load(bt_row + tok // P, mask=tmask, other=0).to(tl.int64)
        slot = (tok % P).to(tl.int64)
        k8 = tl.load(kc_ptr + (page * s_kb + slot * s_ks + g * s_kh)[:, None] + d[None, :],
                     mask=tmask[:, None] & dmask[None, :], other=0.0)
        ksc = tl.load(ks_ptr + page * s_kxb + slot * s_kxs + g * s_kxh, mask=tmask, other=0.0)
        s = tl.dot(q, tl.trans(k8.to(tl.float16))) * (ksc * qk_scale)[None, :]
        s = tl.where(tmask[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v8 = tl.load(vc_ptr + (page * s_vb + slot * s_vs + g * s_vh)[:, None] + d[None, :],
                     mask=tmask[:, None] & dmask[None, :], other=0.0)
        vsc = tl.load(vs_ptr + page * s_vxb + slot * s_vxs + g * s_vxh, mask=tmask, other=0.0)
        # P x v_scale times 2^e, e putting the tile's largest v_scale in [1, 4): fp16's normal range
        # whatever the cache's scales; the change of power joins alpha's rescale of acc, and the dot
        # accumulates into acc
        vexp_new = -tl.floor(tl.log2(tl.maximum(tl.max(vsc, axis=0), 1e-30)))
        pv = (p * (vsc * tl.exp2(vexp_new))[None, :]).to(tl.float16)
        acc = tl.dot(pv, v8.to(tl.float16), acc * (alpha * tl.exp2(vexp_new - vexp))[:, None])
        vexp = vexp_new
        m_i = m_new
    out = acc / (l_i * tl.exp2(vexp))[:, None]
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
        o = torch.empty_like(q)
        direct = nsplit == 1
        po = o if direct else torch.empty((B * HQ * nsplit, d_pad), dtype=torch.float32, device=q.device)
        lse = o if direct else torch.empty((B * HQ * nsplit,), dtype=torch.float32, device=q.device)
        _fp8_split[(HK, B, nsplit)](
            q, key_cache, value_cache, k_scale, v_scale, block_tables, seq_lens, o, po, lse,
            self.scale * 1.4426950408889634,
            q.stride(0), q.stride(1), key_cache.stride(0), key_cache.stride(1), key_cache.stride(2),
            value_cache.stride(0), value_cache.stride(1), value_cache.stride(2),
            k_scale.stride(0), k_scale.stride(1), k_scale.stride(2),
            v_scale.stride(0), v_scale.stride(1), v_scale.stride(2), block_tables.stride(0),
            o.stride(0), o.stride(1), G, nsplit,
            P=P, D=D, D_PAD=d_pad, GP=max(16, triton.next_power_of_2(G)), BN=p["BN"],
            SPLIT_TOKENS=split, DIRECT=direct, num_warps=p["num_warps"], num_stages=p["num_stages"])
        if not direct:
            sc = 16
            _combine[(B * HQ,)](po, lse, seq_lens, o, HQ, nsplit, o.stride(0), o.stride(1),
                                D=D, D_PAD=d_pad, SP_PAD=max(sc, triton.next_power_of_2(nsplit)), SC=sc,
                                SPLIT_TOKENS=split, num_warps=4)
        return o
