"""
---
id: kernels/embedding/tile2d
op: embedding
category: Index
dtypes: [bfloat16]
techniques: [row-gather, 2d-tiling-tokens-by-columns, int64-offsets, vectorized-access]
params:
  TB: [1, 2, 4, 8]
  BH: [256, 512, 1024, 2048]
  num_warps: [2, 4, 8]
summary: Grid (token block, column block); TB ids loaded once, a [TB, BH] tile of table rows gathered and stored unchanged.
---
A pure bit-exact copy: rows are loaded and stored in the table dtype (no fp32 round trip). Each
program reads its TB ids once (one dependent load before the gather) and moves TB x BH x 2 bytes;
column blocks make decode grids wide (32 tokens x 7168 columns at TB 1, BH 512: 448 programs, not
32). Row offsets are int64: id * H reaches 151936 * 5120 = 7.8e8 here and passes 2**31 for
128256 x 16384 tables.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"TB": 2, "BH": 1024, "num_warps": 4}


@triton.jit
def _embedding_tile(ids_ptr, w_ptr, out_ptr, T, H, stride_w, stride_o,
                    TB: tl.constexpr, BH: tl.constexpr):
    toks = tl.program_id(0) * TB + tl.arange(0, TB)
    cols = tl.program_id(1) * BH + tl.arange(0, BH)
    tm = toks < T
    rows = tl.load(ids_ptr + toks, mask=tm, other=0).to(tl.int64)
    m = tm[:, None] & (cols < H)[None, :]
    x = tl.load(w_ptr + rows[:, None] * stride_w + cols[None, :], mask=m)
    tl.store(out_ptr + toks.to(tl.int64)[:, None] * stride_o + cols[None, :], x, mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, ids, weight):
        V, H = weight.shape
        ids = ids.contiguous()
        w = weight if weight.stride(1) == 1 else weight.contiguous()
        T = ids.numel()
        out = torch.empty((T, H), dtype=weight.dtype, device=weight.device)
        tb, bh = AKA_PARAMS["TB"], AKA_PARAMS["BH"]
        _embedding_tile[(triton.cdiv(T, tb), triton.cdiv(H, bh))](
            ids, w, out, T, H, w.stride(0), out.stride(0), TB=tb, BH=bh,
            num_warps=AKA_PARAMS["num_warps"])
        return out
