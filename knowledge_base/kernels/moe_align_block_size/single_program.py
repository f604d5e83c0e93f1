"""
---
id: kernels/moe_align_block_size/single_program
op: moe_align_block_size
category: Index
dtypes: [int32]
techniques: [histogram, exclusive-prefix-sum, stable-counting-sort, single-program-for-small-inputs, barrier-between-phases]
params:
  TILE: [2048, 4096, 8192]
  num_warps: [4, 8, 16]
summary: One program does it all - tl.histogram counts, padded exclusive prefix sum, expert_ids by segment-end comparison, sentinel fill, barrier, then a stable scatter whose in-chunk ranks come from an axis-0 cumsum of a one-hot [C, E] tile.
---
Every phase depends on the one before (the scatter needs every expert's segment start, which
needs every count), and at decode the whole input is at most 256 x 10 = 2560 pairs, so one
program with barriers beats any grid-wide synchronisation. Phase 1: per-chunk `tl.histogram` of
the expert ids. Phase 2: padded counts, their inclusive `tl.cumsum` gives segment ends, starts =
ends - padded; block b belongs to the number of experts whose segment ends at or before b*B
(experts with no pairs end where their predecessor does, so they never own a block); blocks
at or past the total get -1. Phase 3: the sentinel n everywhere, then `tl.debug_barrier()` so no
warp's sentinel store can land after another warp's scatter store to the same slot. Phase 4:
pairs in increasing flat index, C at a time; the rank of a pair among the earlier pairs of its
expert is the exclusive axis-0 cumsum of the one-hot tile, the expert's running base is picked
from the register vector through the same one-hot tile, so the order inside an expert is the
reference's stable order with no atomics. C = TILE / next_pow2(E): the axis-0 scan is staged in
shared memory and a [C, E] int32 tile above 8192 values did not fit on the H200 (playbook note).
For prefill inputs (up to 262144 pairs here) the serial chunk loop is long; the multi_pass
variant spreads counting and scattering over many programs.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"TILE": 8192, "num_warps": 8}


@triton.jit
def _align_one_program(ids_ptr, sorted_ptr, eid_ptr, ntok_ptr, n, E, max_len, n_blocks,
                       B: tl.constexpr, BE: tl.constexpr, C: tl.constexpr, CB: tl.constexpr):
    e = tl.arange(0, BE)
    counts = tl.zeros([BE], tl.int32)
    for s in range(0, n, C):
        o = s + tl.arange(0, C)
        m = o < n
        ids = tl.load(ids_ptr + o, mask=m, other=0)
        counts += tl.histogram(ids, BE, mask=m)
    padded = (counts + B - 1) // B * B
    ends = tl.cumsum(padded, axis=0)
    starts = ends - padded
    total = tl.sum(padded, axis=0)
    tl.store(ntok_ptr, total)
    for s in range(0, n_blocks, CB):
        blk = s + tl.arange(0, CB)
        owner = tl.sum(((ends[None, :] <= blk[:, None] * B) & (e < E)[None, :]).to(tl.int32), axis=1)
        owner = tl.where(blk * B < total, owner, -1)
        tl.store(eid_ptr + blk, owner, mask=blk < n_blocks)
    for s in range(0, max_len, C):
        o = s + tl.arange(0, C)
        tl.store(sorted_ptr + o, tl.zeros([C], tl.int32) + n, mask=o < max_len)
    tl.debug_barrier()
    base = starts
    for s in range(0, n, C):
        o = s + tl.arange(0, C)
        m = o < n
        ids = tl.load(ids_ptr + o, mask=m, other=-1)
        hot = (ids[:, None] == e[None, :]).to(tl.int32)          # masked lanes match no expert
        rank = tl.sum((tl.cumsum(hot, axis=0) - hot) * hot, axis=1)
        pos = tl.sum(hot * base[None, :], axis=1) + rank
        tl.store(sorted_ptr + pos, o, mask=m)
        base += tl.sum(hot, axis=0)


class ModelNew(nn.Module):
    def __init__(self, num_experts, block_size):
        super().__init__()
        self.num_experts = num_experts
        self.block_size = block_size

    def forward(self, topk_ids):
        ids = topk_ids.reshape(-1)
        if ids.dtype != torch.int32 or not ids.is_contiguous():
            raise ValueError("topk_ids must be contiguous int32")
        n, E, B = ids.numel(), self.num_experts, self.block_size
        max_len = n + min(E, n) * (B - 1)
        n_blocks = triton.cdiv(max_len, B)
        dev = ids.device
        sorted_ids = torch.empty(max_len, dtype=torch.int32, device=dev)
        expert_ids = torch.empty(n_blocks, dtype=torch.int32, device=dev)
        ntok = torch.empty(1, dtype=torch.int32, device=dev)
        be = triton.next_power_of_2(E)
        c = max(16, AKA_PARAMS["TILE"] // be)
        _align_one_program[(1,)](ids, sorted_ids, expert_ids, ntok, n, E, max_len, n_blocks,
                                 B=B, BE=be, C=c, CB=c, num_warps=AKA_PARAMS["num_warps"])
        return sorted_ids, expert_ids, ntok
