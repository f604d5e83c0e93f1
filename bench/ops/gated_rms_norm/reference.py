import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Gated RMSNorm over the last dim (one group = the whole row).

    norm_before_gate=True (Qwen3-Next gated DeltaNet output norm):
        y = rms_norm(x) * w * silu(z)
    norm_before_gate=False (Mamba2 mixer norm, mamba_ssm's and vLLM's default for Mamba2):
        y = rms_norm(x * silu(z)) * w
    Everything in fp32, one rounding to x.dtype. Models that normalize per head or per group
    (Qwen3-Next: per value head of 128; Mamba2 with n_groups > 1) pass rows of that size:
    x.reshape(-1, group) is the same computation.
    """

    def __init__(self, eps: float = 1e-6, norm_before_gate: bool = True):
        super().__init__()
        self.eps = eps
        self.norm_before_gate = norm_before_gate

    def forward(self, x: torch.Tensor, z: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        acc = torch.promote_types(x.dtype, torch.float32)
        xf = x.to(acc)
        gate = F.silu(z.to(acc))
        if not self.norm_before_gate:
            xf = xf * gate
        rstd = torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        y = xf * rstd * weight.to(acc)
        if self.norm_before_gate:
            y = y * gate
        return y.to(x.dtype)
