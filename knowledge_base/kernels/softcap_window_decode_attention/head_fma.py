"""
---
id: kernels/softcap_window_decode_attention/head_fma
op: softcap_window_decode_attention
category: Fusion
dtypes: [bfloat16]
techniques: [sliding-window, logit-softcap, paged-kv-cache, online-softmax, gather, cuda-core-dot, head-per-program, one-pass-reduction, exp2-with-log2e, fp32-accumulation, int64-offsets, masking]
params:
  BN: [16, 32, 64]
  num_warps: [2, 4, 8]
summary: One program per (sequence, query head) walks only the window [max(0, L - window), L) in BN-token pages-gathered tiles; scores are q . k as an fp32 multiply-and-sum on CUDA cores (no MMA, no padding of the GQA group to 16 rows), soft-capped with tanh via exp2, base-2 online softmax, P @ V as a weighted row sum; bf16 output in one launch.
---
What it does: Gemma-2/3 decode attention for one query token: for query head h (KV head
h // G) and the window's keys j, s_j = softcap * tanh(scale * q . k_j / softcap) (plain
scale * q . k_j when softcap <= 0), out = softmax(s) @ V. The program gathers a [BN, D] K tile
through the block table, computes the BN scores as sum(k * q, axis=1) in fp32, applies the cap
(tanh(x) = 1 - 2 / (exp(2x) + 1), overflow-safe), keeps the running max, sum and [D] accumulator
of an online softmax in base 2, and adds sum_j p_j v_j from the matching V tile. Tokens before
the window are never loaded; positions past L are masked.

When to use it: `split_window` puts the GQA group (G = 2 query heads
per KV head on Gemma-2/3) in an MMA tile padded to 16 rows, so 14 of 16 rows are idle, and it
splits the window over programs with a combine launch. This kernel does no MMA work on padding
and needs no partials or combine, but reads each K/V tile once per query head (G times per KV
head; the L2 serves the repeats) and runs one program per (sequence, query head): at batch 1
with 8-16 heads it fills only 8-16 SMs, where `split_window` should win clearly. It is the
candidate for large batches (64-128 x 8-16 heads = 512-2048 programs) with short windows. CPU
interpreter timing is meaningless; pick by `aka kb verify --device cuda`.

Parameters: BN: tokens per K/V tile; num_warps as launched.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"BN": 32, "num_warps": 4}


@triton.jit
def _softcap_head_fma(q_ptr, kc_ptr, vc_ptr, bt_ptr, len_ptr, o_ptr, scale, softcap, window, G,
                      s_qb, s_qh, s_kb, s_ks, s_kh, s_vb, s_vs, s_vh, s_bt, s_ob, s_oh,
                      P: tl.constexpr, D: tl.constexpr, D_PAD: tl.constexpr, BN: tl.constexpr, CAP: tl.constexpr):
    b = tl.program_id(0)
    h = tl.program_id(1)
    hk = h // G
    L = tl.load(len_ptr + b)
    lo = tl.maximum(L - window, 0)
    d = tl.arange(0, D_PAD)
    dmask = d < D
    q = tl.load(q_ptr + b * s_qb + h * s_qh + d, mask=dmask, other=0.0).to(tl.float32)
    m_i = -1e30
    l_i = 0.0
    acc = tl.zeros((D_PAD,), dtype=tl.float32)
    bt_row = bt_ptr + b.to(tl.int64) * s_bt
    for n0 in range(lo, L, BN):
        tok = n0 + tl.arange(0, BN)
        tmask = tok < L
        page = tl.load(bt_row + tok // P, mask=tmask, other=0).to(tl.int64)
        slot = (tok % P).to(tl.int64)
        lmask = tmask[:, None] & dmask[None, :]
        k = tl.load(kc_ptr + (page * s_kb + slot * s_ks + hk * s_kh)[:, None] + d[None, :], mask=lmask,
                    other=0.0).to(tl.float32)
        s = tl.sum(k * q[None, :], axis=1) * scale
        if CAP:
            s = softcap * (1.0 - 2.0 / (tl.exp2(s * (2.8853900817779268 / softcap)) + 1.0))
        s = tl.where(tmask, s * 1.4426950408889634, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=0))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=0)
        v = tl.load(vc_ptr + (page * s_vb + slot * s_vs + hk * s_vh)[:, None] + d[None, :], mask=lmask,
                    other=0.0).to(tl.float32)
        acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
        m_i = m_new
    tl.store(o_ptr + b * s_ob + h * s_oh + d, (acc / l_i).to(o_ptr.dtype.element_ty), mask=dmask)


class ModelNew(nn.Module):
    def __init__(self, scale, softcap, window):
        super().__init__()
        self.scale = scale
        self.softcap = softcap
        self.window = window

    def forward(self, q, key_cache, value_cache, block_tables, seq_lens):
        B, HQ, D = q.shape
        _, P, HK, _ = key_cache.shape
        o = torch.empty_like(q)
        cap = self.softcap > 0
        _softcap_head_fma[(B, HQ)](
            q, key_cache, value_cache, block_tables, seq_lens, o, self.scale, self.softcap if cap else 1.0,
            self.window, HQ // HK, q.stride(0), q.stride(1), key_cache.stride(0), key_cache.stride(1),
            key_cache.stride(2), value_cache.stride(0), value_cache.stride(1), value_cache.stride(2),
            block_tables.stride(0), o.stride(0), o.stride(1),
            P=P, D=D, D_PAD=triton.next_power_of_2(D), BN=AKA_PARAMS["BN"], CAP=cap,
            num_warps=AKA_PARAMS["num_warps"])
        return o
