"""
---
id: kernels/rope_neox/head_block
op: rope_neox
category: Math
dtypes: [bfloat16]
techniques: [rope, half-split-rotation, position-gather, multi-head-per-program, 2d-tiling, fp32-accumulation, single-rounding, int64-indexing]
params:
  HB: [4, 8, 16, 32]
  num_warps: [1, 2, 4, 8]
summary: 1-D token-major grid over (token, head block), q head blocks then k head blocks (one launch); cos/sin of positions[t] gathered once per program as [D/2] vectors and broadcast over HB heads; two [HB, D/2] half tiles rotated in fp32.
---
Design. Program (t, j) rotates HB heads of token t: j < ceil(Hq / HB) selects q, the rest k, so q
and k share one launch and one set of cos/sin loads per program. The fp32 cos/sin row is
gathered at positions[t] (int64, arbitrary order: batched decode), read as the first and second
D/2 columns of the [max_pos, D] cache, and broadcast over the heads of the tile. Each head is
loaded as its two halves, x1 = x[:D/2] and x2 = x[D/2:], as [HB, D/2] tiles (contiguous runs of
D/2 bf16, 128 bytes at D = 128), and out = [x1 c - x2 s, x2 c + x1 s] is computed in fp32 and
rounded once. D/2 is a constexpr (head size is fixed per model) padded to a power of two with
a mask (small shapes use D = 96, 80, 48). Head counts not divisible by HB are masked. Token
offsets int64.
Grid (changed before any GPU measurement). A 1-D grid walked token-major: program p rotates head
block p % nb of token p // nb (nb = ceil(Hq / HB) + ceil(Hkv / HB)), so programs in flight
together read and write consecutive stretches of q and k (and share the token's cos/sin row).
It was (T, nb) with tokens on axis 0, which the GPU walks fastest: programs in flight took the
same head block of consecutive tokens, a whole q row apart (8 KB at 32 heads) - the layout that
lost 4-5% to torch.compile's flat stream in silu_and_mul's grid2d on the H200. Few tokens
(decode): HB halves until the grid has at least 4 programs per SM, with num_warps scaled down
in proportion (elements per thread unchanged), as l2_norm/gated_rms_norm's row tiles now do
after compile won their decode shapes; at 1-64 Llama-8B tokens HB = 8 gave 5-320 programs.
Prediction (unmeasured): a few % at prefill, and nearer torch.compile at 1-256 tokens.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {'HB': 8, 'num_warps': 2}  # set by the offline proposer


@triton.jit
def _rotate_heads(src_ptr, dst_ptr, tok, h0, n_heads, s_tok, s_head, d_tok, d_head, cos, sin,
                  HALF: tl.constexpr, HB: tl.constexpr, HALF_P2: tl.constexpr):
    heads = h0 + tl.arange(0, HB)
    i = tl.arange(0, HALF_P2)
    mask = (heads < n_heads)[:, None] & (i < HALF)[None, :]
    t64 = tok.to(tl.int64)
    src = src_ptr + t64 * s_tok + heads[:, None] * s_head + i[None, :]
    x1 = tl.load(src, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(src + HALF, mask=mask, other=0.0).to(tl.float32)
    c = cos[None, :]
    s = sin[None, :]
    dst = dst_ptr + t64 * d_tok + heads[:, None] * d_head + i[None, :]
    tl.store(dst, (x1 * c - x2 * s).to(dst_ptr.dtype.element_ty), mask=mask)
    tl.store(dst + HALF, (x2 * c + x1 * s).to(dst_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rope_neox_head_block(pos_ptr, q_ptr, k_ptr, cache_ptr, qo_ptr, ko_ptr, n_q_heads, n_k_heads, n_q_blocks,
                          n_blocks, sq_t, sq_h, sk_t, sk_h, sqo_t, sqo_h, sko_t, sko_h, stride_cache,
                          HALF: tl.constexpr, HB: tl.constexpr, HALF_P2: tl.constexpr):
    pid = tl.program_id(0)
    tok = pid // n_blocks
    j = pid % n_blocks
    pos = tl.load(pos_ptr + tok).to(tl.int64)
    i = tl.arange(0, HALF_P2)
    cmask = i < HALF
    cos = tl.load(cache_ptr + pos * stride_cache + i, mask=cmask, other=0.0).to(tl.float32)
    sin = tl.load(cache_ptr + pos * stride_cache + HALF + i, mask=cmask, other=0.0).to(tl.float32)
    if j < n_q_blocks:
        _rotate_heads(q_ptr, qo_ptr, tok, j * HB, n_q_heads, sq_t, sq_h, sqo_t, sqo_h, cos, sin, HALF, HB, HALF_P2)
    else:
        _rotate_heads(k_ptr, ko_ptr, tok, (j - n_q_blocks) * HB, n_k_heads, sk_t, sk_h, sko_t, sko_h, cos, sin,
                      HALF, HB, HALF_P2)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, positions, query, key, cos_sin_cache):
        n_tok, hq, d = query.shape
        hk = key.shape[1]
        qo = torch.empty((n_tok, hq, d), dtype=query.dtype, device=query.device)
        ko = torch.empty((n_tok, hk, d), dtype=key.dtype, device=key.device)
        hb = AKA_PARAMS["HB"]
        # Few tokens (decode): smaller head blocks until every SM gets ~4 programs.
        sms = torch.cuda.get_device_properties(query.device).multi_processor_count if query.is_cuda else 1
        while hb > 1 and n_tok * (triton.cdiv(hq, hb) + triton.cdiv(hk, hb)) < 4 * sms:
            hb //= 2
        warps = max(1, AKA_PARAMS["num_warps"] * hb // AKA_PARAMS["HB"])
        nqb, nkb = triton.cdiv(hq, hb), triton.cdiv(hk, hb)
        half = d // 2
        if n_tok:
            _rope_neox_head_block[(n_tok * (nqb + nkb),)](
                positions, query, key, cos_sin_cache, qo, ko, hq, hk, nqb, nqb + nkb,
                query.stride(0), query.stride(1), key.stride(0), key.stride(1), qo.stride(0), qo.stride(1),
                ko.stride(0), ko.stride(1), cos_sin_cache.stride(0),
                HALF=half, HB=hb, HALF_P2=triton.next_power_of_2(half), num_warps=warps)
        return qo, ko
