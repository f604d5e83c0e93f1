"""
---
id: kernels/rope_neox/persistent
op: rope_neox
category: Math
dtypes: [bfloat16]
techniques: [rope, half-split-rotation, position-gather, persistent-kernel, grid-stride-loop, multi-head-per-program, 2d-tiling, fp32-accumulation, single-rounding, int64-indexing]
params:
  PROGS_PER_SM: [2, 4, 8]
  HB: [4, 8, 16]
  num_warps: [1, 2, 4]
summary: min(T, PROGS_PER_SM x SMs) programs stride over the tokens; per token the cos/sin row of positions[t] is gathered once and the program walks the token's q head blocks then k head blocks ([HB, D/2] half tiles rotated in fp32, one rounding).
---
What it does: NeoX rotary embedding with a fixed grid: program p handles tokens p, p + P, ...
(P = min(T, PROGS_PER_SM * SMs)). For each token it loads positions[t], the [D/2] cos and sin
vectors of that row of the cache (fp32), and then rotates every q head and every k head of the
token in blocks of HB heads: x1 = x[:D/2], x2 = x[D/2:], out = [x1 c - x2 s, x2 c + x1 s].

When to use it: `head_block` gives each (token, head block) a program
and re-gathers cos/sin in each; `token_loop` gives each token a program (split over a few at
decode). At the 4096-16384-token prefill shapes both launch tens of thousands of programs
moving 8-10 KB each; this kernel keeps a few programs per SM walking tokens back to back. At
decode (1-256 tokens) it has at most T programs, so a single token is one program doing all
40 heads serially - expect it to lose to `head_block` there. CPU interpreter timing is
meaningless; the H200 verify decides. On the CPU interpreter the machine has 2 "SMs", so small
shapes run several trips per program.

Parameters: PROGS_PER_SM: programs per SM; HB: heads per block (a power of two); num_warps.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"PROGS_PER_SM": 4, "HB": 8, "num_warps": 2}


def _num_sms(device):
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 2


@triton.jit
def _rotate_block(src_ptr, dst_ptr, t64, h0, n_heads, s_tok, s_head, d_tok, d_head, c, s,
                  HALF: tl.constexpr, HB: tl.constexpr, HALF_P2: tl.constexpr):
    heads = h0 + tl.arange(0, HB)
    i = tl.arange(0, HALF_P2)
    mask = (heads < n_heads)[:, None] & (i < HALF)[None, :]
    src = src_ptr + t64 * s_tok + heads[:, None] * s_head + i[None, :]
    x1 = tl.load(src, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(src + HALF, mask=mask, other=0.0).to(tl.float32)
    dst = dst_ptr + t64 * d_tok + heads[:, None] * d_head + i[None, :]
    tl.store(dst, (x1 * c - x2 * s).to(dst_ptr.dtype.element_ty), mask=mask)
    tl.store(dst + HALF, (x2 * c + x1 * s).to(dst_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rope_neox_persistent(pos_ptr, q_ptr, k_ptr, cache_ptr, qo_ptr, ko_ptr, n_tok, n_q_heads, n_k_heads,
                          sq_t, sq_h, sk_t, sk_h, sqo_t, sqo_h, sko_t, sko_h, stride_cache,
                          HALF: tl.constexpr, HB: tl.constexpr, HALF_P2: tl.constexpr):
    i = tl.arange(0, HALF_P2)
    cmask = i < HALF
    for t in range(tl.program_id(0), n_tok, tl.num_programs(0)):
        t64 = tl.cast(t, tl.int64)
        row = cache_ptr + tl.load(pos_ptr + t64).to(tl.int64) * stride_cache
        c = tl.load(row + i, mask=cmask, other=0.0).to(tl.float32)[None, :]
        s = tl.load(row + HALF + i, mask=cmask, other=0.0).to(tl.float32)[None, :]
        for h0 in range(0, n_q_heads, HB):
            _rotate_block(q_ptr, qo_ptr, t64, h0, n_q_heads, sq_t, sq_h, sqo_t, sqo_h, c, s, HALF, HB, HALF_P2)
        for h0 in range(0, n_k_heads, HB):
            _rotate_block(k_ptr, ko_ptr, t64, h0, n_k_heads, sk_t, sk_h, sko_t, sko_h, c, s, HALF, HB, HALF_P2)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, positions, query, key, cos_sin_cache):
        n_tok, hq, d = query.shape
        hk = key.shape[1]
        qo = torch.empty((n_tok, hq, d), dtype=query.dtype, device=query.device)
        ko = torch.empty((n_tok, hk, d), dtype=key.dtype, device=key.device)
        half = d // 2
        if n_tok:
            grid = (min(n_tok, AKA_PARAMS["PROGS_PER_SM"] * _num_sms(query.device)),)
            _rope_neox_persistent[grid](
                positions, query, key, cos_sin_cache, qo, ko, n_tok, hq, hk,
                query.stride(0), query.stride(1), key.stride(0), key.stride(1), qo.stride(0), qo.stride(1),
                ko.stride(0), ko.stride(1), cos_sin_cache.stride(0),
                HALF=half, HB=AKA_PARAMS["HB"], HALF_P2=triton.next_power_of_2(half),
                num_warps=AKA_PARAMS["num_warps"])
        return qo, ko
