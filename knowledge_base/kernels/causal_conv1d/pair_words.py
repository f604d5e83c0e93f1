"""
---
id: kernels/causal_conv1d/pair_words
op: causal_conv1d
category: Convolution
dtypes: [bfloat16]
techniques: [packed-bf16-words, shifted-tile-loads, bit-level-widening, channel-by-time-tiling, fused-silu, fp32-accumulation, persistent-kernel]
params:
  BC: [16, 32, 64]
  BP: [32, 64, 128]
  CHUNKS: [2, 4, 8]
  num_warps: [4, 8]
summary: time_loop's span walk over 32-bit words that each hold two time steps, so the shifted taps are three word loads (two 4-byte aligned, one 16-byte aligned) per two outputs instead of scalar 2-byte loads; the bf16 halves are widened to fp32 by shifts and masks, two outputs computed per word and stored packed. Odd lengths take the per-element path.
---
Why (knowledge_base/ops/causal_conv1d.md, "What you see"): every conv kernel sits at about half the
copy bandwidth on long prefills. The H100 probe (results/h100/device-2026-12-05) put most of
time_loop's gap to the copy on the shifted tap loads: with only the aligned tap loaded, shape 11
took 412 us against 473 (copy: 372). x[t-1], x[t-2], x[t-3] start 2, 4 and 6 bytes past a
16-byte boundary, so Triton loads them with 2-byte scalar instructions (x[t-2] at best as 4-byte
pairs): about 5.25 load instructions per two outputs. vector_shift built the shifts from aligned
vectors in registers and was slower (its tl.split / tl.join shuffles cost more than the loads).

Design:
- View x and y as int32 words of two bf16 time steps (L even, rows start on a word). For the word
  k (steps 2k, 2k+1) the four taps of both outputs live in words k-2 (its high half, x[2k-3]),
  k-1 (x[2k-2], x[2k-1]) and k (x[2k], x[2k+1]): three word tiles per chunk, the first two 4-byte
  aligned (one load instruction per word, half the scalar count), the last 16-byte aligned.
- Widening without conversion instructions: a bf16 is the high half of the fp32 with the same
  value, so lo = word << 16 and hi = word & 0xFFFF0000, each bitcast to fp32.
- even = bias + w0 x[2k-3] + w1 x[2k-2] + w2 x[2k-1] + w3 x[2k], odd shifted by one step, in the
  reference's order in fp32; SiLU as acc / (1 + exp(-acc)); each rounded once to bf16 and the two
  packed back into a word (even low, odd high) for one store per word.
- Masks by word index: words before the sequence read zero (a fresh sequence), words past it are
  dropped; int64 bases per program, int32 in-tile offsets; a flattened 1-D grid of (sequence, BC
  channels, CHUNKS x BP words).
- Odd L (a row of the contiguous tensor starts mid-word every other channel), or x whose rows are
  not word-aligned: the per-element span walk of time_loop.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"BC": 32, "BP": 64, "CHUNKS": 4, "num_warps": 8}


@triton.jit
def _lo(w):
    return (w << 16).to(tl.float32, bitcast=True)


@triton.jit
def _hi(w):
    return (w & -65536).to(tl.float32, bitcast=True)


@triton.jit
def _packed(v):
    """fp32 -> bf16 bits in the low 16 bits of an int32."""
    return v.to(tl.bfloat16).to(tl.int16, bitcast=True).to(tl.int32) & 65535


@triton.jit
def _program(x_ptr, w_ptr, b_ptr, y_ptr, C, n_cb, n_sb, sxb, sxc, syb, syc, swc, BC: tl.constexpr):
    """This program's span index, channel mask, x / y row bases and offsets (int64 bases, int32
    in-tile offsets, in the units of x_ptr / y_ptr), and its bias and four taps in fp32."""
    pid = tl.program_id(0)
    sb = pid % n_sb
    cb = (pid // n_sb) % n_cb
    b = pid // (n_sb * n_cb)
    cl = tl.arange(0, BC)
    c = cb * BC + cl
    cm = c < C
    xbase = x_ptr + (b.to(tl.int64) * sxb + (cb * BC).to(tl.int64) * sxc)
    ybase = y_ptr + (b.to(tl.int64) * syb + (cb * BC).to(tl.int64) * syc)
    bias = tl.load(b_ptr + c, mask=cm, other=0.0).to(tl.float32)[:, None]
    w0 = tl.load(w_ptr + c * swc + 0, mask=cm, other=0.0).to(tl.float32)[:, None]
    w1 = tl.load(w_ptr + c * swc + 1, mask=cm, other=0.0).to(tl.float32)[:, None]
    w2 = tl.load(w_ptr + c * swc + 2, mask=cm, other=0.0).to(tl.float32)[:, None]
    w3 = tl.load(w_ptr + c * swc + 3, mask=cm, other=0.0).to(tl.float32)[:, None]
    return sb, cm, xbase, ybase, cl[:, None] * sxc, cl[:, None] * syc, bias, w0, w1, w2, w3


@triton.jit
def _conv1d_pairs(x_ptr, w_ptr, b_ptr, y_ptr, C, L2, n_cb, n_sb, sxb, sxc, syb, syc, swc,
                  BC: tl.constexpr, BP: tl.constexpr, CHUNKS: tl.constexpr):
    sb, cm, xbase, ybase, xoff, yoff, bias, w0, w1, w2, w3 = _program(
        x_ptr, w_ptr, b_ptr, y_ptr, C, n_cb, n_sb, sxb, sxc, syb, syc, swc, BC)   # x, y: int32 words
    k0 = sb * (BP * CHUNKS)
    for i in range(CHUNKS):
        kc = k0 + i * BP
        if kc < L2:
            k = kc + tl.arange(0, BP)
            km = cm[:, None] & (k < L2)[None, :]          # words past the row: no load, no store
            pm2 = tl.load(xbase + (xoff + (k - 2)[None, :]), mask=km & (k >= 2)[None, :], other=0)
            pm1 = tl.load(xbase + (xoff + (k - 1)[None, :]), mask=km & (k >= 1)[None, :], other=0)
            p0 = tl.load(xbase + (xoff + k[None, :]), mask=km, other=0)
            xa = _hi(pm2)       # x[2k-3]
            xb = _lo(pm1)       # x[2k-2]
            xc = _hi(pm1)       # x[2k-1]
            xd = _lo(p0)        # x[2k]
            xe = _hi(p0)        # x[2k+1]
            ev = bias + w0 * xa + w1 * xb + w2 * xc + w3 * xd
            od = bias + w0 * xb + w1 * xc + w2 * xd + w3 * xe
            ev = ev / (1.0 + tl.exp(-ev))
            od = od / (1.0 + tl.exp(-od))
            tl.store(ybase + (yoff + k[None, :]), _packed(ev) | (_packed(od) << 16), mask=km)


@triton.jit
def _conv1d_steps(x_ptr, w_ptr, b_ptr, y_ptr, C, L, n_cb, n_sb, sxb, sxc, syb, syc, swc,
                  BC: tl.constexpr, BL: tl.constexpr, CHUNKS: tl.constexpr):
    """Odd lengths: one bf16 step per element, four shifted tile loads per chunk."""
    sb, cm, xbase, ybase, xoff, yoff, bias, w0, w1, w2, w3 = _program(
        x_ptr, w_ptr, b_ptr, y_ptr, C, n_cb, n_sb, sxb, sxc, syb, syc, swc, BC)
    t0 = sb * (BL * CHUNKS)
    for i in range(CHUNKS):
        tc = t0 + i * BL
        if tc < L:
            t = tc + tl.arange(0, BL)
            acc = bias
            for j in tl.static_range(4):
                src = t - 3 + j
                wj = w0 if j == 0 else (w1 if j == 1 else (w2 if j == 2 else w3))
                xv = tl.load(xbase + (xoff + src[None, :]),
                             mask=cm[:, None] & ((src >= 0) & (src < L))[None, :], other=0.0)
                acc = acc + wj * xv.to(tl.float32)
            out = acc / (1.0 + tl.exp(-acc))
            tl.store(ybase + (yoff + t[None, :]), out.to(y_ptr.dtype.element_ty),
                     mask=cm[:, None] & (t < L)[None, :])


def word_views(x: torch.Tensor, y: torch.Tensor):
    """x and y as int32 words of two steps, or None when a row does not start on a word."""
    if x.dtype != torch.bfloat16 or x.shape[2] % 2 or x.stride(2) != 1:
        return None
    if x.stride(1) % 2 or x.stride(0) % 2 or x.storage_offset() % 2:
        return None
    return x.view(torch.int32), y.view(torch.int32)


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
        bc, bp, ch = AKA_PARAMS["BC"], AKA_PARAMS["BP"], AKA_PARAMS["CHUNKS"]
        n_cb = triton.cdiv(C, bc)
        words = word_views(x, y)
        if words is not None:
            x32, y32 = words
            n_sb = triton.cdiv(L // 2, bp * ch)
            _conv1d_pairs[(B * n_cb * n_sb,)](
                x32, w, bias, y32, C, L // 2, n_cb, n_sb, x32.stride(0), x32.stride(1), y32.stride(0),
                y32.stride(1), w.stride(0), BC=bc, BP=bp, CHUNKS=ch, num_warps=AKA_PARAMS["num_warps"])
        else:
            n_sb = triton.cdiv(L, 2 * bp * ch)
            _conv1d_steps[(B * n_cb * n_sb,)](
                x, w, bias, y, C, L, n_cb, n_sb, x.stride(0), x.stride(1), y.stride(0), y.stride(1),
                w.stride(0), BC=bc, BL=2 * bp, CHUNKS=ch, num_warps=AKA_PARAMS["num_warps"])
        return y
