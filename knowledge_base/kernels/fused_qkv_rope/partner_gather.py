"""
---
id: kernels/fused_qkv_rope/partner_gather
op: fused_qkv_rope
category: Fusion
dtypes: [bfloat16]
techniques: [kernel-fusion, rope, half-split-rotation, partner-gather, full-width-tiles, position-gather, multi-head-per-program, 2d-tiling, fp32-accumulation, single-rounding, int64-indexing]
params:
  HB: [2, 4, 8, 16]
  num_warps: [1, 2, 4]
summary: Each [HB, D] head tile of the packed qkv row is loaded whole and its rotate-half partner (lane i reads lane (i + D/2) mod D, the same cache lines) gathered beside it; out = x * cos[i mod D/2] + sign(i) * partner * sin[i mod D/2] in fp32, stored as one contiguous full-width tile. One launch over (token, head block) with q, k and v blocks; v blocks copy.
---
What it does: NeoX RoPE on q and k plus the v copy, straight from the fused projection output
[T, (Hq + 2 Hkv) D]. Instead of splitting each head into its two halves (two half-width loads,
two half-width stores), a program loads a head tile at full width and, for lane i, the partner
lane p(i) = i + D/2 for the first half and i - D/2 for the second; with j = i mod D/2,
out_i = x_i cos_j - x_p sin_j (first half) or x_i cos_j + x_p sin_j (second half). The partner
load touches the same lines as the main load (an L1 hit), and the output is written with one
contiguous store per head row. The grid is 1-D over (token, head block), q blocks, then k
blocks, then v blocks (a plain copy); cos/sin are gathered per program from positions[t].

When to use it: `head_block` and `token_loop` work on [HB, D/2] half
tiles: for D = 128 each half row is 128 bytes, so every access is already full-line, and this
kernel issues an extra gather per element for nothing - expect a tie or a small loss there. It
pays where half rows are short or misaligned (D = 64: 64-byte halves; D = 80 or 96: halves
that straddle 128-byte lines), where full-width rows keep stores whole. CPU interpreter timing
is meaningless; the H200 verify decides.

Parameters: HB: heads per program (halved at decode until there are 4 programs per SM);
num_warps as launched (scaled with HB).
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"HB": 8, "num_warps": 2}


@triton.jit
def _qkv_rope_partner(pos_ptr, qkv_ptr, cache_ptr, qo_ptr, ko_ptr, vo_ptr, n_q_heads, n_kv_heads, n_qb, n_kb,
                      n_blocks, s_tok, sq_t, sk_t, sv_t, stride_cache,
                      D: tl.constexpr, HALF: tl.constexpr, HB: tl.constexpr, D_P2: tl.constexpr):
    pid = tl.program_id(0)
    t64 = (pid // n_blocks).to(tl.int64)
    j = pid % n_blocks
    row = qkv_ptr + t64 * s_tok
    i = tl.arange(0, D_P2)
    imask = i < D
    hh = tl.arange(0, HB)
    if j < n_qb + n_kb:
        is_q = j < n_qb
        h0 = tl.where(is_q, j, j - n_qb) * HB
        n_heads = tl.where(is_q, n_q_heads, n_kv_heads)
        col0 = tl.where(is_q, 0, n_q_heads * D)
        heads = h0 + hh
        mask = (heads < n_heads)[:, None] & imask[None, :]
        first = i < HALF
        jj = tl.where(first, i, i - HALF)
        partner = tl.where(first, i + HALF, i - HALF)
        pos = tl.load(pos_ptr + t64).to(tl.int64)
        c = tl.load(cache_ptr + pos * stride_cache + jj, mask=imask, other=0.0).to(tl.float32)[None, :]
        s = tl.load(cache_ptr + pos * stride_cache + HALF + jj, mask=imask, other=0.0).to(tl.float32)[None, :]
        s = tl.where(first[None, :], -s, s)
        src = row + col0 + heads[:, None] * D
        x = tl.load(src + i[None, :], mask=mask, other=0.0).to(tl.float32)
        xp = tl.load(src + partner[None, :], mask=mask, other=0.0).to(tl.float32)
        out = x * c + xp * s
        if is_q:
            tl.store(qo_ptr + t64 * sq_t + heads[:, None] * D + i[None, :], out.to(qo_ptr.dtype.element_ty), mask=mask)
        else:
            tl.store(ko_ptr + t64 * sk_t + heads[:, None] * D + i[None, :], out.to(ko_ptr.dtype.element_ty), mask=mask)
    else:
        heads = (j - n_qb - n_kb) * HB + hh
        mask = (heads < n_kv_heads)[:, None] & imask[None, :]
        v = tl.load(row + (n_q_heads + n_kv_heads) * D + heads[:, None] * D + i[None, :], mask=mask, other=0.0)
        tl.store(vo_ptr + t64 * sv_t + heads[:, None] * D + i[None, :], v, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, num_q_heads, num_kv_heads, head_size):
        super().__init__()
        self.num_q_heads = num_q_heads
        self.num_kv_heads = num_kv_heads
        self.head_size = head_size

    def forward(self, positions, qkv, cos_sin_cache):
        hq, hk, d = self.num_q_heads, self.num_kv_heads, self.head_size
        if qkv.stride(-1) != 1:
            qkv = qkv.contiguous()
        n_tok = qkv.shape[0]
        qo = torch.empty((n_tok, hq, d), dtype=qkv.dtype, device=qkv.device)
        ko = torch.empty((n_tok, hk, d), dtype=qkv.dtype, device=qkv.device)
        vo = torch.empty((n_tok, hk, d), dtype=qkv.dtype, device=qkv.device)
        hb = AKA_PARAMS["HB"]
        sms = torch.cuda.get_device_properties(qkv.device).multi_processor_count if qkv.is_cuda else 1
        while hb > 1 and n_tok * (triton.cdiv(hq, hb) + 2 * triton.cdiv(hk, hb)) < 4 * sms:
            hb //= 2
        warps = max(1, AKA_PARAMS["num_warps"] * hb // AKA_PARAMS["HB"])
        nqb, nkb = triton.cdiv(hq, hb), triton.cdiv(hk, hb)
        n_blocks = nqb + 2 * nkb
        if n_tok:
            _qkv_rope_partner[(n_tok * n_blocks,)](
                positions, qkv, cos_sin_cache, qo, ko, vo, hq, hk, nqb, nkb, n_blocks, qkv.stride(0),
                qo.stride(0), ko.stride(0), vo.stride(0), cos_sin_cache.stride(0),
                D=d, HALF=d // 2, HB=hb, D_P2=triton.next_power_of_2(d), num_warps=warps)
        return qo, ko, vo
