"""
---
id: kernels/top_k_top_p_filter/tail_scatter
op: top_k_top_p_filter
category: Index
dtypes: [float32]
techniques: [threshold-search-instead-of-sort, candidate-compaction, histogram, online-softmax, split-reduction, per-row-parameters, skip-disabled-filters, atomic-compaction]
params:
  TARGET_PROGS: [264, 528, 1056]
  BLOCK: [1024, 2048, 4096]
  BINS: [64, 128, 256]
  CAP: [2048, 4096]
  num_warps: [4, 8]
summary: tail_compact's six launches with the two loops that dominated its instruction count made cheap. The histogram has 128 bins of distance below the row max (not 1024), and the compaction places each candidate with its own atomic increment of the row's counter (no block-wide count and prefix sum per tile). The finish is unchanged, so the thresholds do not depend on where compaction put each candidate.
---
Why a second kernel. tail_compact reads each row 4 times and writes it once, yet ran at 0.008-0.085
of the datasheet roofline on an H100 (956 us at 256 x 128k, where its bytes take about 200 us;
results/h100/device-2026-12-06/topk_side_by_side.md). Its SASS, read offline
(`aka kb compile-check --op top_k_top_p_filter --kernel tail_compact --shapes 2`), shows where its
time goes: its loops issue far more instructions than its bytes need. Per 2048-element trip of 8
warps, the loops run:

| launch | tail_compact | tail_scatter |
|---|---|---|
| _stats | 157 | 157 |
| _hist | 1327 (1024 bins) | 419 (128 bins) |
| _compact | 705 | 273 |
| _write | 148 | 148 |

Each warp handles 256 elements a trip, so an element costs 2337 / 256 = 9.1 issue slots; a copy
costs well under one. A 128k row then takes 1.2M issues, 170 us of one SM at its full 4 a clock
(1.76 GHz). 256 rows over 132 SMs are about 2 rows an SM: 340 us at full issue, twice that at half,
against the 956 us measured.
- Triton 3.6 lowers `tl.histogram` to a ballot per bit of the bin index, then a popcount for
  every bin a lane owns (bins / 32 of them), per element. Its cost grows with the bin count:
  377, 419, 666, 860 and 1327 instructions a trip for 64 to 1024 bins.
- tail_compact's compaction counted each tile's candidates with a block-wide sum. It placed them
  with a block-wide prefix sum and one atomic a tile. That is a cross-warp scan over 2048
  elements every trip, although a row holds at most a few thousand candidates among 128k.

What changed:
1. BINS 128: bins of 0.5 below the max. The bins only choose which values to compact. The
   thresholds come from the finish's bisection over the compacted values, so coarser bins cost
   more candidates, not accuracy.
   - Top-k: at most k plus one bin's population. With the bench's N(0, 5^2) logits, about 300 sit
     near the k-th value.
   - Top-p: each bin's mass is known only within a factor e^0.5 (e^(1/16) at 1024 bins). With
     tail_compact's bound alone (the candidate bins end where the sum of the bins' least masses
     reaches p * Z) a peaked row never got there: the max itself counts as e^-0.5 of its mass. In a
     CPU replay of the bench's inputs (256 x 128k), 24 of 256 rows fell to the whole-row
     bisection. The mass of bins <= j is also at least Z less the most that the bins after j can
     hold (count x e^(-i w)). With the larger of the two bounds no row of those inputs falls back,
     at 64, 128 or 256 bins, and at most 1267 values are compacted (128 bins).
   - A row whose candidates exceed CAP still takes the exact whole-row bisection (mode 2). Flat
     rows do.
2. Compaction by per-element atomics. Every selected element adds 1 to the row's counter with
   `tl.atomic_add(..., mask=sel)` and stores at the old value. Candidates land in an order that
   varies from run to run. tail_compact's finish already sums masses in 2^-40 fixed point and
   counts keys, both independent of order, so the output is the same in every run.

The compaction's atomics are warp-aggregated by the compiler (a popcount of the lanes that add and
one ATOMG for them), 8 a trip.

The prediction, before any GPU run: the loops' instructions fall from 2337 to 997 a trip (2.3x).
If issue stays the limit, 256 x 128k should drop from 956 us toward 400-450 us on the H100, about
0.2 of the roofline.

Measured on an H100, 2026-12-06 (results/h100/device-2026-12-06b/):
- Each launch timed alone (scripts/probe_kernel_launches.py; not harness verdicts):

  | launch, us | 256 x 128k: tail_compact | tail_scatter | 512 x 152k: tail_compact | tail_scatter |
  |---|---|---|---|---|
  | _stats | 90.7 | 79.9 | 138.9 | 143.4 |
  | _hist | 657.5 | 109.3 | 1477.4 | 241.7 |
  | _compact | 150.0 | 62.3 | 332.6 | 155.4 |
  | _finish | 27.5 | 27.8 | 1197.9 | 46.9 |
  | _write | 88.7 | 88.9 | 214.9 | 214.9 |
  | forward | 1024.6 | 379.6 | 3383.8 | 816.3 |

  - The histogram was the bottleneck the SASS count pointed to (6.0x faster at 128 bins).
  - At 512 x 152k, tail_compact's finish took 1.2 ms: rows whose one-sided bound failed went to
    the whole-row bisection even at 1024 bins. The two-sided bound sent none there (47 us).
  - BINS 64 was 4% faster again (365.4 and 802.1 us), and BINS 256 slower (422.7, 929.5).
- Harness (kb verify, all 14 shapes, beside radix_split and pivot_search in one run): pass.
  - 6.06x radix_split (geomean, 2.05x to 8.53x).
  - 5.61x torch.compile on the 5 shapes compile was timed on.
  - 337.6 us at 256 x 128k, 0.23 of the datasheet roofline; 0.17-0.25 on every shape with 64
    rows or more, 0.11 at 16 rows and 0.15 at 32.
- Against tail_compact's records from the morning's run (another H100 of the same model):
  2.44x geomean, 2.8-2.9x on the large shapes.

The rest is tail_compact's design (its docstring has the passes, the bin arithmetic and the mass
bounds):
1. stats: each slice's max and softmax sum.
2. hist: a histogram of distance below the max.
3. select: the candidate bins, and mode 1 (compact) or mode 2 (whole-row bisection).
4. compact: the candidates, into the row's CAP buffer.
5. finish: both thresholds by bisection over order-preserving int32 keys, with fixed-point masses.
6. write: x or -inf.

Correctness notes:
- d = M - x is one fp32 subtraction and the scaling by BINS / 64 is exact (a power of two), so
  passes 2 and 4 place every entry in the same bin.
- The fp32 sums run in another order than the reference's running sum (~1e-6 apart). The
  benchmark inputs keep p at least 5e-5 from every decision.
- p <= 0 keeps only the maximum, as the reference's clamp does.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"TARGET_PROGS": 528, "BLOCK": 2048, "BINS": 128, "CAP": 4096, "num_warps": 8}

_MAX_SPLIT = 64
_SPAN = 64.0          # distances below the row max that the bins resolve; the last bin takes the rest
_P_SLACK = 1.0001     # Z_all from per-lane partial sums is within ~1e-6 of any other order
_HEAD_SLACK = 1e-4    # Z - (an fp32 sum of <= BINS bounds, <= 1.65 Z): worst case 1.3e-5 Z off at 128 bins


@triton.jit
def _key(x):
    """Order-preserving int32 of an fp32 (-0.0 and 0.0 share a key)."""
    b = tl.where(x == 0.0, 0.0, x).to(tl.int32, bitcast=True)
    return tl.where(b < 0, b ^ 0x7FFFFFFF, b)


@triton.jit
def _unkey(t):
    b = tl.where(t < 0, t ^ 0x7FFFFFFF, t)
    return b.to(tl.float32, bitcast=True)


@triton.jit
def _slice(s, SL, V):
    """Elements [start, stop) of a row that slice s covers."""
    start = s * SL
    return start, tl.minimum(start + SL, V)


@triton.jit
def _row_max(pm_ptr, row, S, SP: tl.constexpr):
    sp = tl.arange(0, SP)
    return tl.max(tl.load(pm_ptr + row * S + sp, mask=sp < S, other=float("-inf")), axis=0)


@triton.jit
def _bins(x, M, SCALE: tl.constexpr, BINS: tl.constexpr):
    d = tl.where(x > float("-inf"), (M - x) * SCALE, BINS - 1.0)
    return tl.minimum(d, BINS - 1.0).to(tl.int32)


@triton.jit
def _stats(x_ptr, stride_x, k_ptr, p_ptr, pm_ptr, pz_ptr, hist_ptr, V, SL, S,
           BLOCK: tl.constexpr, BINS: tl.constexpr):
    s = tl.program_id(0)
    row = tl.program_id(1)
    if s == 0:                                        # the row's histogram and counter, zeroed here
        nb = tl.arange(0, BINS)
        tl.store(hist_ptr + row * (BINS + 1) + nb, tl.zeros([BINS], tl.int32))
        tl.store(hist_ptr + row * (BINS + 1) + BINS, 0)
    k = tl.load(k_ptr + row)
    p = tl.load(p_ptr + row)
    if (k < V) | (p < 1.0):
        xrow = x_ptr + row.to(tl.int64) * stride_x
        start, stop = _slice(s, SL, V)
        mx = tl.full([BLOCK], float("-inf"), tl.float32)
        z = tl.zeros([BLOCK], tl.float32)
        for o0 in range(start, stop, BLOCK):
            o = o0 + tl.arange(0, BLOCK)
            x = tl.load(xrow + o, mask=o < stop, other=float("-inf"))
            nm = tl.maximum(mx, x)
            live = nm > float("-inf")
            z = tl.where(live, z * tl.exp(mx - nm) + tl.exp(x - nm), 0.0)
            mx = nm
        m = tl.max(mx, axis=0)
        zs = tl.sum(tl.where(mx > float("-inf"), z * tl.exp(mx - m), 0.0), axis=0)
        tl.store(pm_ptr + row * S + s, m)
        tl.store(pz_ptr + row * S + s, zs)


@triton.jit
def _hist(x_ptr, stride_x, k_ptr, p_ptr, pm_ptr, hist_ptr, V, SL, S,
          BLOCK: tl.constexpr, BINS: tl.constexpr, SCALE: tl.constexpr, SP: tl.constexpr):
    s = tl.program_id(0)
    row = tl.program_id(1)
    k = tl.load(k_ptr + row)
    p = tl.load(p_ptr + row)
    if (k < V) | (p < 1.0):
        M = _row_max(pm_ptr, row, S, SP)
        xrow = x_ptr + row.to(tl.int64) * stride_x
        start, stop = _slice(s, SL, V)
        h = tl.zeros([BINS], tl.int32)
        for o0 in range(start, stop, BLOCK):
            o = o0 + tl.arange(0, BLOCK)
            m = o < stop
            x = tl.load(xrow + o, mask=m, other=float("-inf"))
            h += tl.histogram(_bins(x, M, SCALE, BINS), BINS, mask=m)
        nb = tl.arange(0, BINS)
        tl.atomic_add(hist_ptr + row * (BINS + 1) + nb, h, mask=h > 0)


@triton.jit
def _select(k_ptr, p_ptr, pm_ptr, pz_ptr, hist_ptr, info_ptr, mz_ptr, V, S,
            BINS: tl.constexpr, SCALE: tl.constexpr, CAP: tl.constexpr, SP: tl.constexpr, P_SLACK: tl.constexpr,
            HEAD_SLACK: tl.constexpr):
    row = tl.program_id(0)
    k = tl.minimum(tl.maximum(tl.load(k_ptr + row), 1), V)
    p = tl.load(p_ptr + row)
    use_k = k < V
    mode = tl.full([], 0, tl.int32)
    bc = tl.full([], 0, tl.int32)
    n = tl.full([], 0, tl.int32)
    if use_k | (p < 1.0):
        sp = tl.arange(0, SP)
        pm = tl.load(pm_ptr + row * S + sp, mask=sp < S, other=float("-inf"))
        pz = tl.load(pz_ptr + row * S + sp, mask=sp < S, other=0.0)
        M = tl.max(pm, axis=0)
        Z = tl.sum(tl.where(pm > float("-inf"), pz * tl.exp(pm - M), 0.0), axis=0)
        i = tl.arange(0, BINS)
        c = tl.load(hist_ptr + row * (BINS + 1) + i)
        cum = tl.cumsum(c, axis=0)
        if use_k:
            bc = tl.min(tl.where(cum >= k, i, BINS - 1), axis=0)
        else:
            # the mass of bins <= j bounded below twice: by each bin's least mass, and by Z less the
            # most the bins after j can hold. The second is what bins of 0.5 need: the first counts
            # the max's own mass as e^-0.5, and a peaked row never reached p * Z with it alone
            cf = c.to(tl.float32)
            lb = tl.where(i < BINS - 1, cf * tl.exp(-(i + 1).to(tl.float32) / SCALE), 0.0)
            ub = cf * tl.exp(-i.to(tl.float32) / SCALE)
            after = tl.cumsum(ub, axis=0, reverse=True) - ub    # the bins after j, summed from the far end
            head = tl.maximum(tl.cumsum(lb, axis=0), Z - after) - Z * HEAD_SLACK
            bc = tl.min(tl.where(head >= p * Z * P_SLACK, i, BINS - 1), axis=0)
        n = tl.sum(tl.where(i <= bc, c, 0), axis=0)
        mode = tl.where((bc < BINS - 1) & (n <= CAP), 1, 2)
        tl.store(mz_ptr + row * 2, M)
        tl.store(mz_ptr + row * 2 + 1, Z)
    tl.store(info_ptr + row * 4, mode)
    tl.store(info_ptr + row * 4 + 1, bc)
    tl.store(info_ptr + row * 4 + 2, n)


@triton.jit
def _compact(x_ptr, stride_x, info_ptr, mz_ptr, hist_ptr, cand_ptr, V, SL,
             BLOCK: tl.constexpr, BINS: tl.constexpr, SCALE: tl.constexpr, CAP: tl.constexpr):
    s = tl.program_id(0)
    row = tl.program_id(1)
    mode = tl.load(info_ptr + row * 4)
    if mode == 1:
        bc = tl.load(info_ptr + row * 4 + 1)
        M = tl.load(mz_ptr + row * 2)
        xrow = x_ptr + row.to(tl.int64) * stride_x
        crow = cand_ptr + row.to(tl.int64) * CAP
        counter = hist_ptr + row * (BINS + 1) + BINS + tl.zeros([BLOCK], tl.int32)
        start, stop = _slice(s, SL, V)
        for o0 in range(start, stop, BLOCK):
            o = o0 + tl.arange(0, BLOCK)
            m = o < stop
            x = tl.load(xrow + o, mask=m, other=float("-inf"))
            sel = m & (_bins(x, M, SCALE, BINS) <= bc)
            pos = tl.atomic_add(counter, 1, mask=sel, sem="relaxed")   # one slot per candidate
            tl.store(crow + pos, x, mask=sel & (pos < CAP))


@triton.jit
def _count_ge(xrow, V, t, BLOCK: tl.constexpr):
    acc = tl.zeros([BLOCK], tl.int32)
    for o0 in range(0, V, BLOCK):
        o = o0 + tl.arange(0, BLOCK)
        x = tl.load(xrow + o, mask=o < V, other=float("-inf"))
        acc += ((o < V) & (_key(x) >= t)).to(tl.int32)
    return tl.sum(acc, axis=0)


@triton.jit
def _mass_ge(xrow, V, t, M, BLOCK: tl.constexpr):
    acc = tl.zeros([BLOCK], tl.float32)
    for o0 in range(0, V, BLOCK):
        o = o0 + tl.arange(0, BLOCK)
        x = tl.load(xrow + o, mask=o < V, other=float("-inf"))
        acc += tl.where((o < V) & (_key(x) >= t), tl.exp(x - M), 0.0)
    return tl.sum(acc, axis=0)


@triton.jit
def _finish(x_ptr, stride_x, k_ptr, p_ptr, info_ptr, mz_ptr, cand_ptr, thr_ptr, V,
            BLOCK: tl.constexpr, CAP: tl.constexpr, TAIL: tl.constexpr, FIX: tl.constexpr):
    row = tl.program_id(0)
    k = tl.minimum(tl.maximum(tl.load(k_ptr + row), 1), V)
    p = tl.load(p_ptr + row)
    use_k = k < V
    use_p = p < 1.0
    mode = tl.load(info_ptr + row * 4)
    thr = tl.full([], float("-inf"), tl.float32)
    if mode == 1:                                     # the tail, in registers
        n = tl.load(info_ptr + row * 4 + 2)
        M = tl.load(mz_ptr + row * 2)
        j = tl.arange(0, TAIL)                        # TAIL >= n: min(CAP, V) rounded up to a power of 2
        live = j < n
        v = tl.load(cand_ptr + row.to(tl.int64) * CAP + j, mask=live, other=float("-inf"))
        keys = _key(v)
        # masses in 2^-40 fixed point: integer sums do not depend on the order compaction left
        w = tl.where(live, tl.exp(v - M) * FIX, 0.0).to(tl.int64)
        top = _key(M).to(tl.int64)
        tk = tl.min(tl.where(live, keys, 2147483647), axis=0).to(tl.int64)   # n >= k: it qualifies
        if use_k:
            lo = tk
            hi = top
            while lo < hi:                            # largest t with count(key >= t) >= k
                mid = lo + (hi - lo + 1) // 2
                if tl.sum((live & (keys >= mid.to(tl.int32))).to(tl.int32), axis=0) >= k:
                    lo = mid
                else:
                    hi = mid - 1
            tk = lo
            Z = tl.sum(tl.where(keys >= tk.to(tl.int32), w, 0), axis=0).to(tl.float64)
        else:
            Z = tl.load(mz_ptr + row * 2 + 1).to(tl.float64) * FIX
        t = tk
        if use_p:                                     # the candidates hold >= p * Z: tk qualifies
            target = p.to(tl.float64) * Z
            lo = tk
            hi = top
            while lo < hi:                            # largest t >= t_k with mass(key >= t) >= p * Z_k
                mid = lo + (hi - lo + 1) // 2
                if tl.sum(tl.where(keys >= mid.to(tl.int32), w, 0), axis=0).to(tl.float64) >= target:
                    lo = mid
                else:
                    hi = mid - 1
            t = lo
        thr = _unkey(t.to(tl.int32))
    elif mode == 2:
        M = tl.load(mz_ptr + row * 2)
        xrow = x_ptr + row.to(tl.int64) * stride_x
        tk = tl.full([], -2147483648, tl.int64)
        top = _key(M).to(tl.int64)
        if use_k:
            lo = tk
            hi = top
            while lo < hi:                            # largest t with count(key >= t) >= k
                mid = lo + (hi - lo + 1) // 2
                if _count_ge(xrow, V, mid.to(tl.int32), BLOCK) >= k:
                    lo = mid
                else:
                    hi = mid - 1
            tk = lo
            Z = _mass_ge(xrow, V, tk.to(tl.int32), M, BLOCK)
        else:
            Z = tl.load(mz_ptr + row * 2 + 1)
        t = tk
        if use_p:
            lo = tk
            hi = top
            while lo < hi:                            # largest t >= t_k with mass(key >= t) >= p * Z_k
                mid = lo + (hi - lo + 1) // 2
                if _mass_ge(xrow, V, mid.to(tl.int32), M, BLOCK) >= p * Z:
                    lo = mid
                else:
                    hi = mid - 1
            t = lo
        thr = tl.where(use_k | use_p, _unkey(t.to(tl.int32)), float("-inf"))
    tl.store(thr_ptr + row, thr)


@triton.jit
def _write(x_ptr, stride_x, out_ptr, stride_o, thr_ptr, V, SL, BLOCK: tl.constexpr):
    s = tl.program_id(0)
    row = tl.program_id(1)
    thr = tl.load(thr_ptr + row)
    xrow = x_ptr + row.to(tl.int64) * stride_x
    orow = out_ptr + row.to(tl.int64) * stride_o
    start, stop = _slice(s, SL, V)
    for o0 in range(start, stop, BLOCK):
        o = o0 + tl.arange(0, BLOCK)
        m = o < stop
        x = tl.load(xrow + o, mask=m, other=float("-inf"))
        tl.store(orow + o, tl.where(x >= thr, x, float("-inf")), mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits, top_k, top_p):
        if logits.dtype != torch.float32:
            raise ValueError("fp32 logits expected")
        x = logits if logits.stride(-1) == 1 else logits.contiguous()
        B, V = x.shape
        dev = x.device
        blk, bins, cap = AKA_PARAMS["BLOCK"], AKA_PARAMS["BINS"], AKA_PARAMS["CAP"]
        nw = AKA_PARAMS["num_warps"]
        S = max(1, min(triton.cdiv(AKA_PARAMS["TARGET_PROGS"], B), triton.cdiv(V, blk), _MAX_SPLIT))
        SL = triton.cdiv(triton.cdiv(V, S), blk) * blk
        S = triton.cdiv(V, SL)
        SP = triton.next_power_of_2(S)
        scale = bins / _SPAN
        k = top_k.contiguous()
        p = top_p.to(torch.float32).contiguous()
        out = torch.empty((B, V), dtype=x.dtype, device=dev)
        pm = torch.empty((B, S), dtype=torch.float32, device=dev)
        pz = torch.empty((B, S), dtype=torch.float32, device=dev)
        hist = torch.empty((B, bins + 1), dtype=torch.int32, device=dev)   # zeroed by _stats
        info = torch.empty((B, 4), dtype=torch.int32, device=dev)
        mz = torch.empty((B, 2), dtype=torch.float32, device=dev)
        cand = torch.empty((B, cap), dtype=torch.float32, device=dev)
        thr = torch.empty((B,), dtype=torch.float32, device=dev)
        sx = x.stride(0)
        _stats[(S, B)](x, sx, k, p, pm, pz, hist, V, SL, S, BLOCK=blk, BINS=bins, num_warps=nw)
        _hist[(S, B)](x, sx, k, p, pm, hist, V, SL, S, BLOCK=blk, BINS=bins, SCALE=scale, SP=SP, num_warps=nw)
        _select[(B,)](k, p, pm, pz, hist, info, mz, V, S, BINS=bins, SCALE=scale, CAP=cap, SP=SP,
                      P_SLACK=_P_SLACK, HEAD_SLACK=_HEAD_SLACK, num_warps=4)
        _compact[(S, B)](x, sx, info, mz, hist, cand, V, SL, BLOCK=blk, BINS=bins, SCALE=scale, CAP=cap,
                         num_warps=nw)
        _finish[(B,)](x, sx, k, p, info, mz, cand, thr, V, BLOCK=1024, CAP=cap,
                      TAIL=min(cap, triton.next_power_of_2(V)), FIX=2.0 ** 40, num_warps=8)
        _write[(S, B)](x, sx, out, out.stride(0), thr, V, SL, BLOCK=blk, num_warps=nw)
        return out
