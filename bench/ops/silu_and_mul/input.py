import torch


def _make_inputs(num_tokens: int, intermediate: int, device: str = "cuda") -> dict[str, torch.Tensor]:
    # Output of the merged gate_up projection, [gate | up], ~N(0, 1).
    x = torch.randn(num_tokens, 2 * intermediate, device=device).to(torch.bfloat16)
    return {"x": x}
