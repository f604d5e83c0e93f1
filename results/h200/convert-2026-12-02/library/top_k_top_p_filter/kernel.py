"""
---
id: kernels/top_k_top_p_filter/radix_split
op: top_k_top_p_filter
category: Index
dtypes: [float32]
techniques: [threshold-search-instead-of-sort, order-preserving-float-keys, histogram, split-reduction, deterministic-reduction, per-row-parameters, skip-disabled-filters]
params:
  TARGET_PROGS: [132, 264, 528]
  BLOCK: [256, 512, 1024]
  num_warps: [4, 8]
summary: Rows split over S programs each; both thresholds found by a fixed 8-pass, 4-bit radix select on order-preserving int32 keys (counts via tl.histogram for top-k, exp masses for top-p), one launch per digit, partial bucket totals reduced deterministically by the next launch; a last launch writes x or -inf.
---
The row-per-program search (pivot_search) leaves 1-64 rows on 1-64 SMs at decode. Here each row
is cut into S = ceil(TARGET_PROGS / B) slices (at most one per BLOCK elements, at most 64) and
every pass is a launch over (row, slice) programs, so a single 128k row still spreads over 132
SMs. The thresholds are the same as in pivot_search (t_k = largest key with count(key >= t) >=
k; T = largest key >= t_k with mass(key >= T) >= p * Z_k, masses exp(x - max) over the top-k
survivors; ties at both edges kept), but found by radix select, most significant 4-bit digit
first: a pass totals, per slice, the 16 buckets of the current digit among the entries that
match the prefix decided so far. The next launch sums the S partial rows in a fixed order
(every program of the row does the same small reduction, so there is no grid-wide sync and no
atomics, and runs are bit-reproducible), keeps the largest bucket b with above + sum(buckets >= b)
>= target, and adds the buckets above b to `above`. 8 digits x (top-k, top-p) + 1 write = 17
launches, whatever the data: fixed work per element instead of the data-dependent pass count of
a pivot search. Counts use tl.histogram (exact); masses a [BLOCK, 16] one-hot select-sum into a
register accumulator reduced once per program (64 fp32 per thread at BLOCK 1024 and 8 warps;
1024 at 4 warps spilled in an offline sm_90a compile, hence the BLOCK range). Z_k is
the total of the first top-p pass. Per-row k >= V or p >= 1 skips that filter's passes (their
programs exit after two scalar loads). The max for the masses comes out of the first top-k pass.
The fp32 sums run in another order than the reference's running sum (~1e-6 apart); the
benchmark inputs keep p >= 5e-5 from every decision.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {'TARGET_PROGS': 264, 'BLOCK': 1024, 'num_warps': 8}  # set by the offline proposer

_MAX_SPLIT = 64


@triton.jit
def _key(x):
    b = tl.where(x == 0.0, 0.0, x).to(tl.int32, bitcast=True)
    return tl.where(b < 0, b ^ 0x7FFFFFFF, b)


@triton.jit
def _decide(part_ptr, pfx_ptr, above_ptr, g, row, n_rows, S, target, SP: tl.constexpr):
    """Digit decision of pass g for one row, from the S partial bucket rows of pass g."""
    sp = tl.arange(0, SP)
    b16 = tl.arange(0, 16)
    base = g * n_rows + row                          # g may arrive as constexpr 1: no .to()
    h = tl.sum(tl.load(part_ptr + (base * S + sp[:, None]) * 16 + b16[None, :],
                       mask=(sp < S)[:, None], other=0.0), axis=0)
    pfx = tl.load(pfx_ptr + base)
    above = tl.load(above_ptr + base)
    suf = tl.sum(tl.where(b16[None, :] >= b16[:, None], h[None, :], 0.0), axis=1)
    b = tl.max(tl.where(above + suf >= target, b16, 0), axis=0)
    above = above + tl.sum(tl.where(b16 > b, h, 0.0), axis=0)
    pfx = pfx | (b << (28 - 4 * (g % 8)))
    return pfx, above


@triton.jit
def _zk(part_ptr, row, n_rows, S, SP: tl.constexpr):
    sp = tl.arange(0, SP)
    b16 = tl.arange(0, 16)
    base = 8 * n_rows + row.to(tl.int64)
    return tl.sum(tl.sum(tl.load(part_ptr + (base * S + sp[:, None]) * 16 + b16[None, :],
                                 mask=(sp < S)[:, None], other=0.0), axis=1), axis=0)


@triton.jit
def _radix_pass(x_ptr, out_ptr, k_ptr, p_ptr, part_ptr, pmax_ptr, pfx_ptr, above_ptr, tk_ptr, m_ptr,
                V, n_rows, S, SL, stride_x, stride_o, g, SHIFT,
                PHASE: tl.constexpr, FIRST: tl.constexpr, BLOCK: tl.constexpr, SP: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    s = tl.program_id(1)
    xrow = x_ptr + row * stride_x
    k = tl.maximum(tl.load(k_ptr + row).to(tl.int64), 1)
    p = tl.load(p_ptr + row).to(tl.float32)
    start = s * SL
    stop = tl.minimum(start + SL, V)
    b16 = tl.arange(0, 16)
    INT_MIN: tl.constexpr = -2147483648
    slot = g * n_rows + row
    if PHASE == 0:                                   # top-k digit g
        kf = k.to(tl.float32)
        active = k < V
        if FIRST:
            if active or p < 1.0:
                pfx = tl.full([], 0, tl.int32)
                if s == 0:
                    tl.store(pfx_ptr + slot, pfx)
                    tl.store(above_ptr + slot, 0.0)
                hist = tl.zeros([16], tl.int32)
                mx = tl.full([BLOCK], float("-inf"), tl.float32)
                for o0 in range(start, stop, BLOCK):
                    o = o0 + tl.arange(0, BLOCK)
                    m = o < stop
                    x = tl.load(xrow + o, mask=m, other=float("-inf"))
                    mx = tl.maximum(mx, x)
                    u = _key(x) ^ INT_MIN
                    hist += tl.histogram((u >> SHIFT) & 15, 16, mask=m)
                tl.store(part_ptr + (slot * S + s) * 16 + b16, hist.to(tl.float32))
                tl.store(pmax_ptr + row * S + s, tl.max(mx, axis=0))
        else:
            if active:
                pfx, above = _decide(part_ptr, pfx_ptr, above_ptr, g - 1, row, n_rows, S, kf, SP)
                if s == 0:
                    tl.store(pfx_ptr + slot, pfx)
                    tl.store(above_ptr + slot, above)
                hist = tl.zeros([16], tl.int32)
                for o0 in range(start, stop, BLOCK):
                    o = o0 + tl.arange(0, BLOCK)
                    m = o < stop
                    u = _key(tl.load(xrow + o, mask=m, other=0.0)) ^ INT_MIN
                    inp = m & (((u ^ pfx) >> (SHIFT + 4)) == 0)
                    hist += tl.histogram((u >> SHIFT) & 15, 16, mask=inp)
                tl.store(part_ptr + (slot * S + s) * 16 + b16, hist.to(tl.float32))
    elif PHASE == 1:                                 # top-p digit g - 8
        if FIRST:
            sp = tl.arange(0, SP)
            M = tl.max(tl.load(pmax_ptr + row * S + sp, mask=sp < S, other=float("-inf")), axis=0)
            tk = tl.full([], INT_MIN, tl.int32)
            if k < V:
                pk, _ = _decide(part_ptr, pfx_ptr, above_ptr, g - 1, row, n_rows, S, k.to(tl.float32), SP)
                tk = pk ^ INT_MIN
            if s == 0:
                tl.store(tk_ptr + row, tk)
                tl.store(m_ptr + row, M)
                tl.store(pfx_ptr + slot, 0)
                tl.store(above_ptr + slot, 0.0)
            if p < 1.0:
                acc = tl.zeros([BLOCK, 16], tl.float32)
                for o0 in range(start, stop, BLOCK):
                    o = o0 + tl.arange(0, BLOCK)
                    m = o < stop
                    x = tl.load(xrow + o, mask=m, other=float("-inf"))
                    key = _key(x)
                    w = tl.where(m & (key >= tk), tl.exp(x - M), 0.0)
                    d = ((key ^ INT_MIN) >> SHIFT) & 15
                    acc += tl.where(d[:, None] == b16[None, :], w[:, None], 0.0)
                tl.store(part_ptr + (slot * S + s) * 16 + b16, tl.sum(acc, axis=0))
        else:
            if p < 1.0:
                tk = tl.load(tk_ptr + row)
                M = tl.load(m_ptr + row)
                target = p * _zk(part_ptr, row, n_rows, S, SP)
                pfx, above = _decide(part_ptr, pfx_ptr, above_ptr, g - 1, row, n_rows, S, target, SP)
                if s == 0:
                    tl.store(pfx_ptr + slot, pfx)
                    tl.store(above_ptr + slot, above)
                acc = tl.zeros([BLOCK, 16], tl.float32)
                for o0 in range(start, stop, BLOCK):
                    o = o0 + tl.arange(0, BLOCK)
                    m = o < stop
                    x = tl.load(xrow + o, mask=m, other=float("-inf"))
                    key = _key(x)
                    u = key ^ INT_MIN
                    live = m & (key >= tk) & (((u ^ pfx) >> (SHIFT + 4)) == 0)
                    w = tl.where(live, tl.exp(x - M), 0.0)
                    d = (u >> SHIFT) & 15
                    acc += tl.where(d[:, None] == b16[None, :], w[:, None], 0.0)
                tl.store(part_ptr + (slot * S + s) * 16 + b16, tl.sum(acc, axis=0))
    else:                                            # write
        t = tl.load(tk_ptr + row)
        if p < 1.0:
            M = tl.load(m_ptr + row)
            target = p * _zk(part_ptr, row, n_rows, S, SP)
            pfx, _ = _decide(part_ptr, pfx_ptr, above_ptr, g - 1, row, n_rows, S, target, SP)
            t = tl.minimum(pfx ^ INT_MIN, _key(M))   # p <= 0 keeps only the maximum
        orow = out_ptr + row * stride_o
        for o0 in range(start, stop, BLOCK):
            o = o0 + tl.arange(0, BLOCK)
            m = o < stop
            x = tl.load(xrow + o, mask=m, other=float("-inf"))
            tl.store(orow + o, tl.where(_key(x) >= t, x, float("-inf")), mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits, top_k, top_p):
        if logits.dtype != torch.float32:
            raise ValueError("fp32 logits expected")
        x = logits if logits.stride(-1) == 1 else logits.contiguous()
        B, V = x.shape
        dev = x.device
        blk = AKA_PARAMS["BLOCK"]
        S = max(1, min(triton.cdiv(AKA_PARAMS["TARGET_PROGS"], B), triton.cdiv(V, blk), _MAX_SPLIT))
        SL = triton.cdiv(triton.cdiv(V, S), blk) * blk
        S = triton.cdiv(V, SL)
        out = torch.empty((B, V), dtype=x.dtype, device=dev)
        part = torch.empty((16, B, S, 16), dtype=torch.float32, device=dev)
        pmax = torch.empty((B, S), dtype=torch.float32, device=dev)
        pfx = torch.empty((16, B), dtype=torch.int32, device=dev)
        above = torch.empty((16, B), dtype=torch.float32, device=dev)
        tk = torch.empty(B, dtype=torch.int32, device=dev)
        mrow = torch.empty(B, dtype=torch.float32, device=dev)
        k, p = top_k.contiguous(), top_p.contiguous()
        sp = triton.next_power_of_2(S)
        nw = AKA_PARAMS["num_warps"]
        for g in range(17):
            _radix_pass[(B, S)](x, out, k, p, part, pmax, pfx, above, tk, mrow,
                                V, B, S, SL, x.stride(0), out.stride(0), g, 28 - 4 * (g % 8),
                                PHASE=min(g // 8, 2), FIRST=g in (0, 8), BLOCK=blk, SP=sp,
                                num_warps=nw)
        return out
