import torch


def _make_inputs(num_tokens: int, hidden: int, device: str = "cuda") -> dict[str, torch.Tensor]:
    # Hidden states ~N(0, 1); learned RMSNorm gains sit near 1.
    x = torch.randn(num_tokens, hidden, device=device).to(torch.bfloat16)
    weight = (1.0 + 0.1 * torch.randn(hidden, device=device)).to(torch.bfloat16)
    return {"x": x, "weight": weight}
