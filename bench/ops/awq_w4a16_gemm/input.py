import math

import torch

REVERSE = [0, 4, 1, 5, 2, 6, 3, 7]


def _pack(vals: torch.Tensor) -> torch.Tensor:
    """[R, C] ints in 0..15 -> [R, C // 8] int32, column 8p + i in nibble REVERSE[i] of word p."""
    v = vals.to(torch.int64).view(vals.shape[0], -1, 8)
    shifts = torch.tensor(REVERSE, device=vals.device, dtype=torch.int64) * 4
    words = (v << shifts).sum(-1)                      # disjoint nibbles: the sum is an OR
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


def _make_inputs(M, K, N, group_size=128, device="cuda"):
    # Activations ~N(0, 1) (a norm's output), fp16 as AWQ checkpoints run; a trained projection
    # ~N(0, 1/K), quantised as AWQ's asymmetric 4-bit scheme does: per (group of group_size
    # input channels, output column) scale = (max - min) / 15, zero = round(-min / scale).
    x = torch.randn(M, K, device=device, dtype=torch.float16)
    w = torch.randn(K // group_size, group_size, N, device=device) / math.sqrt(K)
    lo, hi = w.amin(dim=1), w.amax(dim=1)                                  # [K // G, N]
    scales = ((hi - lo).clamp_min(1e-5) / 15).to(torch.float16)
    s = scales.float()
    zeros = torch.round(-lo / s).clamp(0, 15)
    q = torch.clamp(torch.round(w / s[:, None, :]) + zeros[:, None, :], 0, 15).reshape(K, N)
    return {"x": x, "qweight": _pack(q), "qzeros": _pack(zeros), "scales": scales}
