import torch
import torch.nn as nn


class Model(nn.Module):
    """RMSNorm followed by dynamic per-token FP8 (e4m3fn) quantization of its output, the
    input stage of an FP8 linear layer (vLLM's rms_norm_dynamic_per_token_quant).

    y = x * rsqrt(mean(x^2) + eps) * w, kept in fp32 (never rounded to bf16);
    scale[t] = max(amax_t |y| / 448, 1 / (448 * 512)), the floor vLLM uses so that an all-zero
    row gets a finite scale; q = clamp(y / scale, -448, 448) cast to float8_e4m3fn
    (round-to-nearest-even). Returns (q [T, H] float8_e4m3fn, scale [T, 1] fp32).
    """

    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x: torch.Tensor, weight: torch.Tensor):
        fp8 = torch.float8_e4m3fn
        fp8_max = torch.finfo(fp8).max
        acc = torch.promote_types(x.dtype, torch.float32)
        xf = x.to(acc)
        rstd = torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        y = xf * rstd * weight.to(acc)
        amax = y.abs().amax(dim=-1, keepdim=True)
        scale = torch.clamp(amax / fp8_max, min=1.0 / (fp8_max * 512.0))
        q = torch.clamp(y / scale, -fp8_max, fp8_max).to(fp8)
        return q, scale
