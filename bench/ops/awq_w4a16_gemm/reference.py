import torch
import torch.nn as nn

# AWQ packs eight 4-bit values per int32 in the order [0, 2, 4, 6, 1, 3, 5, 7] (its GEMM kernel's
# register layout): output column 8p + i sits in nibble REVERSE[i] of word p.
REVERSE = [0, 4, 1, 5, 2, 6, 3, 7]


def _unpack(packed: torch.Tensor) -> torch.Tensor:
    """[R, C // 8] int32 -> [R, C] int32 in 0..15 (arithmetic shift, then the low nibble)."""
    shifts = torch.tensor(REVERSE, device=packed.device, dtype=torch.int32) * 4
    return ((packed.unsqueeze(-1) >> shifts) & 0xF).flatten(-2)


class Model(nn.Module):
    """AWQ-style W4A16 linear layer: y = x @ W, W dequantised group-wise from 4-bit weights.

    x [M, K] fp16; qweight [K, N // 8] int32 and qzeros [K // group_size, N // 8] int32, each
    word holding eight 4-bit values in AWQ's order; scales [K // group_size, N] fp16 ->
    y [M, N] fp16. For input channel k and output column n, with g = k // group_size:

        W[k, n] = (q[k, n] - z[g, n]) * s[g, n]

    rounded to the activation dtype (AWQ's kernels dequantise to fp16), then the product is
    summed in fp32 and rounded once to fp16.
    """

    def __init__(self, group_size: int = 128):
        super().__init__()
        self.group_size = group_size

    def forward(self, x, qweight, qzeros, scales):
        acc = torch.promote_types(x.dtype, torch.float32)
        q = _unpack(qweight)                                                   # [K, N]
        z = _unpack(qzeros).repeat_interleave(self.group_size, dim=0)         # [K, N]
        s = scales.to(acc).repeat_interleave(self.group_size, dim=0)
        w = ((q - z).to(acc) * s).to(x.dtype)
        return (x.to(acc) @ w.to(acc)).to(x.dtype)
