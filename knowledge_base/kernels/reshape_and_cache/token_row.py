"""
---
id: kernels/reshape_and_cache/token_row
op: reshape_and_cache
category: Index
dtypes: [bfloat16]
techniques: [scatter-by-slot, token-per-program, int64-offsets, skip-padding-slots, vectorized-access]
params:
  TOKENS_PER_PROG: [1, 2, 4]
  num_warps: [1, 2, 4, 8]
summary: TOKENS_PER_PROG tokens per program; each token's K and V rows (Hkv*D contiguous elements) copied whole to their slot, padding slots (-1) skipped.
---
In the [num_blocks, block_size, Hkv, D] layout a token's Hkv*D values land contiguously in its
slot, so one [next_pow2(Hkv*D)] vector per tensor moves the row with 16-byte accesses (1-4 KB for
Hkv*D = 128..2048 here). K and V share the slot load. A slot of -1 skips the token (a write to
block -1 would corrupt the memory before the cache). Cache offsets are int64: 65536 blocks x 16
x 128 = 1.3e8 elements here, and production caches pass 2**31 elements. Caches are written in
place and returned, as the reference does; nothing outside the addressed slots is touched.
Changed before any GPU measurement. (1) Straight-line body: the K and V rows are loaded
alongside the slot (every token t < T is readable; a padding token's row is just not stored)
and the stores are masked by slot >= 0, where `if slot >= 0:` had put the K/V loads behind the
slot load - three dependent memory steps (slot, rows, store) instead of two. At decode the op is
latency alone (the ceiling has no launch floor). (2) num_warps is
capped at one warp per 256 row elements (one 16-byte vector per thread): rows of 128-256
elements (Hkv = 1-2 at D = 128) had given each of 4 warps' threads one or two 2-byte elements,
and 4 warps per 256-512 B of traffic. (3) Few tokens: TOKENS_PER_PROG halves until the grid has
at least 4 programs per SM, as rms_norm/rowwise does after several rows per program lost its
decode shapes to torch.compile on the H200. Prediction (unmeasured): faster at decode by about
one memory latency, and at the Hkv*D = 128 prefill shape; unchanged at Hkv*D >= 1024.

When to use it: the simplest form of the paged cache write, one program per token copying its
whole key row and value row to the slot the slot mapping gives (padding slots skipped); suits rows
of 1-4 KB (typical GQA models) and token counts that give every SM a few programs. `tile2d` splits
narrow rows into column blocks to spread tiny decode batches over more SMs; `persistent` skips
the loads of padding tokens by a branch, worth it when many entries are padding.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"TOKENS_PER_PROG": 1, "num_warps": 4}


@triton.jit
def _cache_write_rows(k_ptr, v_ptr, kc_ptr, vc_ptr, slot_ptr, T, block_size,
                      sk_t, sv_t, skc_b, skc_s, svc_b, svc_s,
                      ROW: tl.constexpr, BLOCK: tl.constexpr, TPP: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < ROW
    for r in tl.static_range(TPP):
        t = tl.program_id(0) * TPP + r
        t64 = t.to(tl.int64)
        lm = m & (t < T)
        # slot and rows loaded together (no branch between them); padding (-1) masks the stores
        slot = tl.load(slot_ptr + t64, mask=t < T, other=-1).to(tl.int64)
        k = tl.load(k_ptr + t64 * sk_t + offs, mask=lm)
        v = tl.load(v_ptr + t64 * sv_t + offs, mask=lm)
        sm = lm & (slot >= 0)
        slot = tl.maximum(slot, 0)
        blk = slot // block_size
        off = slot % block_size
        tl.store(kc_ptr + blk * skc_b + off * skc_s + offs, k.to(kc_ptr.dtype.element_ty), mask=sm)
        tl.store(vc_ptr + blk * svc_b + off * svc_s + offs, v.to(vc_ptr.dtype.element_ty), mask=sm)


def _rows(x):
    """[T, Hkv, D] with each token's Hkv*D values contiguous (copy only if the input is not)."""
    return x if (x.stride(2) == 1 and x.stride(1) == x.shape[2]) else x.contiguous()


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, key, value, key_cache, value_cache, slot_mapping):
        T, Hkv, D = key.shape
        for c in (key_cache, value_cache):
            if c.stride(3) != 1 or c.stride(2) != D:
                raise ValueError("cache rows must be [Hkv, D] contiguous")
        k, v = _rows(key), _rows(value)
        slots = slot_mapping.contiguous()
        row = Hkv * D
        tpp = AKA_PARAMS["TOKENS_PER_PROG"]
        # Few tokens (decode): fewer tokens per program until every SM gets ~4 programs.
        sms = torch.cuda.get_device_properties(key.device).multi_processor_count if key.is_cuda else 1
        while tpp > 1 and triton.cdiv(T, tpp) < 4 * sms:
            tpp //= 2
        block = triton.next_power_of_2(row)
        warps = min(AKA_PARAMS["num_warps"], max(1, block // 256))  # >= 8 elements (16 B) per thread
        if T:
            _cache_write_rows[(triton.cdiv(T, tpp),)](
                k, v, key_cache, value_cache, slots, T, key_cache.shape[1],
                k.stride(0), v.stride(0), key_cache.stride(0), key_cache.stride(1),
                value_cache.stride(0), value_cache.stride(1),
                ROW=row, BLOCK=block, TPP=tpp, num_warps=warps)
        return key_cache, value_cache
