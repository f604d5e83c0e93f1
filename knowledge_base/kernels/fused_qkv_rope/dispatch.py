"""
---
id: kernels/fused_qkv_rope/dispatch
op: fused_qkv_rope
category: Fusion
dtypes: [bfloat16]
techniques: [per-shape-dispatch, kernel-fusion, rope, half-split-rotation, position-gather, multi-head-per-program, 2d-tiling, fp32-accumulation, single-rounding, int64-indexing]
params:
  MIN_TOKENS: [4096, 8192, 16384]
  HB: [4, 8, 16]
  num_warps: [1, 2, 4]
  token_hb: [4, 8, 16]
  token_warps: [2, 4, 8]
summary: Picks per token count between the two fused split-and-rotate designs that each lose where the other wins on the H200 - (token, head block) programs for decode and short prefill, one program walking each token's whole packed qkv row from MIN_TOKENS tokens on.
---
Why two paths. On the H200 (aka kb verify, 2026-11-30, against torch.compile of the reference,
scripts/dispatch_oracle.py over the two records):
- head_block (grid (T, q blocks + k blocks + v blocks)) is fastest at every shape under 8192
  tokens: 1.7-2.9 us at T 1-128 against token_loop's 2.2-4.0, 28.9 against 30.1 us at 4096 x
  (32 q, 8 kv heads). With one kv head and HB 8 each token's k and v programs move one 256-byte
  head in an eight-head tile: at 32768 x (8 q, 1 kv) it is 77.0 us, 0.92x compile, 0.50 of the
  roofline.
- token_loop (one program per token over q, k, then v head blocks, cos/sin gathered once) is
  fastest from 8192 tokens on: 17.9 against 21.2 us (8192 x (8, 1)), 101.9 against 109.0
  (16384 x (32, 8)), 56.9 against 77.0 (32768 x (8, 1), 1.24x compile).
So: token_loop from MIN_TOKENS tokens, head_block below. 4096 tokens is a tie between them
(28.9 / 30.1 and 37.6 / 37.0 us): the crossover lies between 4096 and 8192, not measured finer.
The oracle of the two records predicts objective 0.175 -> 0.183 and the large-shape minimum over
compile 0.92x -> 1.24x; an H200 verdict of this file checks it.

Both paths: NeoX halves x1 = x[:D/2], x2 = x[D/2:], out = [x1 c - x2 s, x2 c + x1 s] in fp32 with
c, s from the fp32 cache row at positions[t], one rounding; v copied; D/2 padded to a power of
two with masks (D 96, 80, 48 in the small shapes); heads not divisible by HB masked; token
offsets int64. q, k, v outputs contiguous [T, H, D].
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"MIN_TOKENS": 8192, "HB": 8, "num_warps": 2, "token_hb": 8, "token_warps": 2}


@triton.jit
def _rope_block(qkv_ptr, out_ptr, pos_ptr, cache_ptr, stride_cache, t64, col0, h0, n_heads, s_tok, d_tok,
                HALF: tl.constexpr, HB: tl.constexpr, HALF_P2: tl.constexpr):
    heads = h0 + tl.arange(0, HB)
    i = tl.arange(0, HALF_P2)
    cmask = i < HALF
    mask = (heads < n_heads)[:, None] & cmask[None, :]
    pos = tl.load(pos_ptr + t64).to(tl.int64)
    c = tl.load(cache_ptr + pos * stride_cache + i, mask=cmask, other=0.0).to(tl.float32)[None, :]
    s = tl.load(cache_ptr + pos * stride_cache + HALF + i, mask=cmask, other=0.0).to(tl.float32)[None, :]
    src = qkv_ptr + t64 * s_tok + col0 + heads[:, None] * (2 * HALF) + i[None, :]
    x1 = tl.load(src, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(src + HALF, mask=mask, other=0.0).to(tl.float32)
    dst = out_ptr + t64 * d_tok + heads[:, None] * (2 * HALF) + i[None, :]
    tl.store(dst, (x1 * c - x2 * s).to(out_ptr.dtype.element_ty), mask=mask)
    tl.store(dst + HALF, (x2 * c + x1 * s).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _copy_block(qkv_ptr, out_ptr, t64, col0, h0, n_heads, s_tok, d_tok,
                D: tl.constexpr, HB: tl.constexpr, D_P2: tl.constexpr):
    heads = h0 + tl.arange(0, HB)
    cols = tl.arange(0, D_P2)
    mask = (heads < n_heads)[:, None] & (cols < D)[None, :]
    x = tl.load(qkv_ptr + t64 * s_tok + col0 + heads[:, None] * D + cols[None, :], mask=mask, other=0.0)
    tl.store(out_ptr + t64 * d_tok + heads[:, None] * D + cols[None, :], x, mask=mask)


@triton.jit
def _qkv_rope_head_block(pos_ptr, qkv_ptr, cache_ptr, qo_ptr, ko_ptr, vo_ptr, n_q_heads, n_kv_heads,
                         n_q_blocks, n_k_blocks, s_tok, sq_t, sk_t, sv_t, stride_cache,
                         D: tl.constexpr, HALF: tl.constexpr, HB: tl.constexpr, HALF_P2: tl.constexpr,
                         D_P2: tl.constexpr):
    t64 = tl.program_id(0).to(tl.int64)
    j = tl.program_id(1)
    if j < n_q_blocks:
        _rope_block(qkv_ptr, qo_ptr, pos_ptr, cache_ptr, stride_cache, t64, 0, j * HB, n_q_heads, s_tok, sq_t,
                    HALF, HB, HALF_P2)
    elif j < n_q_blocks + n_k_blocks:
        _rope_block(qkv_ptr, ko_ptr, pos_ptr, cache_ptr, stride_cache, t64, n_q_heads * D,
                    (j - n_q_blocks) * HB, n_kv_heads, s_tok, sk_t, HALF, HB, HALF_P2)
    else:
        _copy_block(qkv_ptr, vo_ptr, t64, (n_q_heads + n_kv_heads) * D, (j - n_q_blocks - n_k_blocks) * HB,
                    n_kv_heads, s_tok, sv_t, D, HB, D_P2)


@triton.jit
def _qkv_rope_token(pos_ptr, qkv_ptr, cache_ptr, qo_ptr, ko_ptr, vo_ptr, n_q_heads, n_kv_heads,
                    s_tok, sq_t, sk_t, sv_t, stride_cache,
                    D: tl.constexpr, HALF: tl.constexpr, HB: tl.constexpr, HALF_P2: tl.constexpr,
                    D_P2: tl.constexpr):
    t64 = tl.program_id(0).to(tl.int64)
    row = qkv_ptr + t64 * s_tok
    pos = tl.load(pos_ptr + t64).to(tl.int64)
    i = tl.arange(0, HALF_P2)
    cmask = i < HALF
    c = tl.load(cache_ptr + pos * stride_cache + i, mask=cmask, other=0.0).to(tl.float32)[None, :]
    s = tl.load(cache_ptr + pos * stride_cache + HALF + i, mask=cmask, other=0.0).to(tl.float32)[None, :]
    hh = tl.arange(0, HB)
    for h0 in range(0, n_q_heads, HB):
        heads = h0 + hh
        mask = (heads < n_q_heads)[:, None] & cmask[None, :]
        src = row + heads[:, None] * D + i[None, :]
        x1 = tl.load(src, mask=mask, other=0.0).to(tl.float32)
        x2 = tl.load(src + HALF, mask=mask, other=0.0).to(tl.float32)
        dst = qo_ptr + t64 * sq_t + heads[:, None] * D + i[None, :]
        tl.store(dst, (x1 * c - x2 * s).to(qo_ptr.dtype.element_ty), mask=mask)
        tl.store(dst + HALF, (x2 * c + x1 * s).to(qo_ptr.dtype.element_ty), mask=mask)
    for h0 in range(0, n_kv_heads, HB):
        heads = h0 + hh
        mask = (heads < n_kv_heads)[:, None] & cmask[None, :]
        src = row + n_q_heads * D + heads[:, None] * D + i[None, :]
        x1 = tl.load(src, mask=mask, other=0.0).to(tl.float32)
        x2 = tl.load(src + HALF, mask=mask, other=0.0).to(tl.float32)
        dst = ko_ptr + t64 * sk_t + heads[:, None] * D + i[None, :]
        tl.store(dst, (x1 * c - x2 * s).to(ko_ptr.dtype.element_ty), mask=mask)
        tl.store(dst + HALF, (x2 * c + x1 * s).to(ko_ptr.dtype.element_ty), mask=mask)
    cols = tl.arange(0, D_P2)
    for h0 in range(0, n_kv_heads, HB):
        heads = h0 + hh
        mask = (heads < n_kv_heads)[:, None] & (cols < D)[None, :]
        v = tl.load(row + (n_q_heads + n_kv_heads) * D + heads[:, None] * D + cols[None, :], mask=mask, other=0.0)
        tl.store(vo_ptr + t64 * sv_t + heads[:, None] * D + cols[None, :], v, mask=mask)


def use_token_loop(n_tokens: int, min_tokens: int) -> bool:
    """One program per token (token_loop) from min_tokens tokens on; (token, head block) below."""
    return n_tokens >= min_tokens


class ModelNew(nn.Module):
    def __init__(self, num_q_heads, num_kv_heads, head_size):
        super().__init__()
        self.num_q_heads = num_q_heads
        self.num_kv_heads = num_kv_heads
        self.head_size = head_size

    def forward(self, positions, qkv, cos_sin_cache):
        hq, hk, d = self.num_q_heads, self.num_kv_heads, self.head_size
        n_tok = qkv.shape[0]
        qo = torch.empty((n_tok, hq, d), dtype=qkv.dtype, device=qkv.device)
        ko = torch.empty((n_tok, hk, d), dtype=qkv.dtype, device=qkv.device)
        vo = torch.empty((n_tok, hk, d), dtype=qkv.dtype, device=qkv.device)
        p = AKA_PARAMS
        consts = dict(D=d, HALF=d // 2, HALF_P2=triton.next_power_of_2(d // 2), D_P2=triton.next_power_of_2(d))
        if use_token_loop(n_tok, p["MIN_TOKENS"]):
            _qkv_rope_token[(n_tok,)](
                positions, qkv, cos_sin_cache, qo, ko, vo, hq, hk, qkv.stride(0), qo.stride(0), ko.stride(0),
                vo.stride(0), cos_sin_cache.stride(0), HB=p["token_hb"], num_warps=p["token_warps"], **consts)
        else:
            hb = p["HB"]
            nqb, nkb = triton.cdiv(hq, hb), triton.cdiv(hk, hb)
            _qkv_rope_head_block[(n_tok, nqb + 2 * nkb)](
                positions, qkv, cos_sin_cache, qo, ko, vo, hq, hk, nqb, nkb, qkv.stride(0), qo.stride(0),
                ko.stride(0), vo.stride(0), cos_sin_cache.stride(0), HB=hb, num_warps=p["num_warps"], **consts)
        return qo, ko, vo
