"""
---
id: kernels/causal_conv1d/prefetch_span
op: causal_conv1d
category: Convolution
dtypes: [bfloat16]
techniques: [register-prefetch, software-pipelining, shifted-tile-loads, channel-by-time-tiling, fused-silu, fp32-accumulation, persistent-kernel]
params:
  BC: [16, 32, 64]
  BL: [64, 128, 256]
  CHUNKS: [2, 4, 8]
  num_warps: [4, 8]
summary: time_loop's span walk with the next chunk's four tap tiles loaded before the current chunk is computed (a register double buffer), so each program keeps a chunk of loads in flight while it does the FMAs, SiLU and the store of the one before.
---
Why: every causal_conv1d kernel and torch.compile sit at 0.46-0.50 of the measured copy ceiling
on the large H200 shapes, and vector_shift (aligned vector loads, taps shifted in registers: 4
`ld.global.v4.b32` instead of 58 scalar loads) was slower, so the load instruction count is not
what holds it. In time_loop each program runs load -> compute -> store per chunk with nothing in
flight during the compute: the offline sm_90a SASS of its loop issues all of a chunk's loads, then
waits, then computes (scripts/probe_conv1d.py's `base`). Here the loads of chunk i + 1 go out
before the math of chunk i (SASS: the next chunk's loads precede the current chunk's MUFU), at the
price of a second set of tap tiles in registers: 117 registers at BC 32 x BL 128 on 8 warps
(time_loop: 64), so two programs per SM instead of four. Whether the overlap beats the lost
occupancy is what the H200 measures (scripts/probe_conv1d.py `prefetch` against `base`, and this
file's `aka kb verify`). Measured on an H100 (2026-12-05, results/h100/device-2026-12-05): it did
not: 541 us against time_loop's 473 at 4 x 8192 x 8192, 335 against 297 at shape 3 (13-14%
slower); the unaligned tap loads, not idle time between chunks, hold the op (ops/causal_conv1d).
Kept as the measured counter-example; prefer time_loop.

Design:
- One program per (sequence, BC channels, CHUNKS x BL steps), a flattened 1-D grid, the taps and
  the bias in registers for the span (as time_loop).
- Tap tiles of chunk i: x[t - 3], x[t - 2], x[t - 1], x[t] for t in [tc, tc + BL), masked by
  index (t < 0 reads zero: a fresh sequence; t >= L is dropped); the first chunk's tiles are
  loaded before the loop, each iteration swaps in the prefetched tiles and issues the next
  chunk's before its own FMAs. The last iteration issues none (a compile-time chunk count, so the
  `i + 1 < CHUNKS` test folds per unrolled step).
- fp32 accumulation in the reference's order (bias + w0 x[t-3] + w1 x[t-2] + w2 x[t-1] + w3 x[t]),
  SiLU as acc / (1 + exp(-acc)), one bf16 rounding; int64 bases per program, int32 in-tile offsets.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"BC": 32, "BL": 128, "CHUNKS": 4, "num_warps": 8}


@triton.jit
def _taps(xbase, xoff, tc, L, cm, BL: tl.constexpr):
    """The four shifted [BC, BL] tiles x[t-3], x[t-2], x[t-1], x[t] of the chunk starting at tc."""
    t = tc + tl.arange(0, BL)
    s0 = t - 3
    s1 = t - 2
    s2 = t - 1
    x0 = tl.load(xbase + (xoff + s0[None, :]), mask=cm[:, None] & ((s0 >= 0) & (s0 < L))[None, :], other=0.0)
    x1 = tl.load(xbase + (xoff + s1[None, :]), mask=cm[:, None] & ((s1 >= 0) & (s1 < L))[None, :], other=0.0)
    x2 = tl.load(xbase + (xoff + s2[None, :]), mask=cm[:, None] & ((s2 >= 0) & (s2 < L))[None, :], other=0.0)
    x3 = tl.load(xbase + (xoff + t[None, :]), mask=cm[:, None] & (t < L)[None, :], other=0.0)
    return x0, x1, x2, x3


@triton.jit
def _conv1d_silu_prefetch(x_ptr, w_ptr, b_ptr, y_ptr, C, L, n_cb, n_sb,
                          sxb, sxc, syb, syc, swc,
                          BC: tl.constexpr, BL: tl.constexpr, CHUNKS: tl.constexpr):
    pid = tl.program_id(0)
    sb = pid % n_sb
    cb = (pid // n_sb) % n_cb
    b = pid // (n_sb * n_cb)
    cl = tl.arange(0, BC)
    c = cb * BC + cl
    cm = c < C
    xbase = x_ptr + (b.to(tl.int64) * sxb + (cb * BC).to(tl.int64) * sxc)
    ybase = y_ptr + (b.to(tl.int64) * syb + (cb * BC).to(tl.int64) * syc)
    xoff = cl[:, None] * sxc
    yoff = cl[:, None] * syc
    bias = tl.load(b_ptr + c, mask=cm, other=0.0).to(tl.float32)[:, None]
    w0 = tl.load(w_ptr + c * swc + 0, mask=cm, other=0.0).to(tl.float32)[:, None]
    w1 = tl.load(w_ptr + c * swc + 1, mask=cm, other=0.0).to(tl.float32)[:, None]
    w2 = tl.load(w_ptr + c * swc + 2, mask=cm, other=0.0).to(tl.float32)[:, None]
    w3 = tl.load(w_ptr + c * swc + 3, mask=cm, other=0.0).to(tl.float32)[:, None]
    t0 = sb * (BL * CHUNKS)
    n0, n1, n2, n3 = _taps(xbase, xoff, t0, L, cm, BL)
    for i in tl.static_range(CHUNKS):
        tc = t0 + i * BL
        x0, x1, x2, x3 = n0, n1, n2, n3
        if i + 1 < CHUNKS:  # the next chunk's loads go out before this chunk's math
            n0, n1, n2, n3 = _taps(xbase, xoff, tc + BL, L, cm, BL)
        acc = bias + w0 * x0.to(tl.float32)
        acc = acc + w1 * x1.to(tl.float32)
        acc = acc + w2 * x2.to(tl.float32)
        acc = acc + w3 * x3.to(tl.float32)
        out = acc / (1.0 + tl.exp(-acc))
        t = tc + tl.arange(0, BL)
        tl.store(ybase + (yoff + t[None, :]), out.to(y_ptr.dtype.element_ty), mask=cm[:, None] & (t < L)[None, :])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, weight, bias):
        B, C, L = x.shape
        if weight.shape[1] != 4:
            raise ValueError("this kernel unrolls a width-4 filter")
        if x.stride(2) != 1:
            x = x.contiguous()
        w = weight if weight.stride(1) == 1 else weight.contiguous()
        bias = bias.contiguous()
        y = torch.empty((B, C, L), dtype=x.dtype, device=x.device)
        bc, bl, ch = AKA_PARAMS["BC"], AKA_PARAMS["BL"], AKA_PARAMS["CHUNKS"]
        n_cb, n_sb = triton.cdiv(C, bc), triton.cdiv(L, bl * ch)
        _conv1d_silu_prefetch[(B * n_cb * n_sb,)](
            x, w, bias, y, C, L, n_cb, n_sb, x.stride(0), x.stride(1), y.stride(0), y.stride(1),
            w.stride(0), BC=bc, BL=bl, CHUNKS=ch, num_warps=AKA_PARAMS["num_warps"])
        return y
