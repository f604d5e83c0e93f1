import torch
import torch.nn as nn

FP8_MAX = 448.0  # largest finite float8_e4m3fn value


class Model(nn.Module):
    """Dynamic per-token FP8 (e4m3fn) quantization.

    scale[t] = max(amax(|x[t, :]|) / 448, min_scale)       fp32, [T, 1]
    q[t, i]  = fp8(clamp(x[t, i] / scale[t], -448, 448))   round-to-nearest-even
    min_scale defaults to 1 / (448 * 512), the floor vLLM's
    dynamic_per_token_scaled_fp8_quant uses so an all-zero row gets a finite scale.
    amax and the division are fp32; dequantisation is q * scale.
    """

    def __init__(self, min_scale=1.0 / (FP8_MAX * 512.0)):
        super().__init__()
        self.min_scale = min_scale

    def forward(self, x):
        compute = torch.promote_types(x.dtype, torch.float32)
        xf = x.to(compute)
        amax = xf.abs().amax(dim=-1, keepdim=True)
        scale = torch.clamp(amax / FP8_MAX, min=self.min_scale)
        q = torch.clamp(xf / scale, -FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
        return q, scale.to(torch.float32)
