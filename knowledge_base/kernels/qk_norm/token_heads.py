"""
---
id: kernels/qk_norm/token_heads
op: qk_norm
category: Normalization
dtypes: [bfloat16]
techniques: [multi-head-per-program, row-major-grid, 2d-tiling, one-pass-reduction, row-in-registers, kernel-fusion, fp32-accumulation, int64-indexing]
params:
  HB: [4, 8, 16, 32]
  num_warps: [1, 2, 4]
summary: 1-D grid over (token, head block) walked row-major, a token's q head blocks then its k head blocks; an [HB, BLOCK_D] tile of one token's heads per program; token and head strides passed, so strided views of a packed qkv buffer work too.
---
Design. The serving layout: q and k are often strided views into the fused qkv projection, so
this kernel addresses heads through (token stride, head stride) rather than assuming one flat
[rows, D] array. Program (t, j) normalises HB heads of token t: j < ceil(Hq / HB) selects q
blocks, the rest k blocks (one launch for both tensors, uniform branch per program). The tile is
[HB, BLOCK_D], reduced along D in fp32; the [D] weight is loaded once per program. Head counts
that are not multiples of HB (40 q heads, 1 kv head) are masked along the head axis. Token
offsets are int64. Compared with the flat-rows family this keeps a program inside one token
(wasted lanes when HB exceeds the head count, e.g. 1 kv head) but needs no contiguity.
Grid. A 1-D grid walked row-major: program p takes token p // nb and head block p % nb (nb = q
blocks + k blocks), so programs in flight read consecutive heads of consecutive tokens. It was a
(token, head block) grid with tokens on axis 0, which the GPU walks fastest: programs in flight
read one head block of consecutive tokens, a whole token apart. On the H200 (session 6)
torch.compile's flat stream beat silu_and_mul's grid2d, which had that order, by 4-5% at large
shapes. Few tokens (decode): HB halves until the grid has at least 4 programs per SM (at HB 8, 1
token was 5 programs and 32 tokens 160; compile won decode shapes of row tiles that left SMs idle,
session 6), and num_warps shrinks with the tile (num_warps * hb / HB). On CPU (the interpreter) the
machine is taken as one SM. Prediction (unmeasured): decode closer to compile; large shapes a few
percent faster.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"HB": 8, "num_warps": 2}


@triton.jit
def _norm_heads(x_ptr, w_ptr, y_ptr, tok, h0, n_heads, head_dim, stride_xt, stride_xh, stride_yt, stride_yh, eps,
                HB: tl.constexpr, BLOCK: tl.constexpr):
    heads = h0 + tl.arange(0, HB)
    cols = tl.arange(0, BLOCK)
    cmask = cols < head_dim
    mask = (heads < n_heads)[:, None] & cmask[None, :]
    t64 = tok.to(tl.int64)
    xo = t64 * stride_xt + heads[:, None] * stride_xh + cols[None, :]
    x = tl.load(x_ptr + xo, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=1) / head_dim + eps)
    yo = t64 * stride_yt + heads[:, None] * stride_yh + cols[None, :]
    tl.store(y_ptr + yo, (x * rstd[:, None] * w[None, :]).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _qk_norm_token_heads(q_ptr, k_ptr, qw_ptr, kw_ptr, qo_ptr, ko_ptr, n_q_heads, n_k_heads, n_q_blocks, nb, head_dim,
                         sq_t, sq_h, sk_t, sk_h, sqo_t, sqo_h, sko_t, sko_h, eps,
                         HB: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    tok = pid // nb
    j = pid % nb
    if j < n_q_blocks:
        _norm_heads(q_ptr, qw_ptr, qo_ptr, tok, j * HB, n_q_heads, head_dim, sq_t, sq_h, sqo_t, sqo_h, eps, HB, BLOCK)
    else:
        _norm_heads(k_ptr, kw_ptr, ko_ptr, tok, (j - n_q_blocks) * HB, n_k_heads, head_dim, sk_t, sk_h, sko_t, sko_h,
                    eps, HB, BLOCK)


class ModelNew(nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, q, k, q_weight, k_weight):
        d = q.shape[-1]
        q3 = q.reshape(-1, q.shape[-2], d)
        k3 = k.reshape(-1, k.shape[-2], d)
        n_tok, hq, hk = q3.shape[0], q3.shape[1], k3.shape[1]
        qo = torch.empty(q3.shape, dtype=q.dtype, device=q.device)
        ko = torch.empty(k3.shape, dtype=k.dtype, device=k.device)
        hb = AKA_PARAMS["HB"]
        sms = torch.cuda.get_device_properties(q.device).multi_processor_count if q.is_cuda else 1
        while hb > 1 and n_tok * (triton.cdiv(hq, hb) + triton.cdiv(hk, hb)) < 4 * sms:
            hb //= 2
        warps = max(1, AKA_PARAMS["num_warps"] * hb // AKA_PARAMS["HB"])
        nqb, nkb = triton.cdiv(hq, hb), triton.cdiv(hk, hb)
        _qk_norm_token_heads[(n_tok * (nqb + nkb),)](
            q3, k3, q_weight, k_weight, qo, ko, hq, hk, nqb, nqb + nkb, d,
            q3.stride(0), q3.stride(1), k3.stride(0), k3.stride(1), qo.stride(0), qo.stride(1), ko.stride(0),
            ko.stride(1), self.eps, HB=hb, BLOCK=triton.next_power_of_2(d), num_warps=warps)
        return qo.view(q.shape), ko.view(k.shape)
