import math

import torch


def _make_inputs(M, N, K, device="cuda"):
    # Activations ~N(0,1) (the output of an RMSNorm); weights with std 1/sqrt(K), the scale a
    # trained projection keeps so outputs stay O(1) and bf16 rounding is measured at unit scale.
    x = torch.randn(M, K, device=device, dtype=torch.bfloat16)
    w = torch.randn(N, K, device=device, dtype=torch.bfloat16) * (1.0 / math.sqrt(K))
    return {"x": x, "w": w}
