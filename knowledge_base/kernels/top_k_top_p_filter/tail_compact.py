"""
---
id: kernels/top_k_top_p_filter/tail_compact
op: top_k_top_p_filter
category: Index
dtypes: [float32]
techniques: [threshold-search-instead-of-sort, candidate-compaction, histogram, online-softmax, split-reduction, per-row-parameters, skip-disabled-filters]
params:
  TARGET_PROGS: [264, 528, 1056]
  BLOCK: [1024, 2048, 4096]
  BINS: [512, 1024]
  CAP: [2048, 4096]
  num_warps: [4, 8]
summary: Six launches over (slice, row) programs. Pass 1 finds each row's max and softmax sum. Pass 2 counts the row's entries in BINS bins of distance below the max, over [0, 64). From those counts a row picks the few bins that must hold every kept logit and compacts them (at most CAP values). One program per row finds both thresholds by bisection over those values, in registers. A last pass writes x or -inf. Rows whose kept set could exceed CAP run the same bisection over the whole row.
---
Why. radix_split finds both thresholds by a 4-bit radix select: 8 digits for top-k and 8 for top-p,
17 passes over the row whatever the data, at 0.02 of the measured ceiling on the H200 (2.75 ms for
256 x 128k). What the op keeps is small. Top-k keeps at most 1024 logits of 128k-256k. The
nucleus of a peaked sampling distribution holds tens to a few thousand. A row only has to be read
often enough to find that tail. Once the tail is in registers, both thresholds take about 32
in-register reductions each.

Passes (grid (S, B): S slices of a row, at least TARGET_PROGS programs in all, at most 64 a row):
1. stats: per slice, an online max and sum of exp(x - max) per lane, folded to one (max, sum) pair
   per slice. Slice 0 also zeroes the row's histogram and compaction counter. That saves a memset
   launch.
2. hist: with the row max M (the slice maxima reduced again, identically in every pass), each entry
   falls in bin floor((M - x) * BINS / 64), clamped to the last bin. -inf, and everything more than
   64 below the max, lands in the last bin. Counts come from tl.histogram, added to the row's
   global histogram by integer atomics, which give the same result in any order.
3. select (one program per row; launches 3 and 5 move no row data): a cumulative sum over the
   counts.
   - Top-k on: the candidate bins are those up to the one holding the k-th largest. They hold
     every top-k survivor, ties included, because equal values share a bin.
   - Top-p only: a bin's mass lies in [count * e^-(i+1)w, count * e^-iw], w = 64 / BINS. The
     candidate bins stop at the first bin whose cumulative lower bound reaches p * Z (Z from pass
     1, given 1e-4 of slack). Any logit below it has at least p * Z above it and cannot be kept.
   - Mode 1 (compact) when the candidates number at most CAP and the last bin is not among them;
     else mode 2.
4. compact (mode-1 rows): every entry in a candidate bin is written to the row's CAP buffer. Its
   place is an atomic counter plus a cumsum of the chunk's mask. The order depends on timing. The
   finish sums masses as 2^-40 fixed-point int64, whose sums do not depend on order, so the
   thresholds are the same in every run.
5. finish (one program per row):
   - Both thresholds come by bisection over order-preserving int32 keys. t_k is the largest key
     with at least k keys >= it. Z_k is the sum of exp(x - M) over keys >= t_k (Z_all when top-k
     is off). T is the largest key >= t_k whose mass at or above it reaches p * Z_k. That is the
     reference's nucleus edge: the kept prefix is every value whose mass strictly above is < p * Z.
   - Mode 1: the bisection runs over the compacted tail, in registers (TAIL = min(CAP, V) rounded
     up to a power of 2). tl.sort was the first form: identical on the GPU, but the interpreter
     took 7 s a row to sort 4096 values.
   - Mode 2: the same bisection over the whole row, about 32 full-row passes each, by one program.
     It is correct for any distribution (flat logits, -inf masks) but slow, and only runs for rows
     the tail cannot bound.
6. write: x where x >= threshold, else -inf (threshold -inf when both filters are off).

Cost: 4 reads and 1 write of the row, against 17 reads and 1 write in radix_split. The
prediction, written before any GPU run, was about 0.2 of the measured ceiling at 256 x 128k.

Measured on an H100, 2026-12-06, all 14 shapes, beside radix_split in one kb verify
(results/h100/device-2026-12-06/topk_side_by_side.md):
- 2.37x radix_split, geomean (1.02x to 2.97x). 2.66x torch.compile on the 5 shapes compile was
  timed on.
- But only 0.008-0.085 of the datasheet roofline: 956 us at 256 x 128k, where the bytes take
  about 200 us.
- Time grows at 3.7-5.5 us a row, so one launch runs far below bandwidth. Suspects: the
  1024-bin histogram and the per-row bisection.
- Each launch timed alone on an H100 the same afternoon (scripts/probe_kernel_launches.py,
  results/h100/device-2026-12-06b/): the histogram took 657.5 of 1024.6 us at 256 x 128k. At
  512 x 152k it took 1477.4 of 3383.8 us, and the finish another 1197.9 us: rows whose one-sided
  top-p bound failed went to the whole-row bisection.
  - The SASS shows why the histogram is slow: 1327 instructions per 2048-element trip at 1024 bins.
  - kernels/top_k_top_p_filter/tail_scatter fixes both (128 bins, a two-sided bound, atomic
    compaction): 2.4x this kernel, 0.17-0.25 of the roofline from 64 rows up.

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

AKA_PARAMS = {"TARGET_PROGS": 528, "BLOCK": 2048, "BINS": 1024, "CAP": 4096, "num_warps": 8}

_MAX_SPLIT = 64
_SPAN = 64.0          # distances below the row max that the bins resolve; the last bin takes the rest
_P_SLACK = 1.0001     # Z_all from per-lane partial sums is within ~1e-6 of any other order


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
            BINS: tl.constexpr, SCALE: tl.constexpr, CAP: tl.constexpr, SP: tl.constexpr, P_SLACK: tl.constexpr):
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
            lb = tl.where(i < BINS - 1, c.to(tl.float32) * tl.exp(-(i + 1).to(tl.float32) / SCALE), 0.0)
            bc = tl.min(tl.where(tl.cumsum(lb, axis=0) >= p * Z * P_SLACK, i, BINS - 1), axis=0)
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
        start, stop = _slice(s, SL, V)
        for o0 in range(start, stop, BLOCK):
            o = o0 + tl.arange(0, BLOCK)
            m = o < stop
            x = tl.load(xrow + o, mask=m, other=float("-inf"))
            sel = m & (_bins(x, M, SCALE, BINS) <= bc)
            cnt = tl.sum(sel.to(tl.int32), axis=0)
            if cnt > 0:
                base = tl.atomic_add(hist_ptr + row * (BINS + 1) + BINS, cnt)
                pos = base + tl.cumsum(sel.to(tl.int32), axis=0) - 1
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
                      P_SLACK=_P_SLACK, num_warps=4)
        _compact[(S, B)](x, sx, info, mz, hist, cand, V, SL, BLOCK=blk, BINS=bins, SCALE=scale, CAP=cap,
                         num_warps=nw)
        _finish[(B,)](x, sx, k, p, info, mz, cand, thr, V, BLOCK=1024, CAP=cap,
                      TAIL=min(cap, triton.next_power_of_2(V)), FIX=2.0 ** 40, num_warps=8)
        _write[(S, B)](x, sx, out, out.stride(0), thr, V, SL, BLOCK=blk, num_warps=nw)
        return out
