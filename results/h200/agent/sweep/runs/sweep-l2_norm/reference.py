import torch
import torch.nn as nn


class Model(nn.Module):
    """L2 normalization of each head vector: y = x / sqrt(sum(x^2) + eps) over the last dim.

    Qwen3-Next applies it to the gated-DeltaNet q and k heads (head_k_dim 128, eps 1e-6, FLA's
    l2norm). Sum of squares in fp32, one rounding to x.dtype. Note eps is added to the sum,
    not to the mean.
    """

    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        acc = torch.promote_types(x.dtype, torch.float32)
        xf = x.to(acc)
        rnorm = torch.rsqrt(xf.pow(2).sum(dim=-1, keepdim=True) + self.eps)
        return (xf * rnorm).to(x.dtype)
