import math

import torch

BLOCK = 128
FP8_MAX = torch.finfo(torch.float8_e4m3fn).max  # 448


def _quantize(x, block_rows, block_cols):
    """Per-block amax quantisation to e4m3fn; returns (q, fp32 scale per block)."""
    rows, cols = x.shape
    nbr, nbc = -(-rows // block_rows), -(-cols // block_cols)
    padded = x.new_zeros(nbr * block_rows, nbc * block_cols)
    padded[:rows, :cols] = x
    blocks = padded.view(nbr, block_rows, nbc, block_cols)
    amax = blocks.abs().amax(dim=(1, 3)).clamp_min(1e-4)
    scale = (amax / FP8_MAX).float()
    q = (blocks / scale[:, None, :, None]).clamp(-FP8_MAX, FP8_MAX)
    q = q.view(nbr * block_rows, nbc * block_cols)[:rows, :cols].to(torch.float8_e4m3fn)
    return q.contiguous(), scale.contiguous()


def _make_inputs(M, N, K, device="cuda"):
    # Activation ~N(0,1) quantised per token per 128 channels (1x128), weight with std
    # 1/sqrt(K) quantised per 128x128 block, scales = amax / 448 as DeepSeek-V3's act_quant and
    # weight_dequant define them.
    x = torch.randn(M, K, device=device)
    w = torch.randn(N, K, device=device) / math.sqrt(K)
    a, a_scale = _quantize(x, 1, BLOCK)
    b, b_scale = _quantize(w, BLOCK, BLOCK)
    return {"a": a, "a_scale": a_scale, "b": b, "b_scale": b_scale}
