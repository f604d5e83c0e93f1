import torch
import torch.nn as nn


class Model(nn.Module):
    """Weighted sum of each token's top-k expert outputs.

    out[t, :] = routed_scaling_factor * sum_j topk_weights[t, j] * expert_out[t, j, :]
    Products and sum in fp32, one rounding to the activation dtype.
    routed_scaling_factor is 2.5 for DeepSeek-V3, 1.0 elsewhere.
    """

    def __init__(self, routed_scaling_factor=1.0):
        super().__init__()
        self.routed_scaling_factor = routed_scaling_factor

    def forward(self, expert_out, topk_weights):
        compute = torch.promote_types(expert_out.dtype, torch.float32)
        weighted = expert_out.to(compute) * topk_weights.to(compute).unsqueeze(-1)
        out = weighted.sum(dim=1) * self.routed_scaling_factor
        return out.to(expert_out.dtype)
