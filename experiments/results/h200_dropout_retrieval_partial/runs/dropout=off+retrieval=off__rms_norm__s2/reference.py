import torch
import torch.nn as nn


class Model(nn.Module):
    """RMSNorm: y = x * rsqrt(mean(x^2) + eps) * w over the last dim.

    Statistics and the weight multiply are done in fp32 and rounded once to x.dtype, as
    FlashInfer's rmsnorm (SGLang) does. vLLM's CUDA kernel rounds x*rstd to x.dtype before the
    weight multiply; the two differ by at most one bf16 ulp, inside the bf16 tolerance.
    """

    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        # fp32 for bf16/fp16/fp32 inputs, fp64 when the harness upcasts to validate tolerances
        acc = torch.promote_types(x.dtype, torch.float32)
        xf = x.to(acc)
        rstd = torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (xf * rstd * weight.to(acc)).to(x.dtype)
