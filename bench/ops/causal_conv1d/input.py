import torch


def _make_inputs(batch, channels, seqlen, width=4, device="cuda"):
    # x is the in_proj output (~N(0,1)); weight and bias follow the PyTorch Conv1d init for a
    # depthwise kernel of width 4, U(-1/sqrt(4), 1/sqrt(4)) = U(-0.5, 0.5).
    x = torch.randn(batch, channels, seqlen, device=device, dtype=torch.bfloat16)
    weight = (torch.rand(channels, width, device=device) - 0.5).to(torch.bfloat16)
    bias = (torch.rand(channels, device=device) - 0.5).to(torch.bfloat16)
    return {"x": x, "weight": weight, "bias": bias}
