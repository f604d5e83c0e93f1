"""
---
id: kernels/reshape_and_cache/persistent
op: reshape_and_cache
category: Index
dtypes: [bfloat16]
techniques: [scatter-by-slot, persistent-kernel, grid-stride-loop, int64-offsets, skip-padding-slots, vectorized-access, in-place-update]
params:
  PROGS_PER_SM: [2, 4, 8]
  num_warps: [2, 4, 8]
summary: min(T, PROGS_PER_SM x SMs) programs stride over the tokens; per token the slot is loaded first and padding slots (-1) are skipped by a branch before any K/V load, then the token's whole K and V rows (Hkv*D contiguous) are copied into the cache in place.
---
What it does: The paged-cache write key_cache[slot // bs, slot % bs] = key[t] (and value) with a
fixed grid: program p handles tokens p, p + P, ... Each trip loads slot_mapping[t]; a padding
token (-1) is skipped before its K and V rows are read, so padded batches (CUDA-graph capture
sizes) cost no bandwidth for the padding. A real token's rows are Hkv * D contiguous values
(one [next_pow2(Hkv*D)] masked vector each) stored at the block/offset address; every other cache
entry is untouched (the caches are updated in place and returned).

When to use it: `token_row` loads slot and rows together and masks
the stores (no branch: good when padding is rare), one program per token(s); `tile2d` tiles
(token block, column block). At prefill (8192-32768 tokens) the persistent grid replaces
thousands of programs by a few per SM; at decode it is one token per program, like `token_row`.
Branching per token costs a little when no token is padding, which is the benchmark's case;
the H200 verify decides (CPU timing is meaningless). On the CPU interpreter the machine has 2
"SMs", so small shapes take several trips per program.

Parameters: PROGS_PER_SM: programs per SM; num_warps capped at row / 256 so each thread moves
>= 8 elements.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"PROGS_PER_SM": 4, "num_warps": 4}


def _num_sms(device):
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 2


@triton.jit
def _cache_write_persistent(k_ptr, v_ptr, kc_ptr, vc_ptr, slot_ptr, n_tokens, block_size, sk_t, sv_t,
                            skc_b, skc_s, svc_b, svc_s, ROW: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < ROW
    for t in range(tl.program_id(0), n_tokens, tl.num_programs(0)):
        t64 = tl.cast(t, tl.int64)
        slot = tl.load(slot_ptr + t64).to(tl.int64)
        if slot >= 0:
            blk = slot // block_size
            off = slot % block_size
            k = tl.load(k_ptr + t64 * sk_t + offs, mask=m)
            v = tl.load(v_ptr + t64 * sv_t + offs, mask=m)
            tl.store(kc_ptr + blk * skc_b + off * skc_s + offs, k.to(kc_ptr.dtype.element_ty), mask=m)
            tl.store(vc_ptr + blk * svc_b + off * svc_s + offs, v.to(vc_ptr.dtype.element_ty), mask=m)


def _rows(x):
    """[T, Hkv, D] with each token's Hkv*D values contiguous (copy only if the input is not)."""
    return x if (x.stride(2) == 1 and x.stride(1) == x.shape[2]) else x.contiguous()


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, key, value, key_cache, value_cache, slot_mapping):
        n, hkv, d = key.shape
        for c in (key_cache, value_cache):
            if c.stride(3) != 1 or c.stride(2) != d:
                raise ValueError("cache rows must be [Hkv, D] contiguous")
        k, v = _rows(key), _rows(value)
        slots = slot_mapping.contiguous()
        row = hkv * d
        block = triton.next_power_of_2(row)
        warps = min(AKA_PARAMS["num_warps"], max(1, block // 256))
        if n:
            grid = (min(n, AKA_PARAMS["PROGS_PER_SM"] * _num_sms(key.device)),)
            _cache_write_persistent[grid](k, v, key_cache, value_cache, slots, n, key_cache.shape[1],
                                          k.stride(0), v.stride(0), key_cache.stride(0), key_cache.stride(1),
                                          value_cache.stride(0), value_cache.stride(1), ROW=row, BLOCK=block,
                                          num_warps=warps)
        return key_cache, value_cache
