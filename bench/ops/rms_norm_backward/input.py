import torch


def _make_inputs(num_tokens, hidden, eps=1e-6, device="cuda"):
    # Forward activations ~N(0, 1), gains near 1 (as rms_norm); incoming gradients are small
    # (std 1e-2 after the loss is averaged over tokens), and bf16 like the activations.
    x = torch.randn(num_tokens, hidden, device=device).to(torch.bfloat16)
    weight = (1.0 + 0.1 * torch.randn(hidden, device=device)).to(torch.bfloat16)
    dy = (1e-2 * torch.randn(num_tokens, hidden, device=device)).to(torch.bfloat16)
    rstd = torch.rsqrt(x.float().pow(2).mean(dim=-1) + eps)
    return {"dy": dy, "x": x, "weight": weight, "rstd": rstd}
