"""
---
id: kernels/reshape_and_cache/tile2d
op: reshape_and_cache
category: Index
dtypes: [bfloat16]
techniques: [scatter-by-slot, 2d-tiling-tokens-by-columns, int64-offsets, skip-padding-slots, vectorized-access]
params:
  TB: [1, 2, 4, 8]
  BC: [128, 256, 512, 1024]
  num_warps: [1, 2, 4]
summary: Grid (token block, column block) over the flattened [T, Hkv*D] rows; a [TB, BC] tile of K and of V scattered to TB slots, padding slots masked out.
---
Where token_row gives a program one or a few whole rows, this splits rows into BC-wide column
blocks so decode batches still spread over many SMs (32 tokens x 256 columns at TB 1, BC 128: 64
programs, not 32), and loads TB slots as one vector so the dependent slot -> address step is
paid once per tile. Padding tokens (slot -1) are masked out of the stores rather than branched
around, which keeps the tile code straight-line. The same flattened-row contiguity as token_row
is required (Hkv*D contiguous in key, value and both caches); cache offsets are int64.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"TB": 2, "BC": 512, "num_warps": 4}


@triton.jit
def _cache_write_tile(k_ptr, v_ptr, kc_ptr, vc_ptr, slot_ptr, T, ROW, block_size,
                      sk_t, sv_t, skc_b, skc_s, svc_b, svc_s,
                      TB: tl.constexpr, BC: tl.constexpr):
    toks = tl.program_id(0) * TB + tl.arange(0, TB)
    cols = tl.program_id(1) * BC + tl.arange(0, BC)
    tm = toks < T
    slot = tl.load(slot_ptr + toks, mask=tm, other=-1).to(tl.int64)
    live = slot >= 0
    slot = tl.where(live, slot, 0)
    blk = slot // block_size
    off = slot % block_size
    t64 = toks.to(tl.int64)
    lm = (tm & live)[:, None] & (cols < ROW)[None, :]
    k = tl.load(k_ptr + t64[:, None] * sk_t + cols[None, :], mask=lm)
    v = tl.load(v_ptr + t64[:, None] * sv_t + cols[None, :], mask=lm)
    tl.store(kc_ptr + (blk * skc_b + off * skc_s)[:, None] + cols[None, :], k.to(kc_ptr.dtype.element_ty), mask=lm)
    tl.store(vc_ptr + (blk * svc_b + off * svc_s)[:, None] + cols[None, :], v.to(vc_ptr.dtype.element_ty), mask=lm)


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
        tb, bc = AKA_PARAMS["TB"], AKA_PARAMS["BC"]
        _cache_write_tile[(triton.cdiv(T, tb), triton.cdiv(row, bc))](
            k, v, key_cache, value_cache, slots, T, row, key_cache.shape[1],
            k.stride(0), v.stride(0), key_cache.stride(0), key_cache.stride(1),
            value_cache.stride(0), value_cache.stride(1),
            TB=tb, BC=bc, num_warps=AKA_PARAMS["num_warps"])
        return key_cache, value_cache
