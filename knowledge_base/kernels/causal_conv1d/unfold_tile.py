"""
---
id: kernels/causal_conv1d/unfold_tile
op: causal_conv1d
category: Convolution
dtypes: [bfloat16]
techniques: [unfold-in-registers, im2col, any-filter-width, channel-by-time-tiling, fused-silu, fp32-accumulation, 3d-tiling, masking]
params:
  BC: [4, 8, 16]
  BL: [32, 64, 128]
  num_warps: [2, 4, 8]
summary: One program per [BC channels x BL steps] tile; the W shifted windows are gathered as one [BC, BL, W_P2] register tile (an im2col done in registers, zero-padded before t = 0) and reduced against the [BC, 1, W_P2] filter in fp32, then bias and SiLU; works for any filter width, not only 4.
---
What it does: out[b, c, t] = silu(bias[c] + sum_j w[c, j] * x[b, c, t - (W-1) + j]). The program
builds the index tile t[None, :, None] - (W - 1) + j[None, None, :] for its BL steps and the
filter taps j < W (padded to a power of two, masked), loads x there in one gather ([BC, BL, W]:
each element of the row is fetched by W lanes, from the L1 after the first), multiplies by the
filter broadcast over time and sums over the tap axis in fp32. Positions before t = 0 read as
zero (a fresh sequence). One bf16 store of the [BC, BL] result.

When to use it: `tile2d` and `time_loop` unroll exactly four taps as
four shifted [BC, BL] loads with the weights in four registers - fewer lanes and the better
kernel for Mamba/Qwen3-Next's width-4 filters. This one is generic in W (it is the kernel to
start from for widths 2-8, e.g. Hyena/short-conv variants), at the price of W_P2 lanes per
output and a reduction; expect it to lose to `tile2d` at W = 4 on the H200 (the loads are the
same bytes, but the register tile is 4x larger). CPU interpreter timing is meaningless.

Parameters: BC: channels per tile; BL: time steps per tile; num_warps as launched.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"BC": 8, "BL": 64, "num_warps": 4}


@triton.jit
def _conv1d_unfold(x_ptr, w_ptr, b_ptr, y_ptr, C, L, n_cb, n_lb, sxb, sxc, syb, syc, swc,
                   W: tl.constexpr, WP: tl.constexpr, BC: tl.constexpr, BL: tl.constexpr):
    pid = tl.program_id(0)
    lb = pid % n_lb
    cb = (pid // n_lb) % n_cb
    b = pid // (n_lb * n_cb)
    c = cb * BC + tl.arange(0, BC)
    t = lb * BL + tl.arange(0, BL)
    j = tl.arange(0, WP)
    cm = c < C
    src = t[None, :, None] - (W - 1) + j[None, None, :]
    m3 = cm[:, None, None] & (src >= 0) & (src < L) & (j < W)[None, None, :]
    xbase = x_ptr + b.to(tl.int64) * sxb
    xv = tl.load(xbase + c.to(tl.int64)[:, None, None] * sxc + src, mask=m3, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + c[:, None] * swc + j[None, :], mask=cm[:, None] & (j < W)[None, :], other=0.0)
    acc = tl.sum(xv * w.to(tl.float32)[:, None, :], axis=2)
    acc += tl.load(b_ptr + c, mask=cm, other=0.0).to(tl.float32)[:, None]
    out = acc / (1.0 + tl.exp(-acc))
    ybase = y_ptr + b.to(tl.int64) * syb
    tl.store(ybase + c.to(tl.int64)[:, None] * syc + t[None, :], out.to(y_ptr.dtype.element_ty),
             mask=cm[:, None] & (t < L)[None, :])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, weight, bias):
        B, C, L = x.shape
        width = weight.shape[1]
        if x.stride(2) != 1:
            x = x.contiguous()
        w = weight if weight.stride(1) == 1 else weight.contiguous()
        bias = bias.contiguous()
        y = torch.empty((B, C, L), dtype=x.dtype, device=x.device)
        bc, bl = AKA_PARAMS["BC"], AKA_PARAMS["BL"]
        n_cb, n_lb = triton.cdiv(C, bc), triton.cdiv(L, bl)
        if B * C * L:
            _conv1d_unfold[(B * n_cb * n_lb,)](x, w, bias, y, C, L, n_cb, n_lb, x.stride(0), x.stride(1), y.stride(0),
                                               y.stride(1), w.stride(0), W=width, WP=triton.next_power_of_2(width),
                                               BC=bc, BL=bl, num_warps=AKA_PARAMS["num_warps"])
        return y
