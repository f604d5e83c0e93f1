"""
---
id: kernels/gumbel_max_sample/split_argmax
op: gumbel_max_sample
category: Random
dtypes: [float32]
techniques: [gumbel-max, split-reduction, two-stage-reduction, per-lane-partial-reductions, argmax-first-index, int64-indexing, masking]
params:
  CHUNK: [4096, 8192, 16384, 32768]
  BLOCK: [1024, 2048]
  FAST_LOG: [0, 1]
  num_warps: [4, 8]
summary: Gumbel-max sampling as one streaming argmax of logits / T - log(q). Each row is cut into chunks (fewer and larger when the batch alone fills the GPU), one program per (row, chunk) keeps per-lane running maxima and their first indices; a second tiny launch merges a row's chunk winners, lowest index on ties. One chunk per row writes the token directly.
---
token[b] = argmax_v(logits[b, v] / T[b] - log(q[b, v])), q ~ Exp(1) given.

Design:
- Memory-bound: 8 bytes read per vocabulary entry (fp32 logits and noise), nothing written but
  the ids. At batch 64 x 128256 that is 65.7 MB, 13.7 us at 4.8 TB/s; at batch 1 (1 MB) the
  launch dominates.
- Parallelism: one program per row gives 1-16 programs at decode batch sizes, so each row is cut
  into chunks of CHUNK entries, halved on the host (down to BLOCK) until batch * chunks >= 264
  (two programs per SM on the 132-SM H200). Large batches keep large chunks: fewer partials.
- Within a program, [BLOCK] lanes each keep a running maximum and the index where it was first
  reached (strict `>`, and lanes see increasing indices), so the loop has no cross-lane
  reduction; one at the end: the maximum, then the smallest index holding it. Chunk winners
  merge the same way in `_merge`, so equal maxima resolve to the lowest index as torch.argmax.
- The softmax is never formed: argmax is invariant to the normaliser, and -log(q) is the
  Gumbel noise. Scaled by log2(e) it is still the same argmax: s = x * (log2(e) / T) - log2(q),
  one multiply by a per-program constant in place of a division (the inputs keep a 1e-3 margin
  at the winner, so approximate fp32 arithmetic cannot change the token).
- Instruction issue, not DRAM, is what an accurate log costs here. `tl.log` / `tl.log2` compile to
  libdevice's polynomial (offline sm_90a SASS at 256 x 128256: 307 instructions in the loop, 96
  FFMA, for 8 values a thread, about 38 a value). The H200 streams 2.3 values per clock per SM (8
  bytes each at 4.8 TB/s), so that is 2.7 of the 4 warp instructions an SM can issue per clock, and
  the kernel stopped at 0.75 of the roofline on the big batches (kb verify, 2026-12-04). FAST_LOG 1
  takes lg2.approx.f32 (`libdevice.fast_log2f`, one MUFU.LG2, about 2^-22 relative error): 84
  instructions in the loop, about 10 a value. The CPU interpreter has no fast_log2f, so under it
  the kernel keeps `tl.log2`. Not timed on a GPU yet. Its one edge: a subnormal q (below 1.2e-38,
  probability ~1e-38 for Exp(1) noise) may be flushed to 0 and win as -log 0 = inf, where the
  accurate log gives a large finite score; q = 0 wins in the reference too.
- Masked lanes load -inf logits (and q = 1), so they never win; int64 row offsets (256 rows x
  256000 entries is 6.6e7, but strides of views can be larger).
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl
from triton.language.extra import libdevice

AKA_PARAMS = {"CHUNK": 8192, "BLOCK": 1024, "FAST_LOG": 1, "num_warps": 4}

TARGET_PROGRAMS = 264        # 2 programs per SM on the 132-SM H200


@triton.jit
def _chunk_argmax(x_ptr, t_ptr, q_ptr, val_ptr, idx_ptr, out_ptr, V, s_x, s_q, n_chunks,
                  CHUNK: tl.constexpr, BLOCK: tl.constexpr, DIRECT: tl.constexpr, FAST_LOG: tl.constexpr):
    row = tl.program_id(0)
    c = tl.program_id(1)
    scale = 1.4426950408889634 / tl.load(t_ptr + row)      # log2(e) / T, once per program
    xr = x_ptr + row.to(tl.int64) * s_x
    qr = q_ptr + row.to(tl.int64) * s_q
    lanes = tl.arange(0, BLOCK)
    best = tl.full((BLOCK,), float("-inf"), dtype=tl.float32)
    where = tl.zeros((BLOCK,), dtype=tl.int32)
    lo = c * CHUNK
    for start in range(lo, tl.minimum(lo + CHUNK, V), BLOCK):
        v = start + lanes
        m = v < V
        x = tl.load(xr + v, mask=m, other=float("-inf")).to(tl.float32)
        q = tl.load(qr + v, mask=m, other=1.0).to(tl.float32)
        if FAST_LOG:
            lg = libdevice.fast_log2f(q)              # one MUFU.LG2 (lg2.approx.f32)
        else:
            lg = tl.log2(q)                           # libdevice's polynomial: ~12 FFMA a value
        s = x * scale - lg
        take = s > best
        best = tl.where(take, s, best)
        where = tl.where(take, v, where)
    top = tl.max(best, axis=0)
    first = tl.min(tl.where(best == top, where, 2147483647), axis=0)
    if DIRECT:
        tl.store(out_ptr + row, first.to(tl.int64))
    else:
        tl.store(val_ptr + row * n_chunks + c, top)
        tl.store(idx_ptr + row * n_chunks + c, first)


@triton.jit
def _merge(val_ptr, idx_ptr, out_ptr, n_chunks, NC_PAD: tl.constexpr):
    row = tl.program_id(0)
    c = tl.arange(0, NC_PAD)
    m = c < n_chunks
    vals = tl.load(val_ptr + row * n_chunks + c, mask=m, other=float("-inf"))
    idxs = tl.load(idx_ptr + row * n_chunks + c, mask=m, other=2147483647)
    top = tl.max(vals, axis=0)
    first = tl.min(tl.where((vals == top) & m, idxs, 2147483647), axis=0)
    tl.store(out_ptr + row, first.to(tl.int64))


# compiled for a GPU (a JITFunction), not run by the CPU interpreter, which has no fast_log2f
_COMPILED = isinstance(_chunk_argmax, triton.JITFunction)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits, temperature, exp_noise):
        B, V = logits.shape
        p = AKA_PARAMS
        block = p["BLOCK"]
        chunk = max(p["CHUNK"], block)
        while chunk > block and B * triton.cdiv(V, chunk) < TARGET_PROGRAMS:
            chunk //= 2
        n_chunks = triton.cdiv(V, chunk)
        out = torch.empty(B, dtype=torch.int64, device=logits.device)
        direct = n_chunks == 1
        vals = out if direct else torch.empty(B * n_chunks, dtype=torch.float32, device=logits.device)
        idxs = out if direct else torch.empty(B * n_chunks, dtype=torch.int32, device=logits.device)
        _chunk_argmax[(B, n_chunks)](logits, temperature, exp_noise, vals, idxs, out, V,
                                     logits.stride(0), exp_noise.stride(0), n_chunks,
                                     CHUNK=chunk, BLOCK=block, DIRECT=direct,
                                     FAST_LOG=bool(p["FAST_LOG"]) and _COMPILED, num_warps=p["num_warps"])
        if not direct:
            _merge[(B,)](vals, idxs, out, n_chunks, NC_PAD=max(16, triton.next_power_of_2(n_chunks)),
                         num_warps=4)
        return out
