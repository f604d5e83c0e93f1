"""
---
id: kernels/top_k_top_p_filter/pivot_search
op: top_k_top_p_filter
category: Index
dtypes: [float32]
techniques: [threshold-search-instead-of-sort, order-preserving-float-keys, k-ary-pivot-search, l2-resident-multipass, per-row-parameters, skip-disabled-filters]
params:
  BLOCK: [256, 512, 1024]
  NP: [8, 16, 32]
  num_warps: [4, 8, 16]
summary: One program per row, no sort - k-ary searches over order-preserving int32 keys for the top-k threshold (counts) and then the top-p threshold (exp masses over the top-k survivors); a last pass writes x or -inf.
---
The kept set is a prefix of the descending ranking, so the output is `where(x >= T, x, -inf)` for
one threshold T per row. Each fp32 maps to an int32 key with the same order (negative values get
their magnitude bits flipped; -0.0 becomes +0.0 first because the reference compares floats), and
both thresholds are found exactly in key space:
- top-k (k < V): t_k = the largest key t with count(key >= t) >= k, i.e. the k-th largest value,
  so every value tied with it survives. A pass counts the row against NP pivots spread evenly
  over the open interval (lo, hi) kept with count(lo) >= k > count(hi); 2**32 keys shrink by
  NP + 1 per pass (8 passes at NP 16). The row max M comes out of the same passes.
- top-p (p < 1): with e = exp(x - M) over survivors (key >= t_k), T = the largest key t with
  mass(key >= t) >= p * Z_k. Values above T then hold < p of the mass and T itself is the
  first value whose mass-above is < p but whose inclusion reaches p: the reference's
  exclusive-cumsum rule, ties at the edge kept. Z_k is summed in the first top-p pass (the
  live total), so it costs no extra pass. p <= 0 keeps only the maximum, as the reference's
  clamp does.
Disabled filters (k >= V, p >= 1) skip their searches per row. Each pass keeps a [BLOCK, NP]
register accumulator and reduces it once at the end, so the inner loop is compare-select-add
with no cross-thread traffic; BLOCK x NP / (32 x num_warps) values per thread (64 at the
defaults). Counts are fp32 (exact to 2**24 > V). The row (0.5-1 MB) is re-read once per pass,
mostly from L2. The reference's fp32 running sum and these per-lane sums differ by ~1e-6, and the
benchmark inputs keep p at least half an edge-token probability (>= 5e-5) away from any
decision, so both land on the same side.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"BLOCK": 1024, "NP": 16, "num_warps": 8}


@triton.jit
def _key(x):
    b = tl.where(x == 0.0, 0.0, x).to(tl.int32, bitcast=True)
    return tl.where(b < 0, b ^ 0x7FFFFFFF, b)


@triton.jit
def _pivot_pass(row, V, piv, floor_key, M, MASS: tl.constexpr, BLOCK: tl.constexpr, NP: tl.constexpr):
    """Per pivot: count (or exp mass) of entries with key >= pivot among key >= floor_key;
    also the live total and the row max."""
    acc = tl.zeros([BLOCK, NP], tl.float32)
    live_tot = tl.zeros([BLOCK], tl.float32)
    mx = tl.full([BLOCK], float("-inf"), tl.float32)
    for s in range(0, V, BLOCK):
        o = s + tl.arange(0, BLOCK)
        m = o < V
        x = tl.load(row + o, mask=m, other=float("-inf"))
        key = _key(x)
        live = m & (key >= floor_key)
        if MASS:
            w = tl.where(live, tl.exp(x - M), 0.0)
        else:
            w = tl.where(live, 1.0, 0.0)
        acc += tl.where(key[:, None] >= piv[None, :], w[:, None], 0.0)
        live_tot += w
        mx = tl.maximum(mx, x)
    return tl.sum(acc, axis=0), tl.sum(live_tot, axis=0), tl.max(mx, axis=0)


@triton.jit
def _narrow(lo, hi, piv, ok):
    lo = tl.maximum(lo, tl.max(tl.where(ok, piv, lo), axis=0))
    hi = tl.minimum(hi, tl.min(tl.where(ok, hi, piv), axis=0))
    return lo, hi


@triton.jit
def _top_k_top_p_rows(x_ptr, out_ptr, k_ptr, p_ptr, V, stride_x, stride_o,
                      BLOCK: tl.constexpr, NP: tl.constexpr):
    r = tl.program_id(0).to(tl.int64)
    row = x_ptr + r * stride_x
    k = tl.maximum(tl.load(k_ptr + r).to(tl.int64), 1)
    p = tl.load(p_ptr + r).to(tl.float32)
    j = tl.arange(0, NP).to(tl.int64) + 1
    INT_MIN: tl.constexpr = -2147483648
    t = tl.full([], INT_MIN, tl.int64)
    M = tl.full([], float("-inf"), tl.float32)
    if k < V:
        lo = tl.full([], INT_MIN, tl.int64)          # count(lo) = V >= k
        hi = tl.full([], 2147483648, tl.int64)       # count(hi) = 0 < k
        while hi - lo > 1:
            piv = lo + (hi - lo) * j // (NP + 1)
            cnt, _, mx = _pivot_pass(row, V, piv.to(tl.int32), INT_MIN, 0.0, False, BLOCK, NP)
            M = tl.maximum(M, mx)
            lo, hi = _narrow(lo, hi, piv, cnt >= k.to(tl.float32))
        t = lo
    if p < 1.0:
        if M == float("-inf"):                        # top-k was off: the max still needed
            mxv = tl.full([BLOCK], float("-inf"), tl.float32)
            for s in range(0, V, BLOCK):
                o = s + tl.arange(0, BLOCK)
                mxv = tl.maximum(mxv, tl.load(row + o, mask=o < V, other=float("-inf")))
            M = tl.max(mxv, axis=0)
        key_m = _key(M).to(tl.int64)
        tk = t.to(tl.int32)
        lo = t                                        # mass(lo) = Z_k >= p * Z_k
        hi = key_m + 1                                # mass(hi) = 0
        piv = lo + (hi - lo) * j // (NP + 1)
        mass, zk, _ = _pivot_pass(row, V, piv.to(tl.int32), tk, M, True, BLOCK, NP)
        target = p * zk
        if target > 0.0:
            lo, hi = _narrow(lo, hi, piv, mass >= target)
            while hi - lo > 1:
                piv = lo + (hi - lo) * j // (NP + 1)
                mass, _, _ = _pivot_pass(row, V, piv.to(tl.int32), tk, M, True, BLOCK, NP)
                lo, hi = _narrow(lo, hi, piv, mass >= target)
            t = lo
        else:                                         # p <= 0: only the maximum survives
            t = key_m
    thr = t.to(tl.int32)
    orow = out_ptr + r * stride_o
    for s in range(0, V, BLOCK):
        o = s + tl.arange(0, BLOCK)
        m = o < V
        x = tl.load(row + o, mask=m, other=float("-inf"))
        tl.store(orow + o, tl.where(_key(x) >= thr, x, float("-inf")), mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits, top_k, top_p):
        if logits.dtype != torch.float32:
            raise ValueError("fp32 logits expected")
        x = logits if logits.stride(-1) == 1 else logits.contiguous()
        B, V = x.shape
        out = torch.empty((B, V), dtype=x.dtype, device=x.device)
        _top_k_top_p_rows[(B,)](x, out, top_k.contiguous(), top_p.contiguous(), V,
                                x.stride(0), out.stride(0), BLOCK=AKA_PARAMS["BLOCK"],
                                NP=AKA_PARAMS["NP"], num_warps=AKA_PARAMS["num_warps"])
        return out
