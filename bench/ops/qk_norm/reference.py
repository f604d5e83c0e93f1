import torch
import torch.nn as nn


class Model(nn.Module):
    """Per-head RMSNorm of q and k before RoPE (Qwen3): each head_dim vector is normalized on
    its own, q with q_weight and k with k_weight, both of shape [head_dim].

    fp32 statistics, one rounding to the input dtype. Returns (q_out, k_out) with the input
    shapes [T, Hq, D] and [T, Hkv, D].
    """

    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def _norm(self, t: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        acc = torch.promote_types(t.dtype, torch.float32)
        tf = t.to(acc)
        rstd = torch.rsqrt(tf.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (tf * rstd * w.to(acc)).to(t.dtype)

    def forward(self, q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor,
                k_weight: torch.Tensor):
        return self._norm(q, q_weight), self._norm(k, k_weight)
