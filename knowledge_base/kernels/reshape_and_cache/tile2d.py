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
summary: 1-D token-major grid over (token block, column block) of the flattened [T, Hkv*D] rows; a [TB, BC] tile of K and of V scattered to TB slots, padding slots masked out.
---
Where token_row gives a program one or a few whole rows, this splits rows into BC-wide column
blocks so decode batches still spread over many SMs (32 tokens x 256 columns at TB 1, BC 128: 64
programs, not 32), and loads TB slots as one vector so the dependent slot -> address step is
paid once per tile. Padding tokens (slot -1) are masked out of the stores rather than branched
around, which keeps the tile code straight-line. The same flattened-row contiguity as token_row
is required (Hkv*D contiguous in key, value and both caches); cache offsets are int64.
Changed before any GPU measurement. (1) Grid order: a 1-D grid walked token-major (program p:
token block p // nb, column block p % nb), so programs in flight read consecutive K/V and write
whole slot rows together; tokens had been on grid axis 0, which the GPU walks fastest, the
layout that lost 4-5% to torch.compile's flat stream in silu_and_mul's grid2d on the H200.
(2) Masked lanes: BC is cut to next_pow2(Hkv*D); at the default BC = 512, rows of 128 (Hkv = 1,
D = 128: a 32768-token prefill shape) left 75% of every tile masked and rows of 256 50%.
(3) Few tokens: TB halves until the grid has at least 4 programs per SM, as l2_norm/gated_rms_norm's
row tiles now do after compile won their decode shapes. num_warps shrinks in proportion when
(2) or (3) shrink the tile (elements per thread unchanged). (4) The K/V loads are masked by
t < T only, not by the slot, so they issue alongside the slot load instead of after it (the
stores keep the slot >= 0 mask): one memory latency less per program, which is what decode
shapes are made of. Prediction (unmeasured): faster at decode and at Hkv*D = 128-256.

When to use it: writing each step's new K and V rows into a paged cache by slot mapping when the
batch is small (decode with few sequences) or the rows are narrow (one or two KV heads), where
one program per token leaves most SMs idle; padded entries (slot -1) are masked out of the
stores. For wide rows at large token counts `token_row` is as good and simpler.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"TB": 2, "BC": 512, "num_warps": 4}


@triton.jit
def _cache_write_tile(k_ptr, v_ptr, kc_ptr, vc_ptr, slot_ptr, T, ROW, block_size, nb,
                      sk_t, sv_t, skc_b, skc_s, svc_b, svc_s,
                      TB: tl.constexpr, BC: tl.constexpr):
    pid = tl.program_id(0)
    toks = (pid // nb) * TB + tl.arange(0, TB)
    cols = (pid % nb) * BC + tl.arange(0, BC)
    tm = toks < T
    t64 = toks.to(tl.int64)
    # rows loaded alongside the slots (not behind them); padding slots mask only the stores
    rm = tm[:, None] & (cols < ROW)[None, :]
    slot = tl.load(slot_ptr + toks, mask=tm, other=-1).to(tl.int64)
    k = tl.load(k_ptr + t64[:, None] * sk_t + cols[None, :], mask=rm)
    v = tl.load(v_ptr + t64[:, None] * sv_t + cols[None, :], mask=rm)
    live = slot >= 0
    slot = tl.where(live, slot, 0)
    blk = slot // block_size
    off = slot % block_size
    sm = rm & live[:, None]
    tl.store(kc_ptr + (blk * skc_b + off * skc_s)[:, None] + cols[None, :], k.to(kc_ptr.dtype.element_ty), mask=sm)
    tl.store(vc_ptr + (blk * svc_b + off * svc_s)[:, None] + cols[None, :], v.to(vc_ptr.dtype.element_ty), mask=sm)


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
        tb, bc = AKA_PARAMS["TB"], min(AKA_PARAMS["BC"], triton.next_power_of_2(row))
        nb = triton.cdiv(row, bc)
        # Few tokens (decode): fewer tokens per program until every SM gets ~4 programs.
        sms = torch.cuda.get_device_properties(key.device).multi_processor_count if key.is_cuda else 1
        while tb > 1 and triton.cdiv(T, tb) * nb < 4 * sms:
            tb //= 2
        warps = max(1, AKA_PARAMS["num_warps"] * tb * bc // (AKA_PARAMS["TB"] * AKA_PARAMS["BC"]))
        if T:
            _cache_write_tile[(triton.cdiv(T, tb) * nb,)](
                k, v, key_cache, value_cache, slots, T, row, key_cache.shape[1], nb,
                k.stride(0), v.stride(0), key_cache.stride(0), key_cache.stride(1),
                value_cache.stride(0), value_cache.stride(1),
                TB=tb, BC=bc, num_warps=warps)
        return key_cache, value_cache
