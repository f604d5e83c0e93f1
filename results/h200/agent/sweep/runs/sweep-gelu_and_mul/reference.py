import math

import torch
import torch.nn as nn


class Model(nn.Module):
    """GeGLU with the tanh-approximate GELU (Gemma's hidden_activation gelu_pytorch_tanh):
    x [T, 2I] -> gelu_tanh(x[:, :I]) * x[:, I:],
    gelu_tanh(g) = 0.5 * g * (1 + tanh(sqrt(2/pi) * (g + 0.044715 * g^3))).

    fp32 compute, one rounding to x.dtype.
    """

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        acc = torch.promote_types(x.dtype, torch.float32)
        d = x.shape[-1] // 2
        g = x[..., :d].to(acc)
        up = x[..., d:].to(acc)
        inner = math.sqrt(2.0 / math.pi) * (g + 0.044715 * g * g * g)
        return (0.5 * g * (1.0 + torch.tanh(inner)) * up).to(x.dtype)
