import torch


def _make_inputs(num_tokens: int, num_heads: int, head_dim: int,
                 device: str = "cuda") -> dict[str, torch.Tensor]:
    # q or k after the short causal conv and SiLU of the DeltaNet block; ~N(0, 1) here.
    x = torch.randn(num_tokens, num_heads, head_dim, device=device).to(torch.bfloat16)
    return {"x": x}
