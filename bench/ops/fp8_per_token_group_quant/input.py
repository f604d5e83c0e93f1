import torch


def _make_inputs(num_tokens, hidden, device="cuda"):
    return {"x": torch.randn(num_tokens, hidden, dtype=torch.bfloat16, device=device)}
