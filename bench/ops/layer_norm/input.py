import torch


def _make_inputs(num_tokens: int, hidden: int, device: str = "cuda") -> dict[str, torch.Tensor]:
    # A per-token offset makes the mean non-zero, so a one-pass E[x^2] - E[x]^2 variance loses
    # digits the way it does on real hidden states.
    x = torch.randn(num_tokens, hidden, device=device) + torch.randn(num_tokens, 1, device=device)
    weight = (1.0 + 0.1 * torch.randn(hidden, device=device)).to(torch.bfloat16)
    bias = (0.1 * torch.randn(hidden, device=device)).to(torch.bfloat16)
    return {"x": x.to(torch.bfloat16), "weight": weight, "bias": bias}
