import torch


def _make_inputs(num_rows: int, hidden: int, device: str = "cuda") -> dict[str, torch.Tensor]:
    # x: attention / SSM output rows, z: the gate projection, both ~N(0, 1).
    x = torch.randn(num_rows, hidden, device=device).to(torch.bfloat16)
    z = torch.randn(num_rows, hidden, device=device).to(torch.bfloat16)
    weight = (1.0 + 0.1 * torch.randn(hidden, device=device)).to(torch.bfloat16)
    return {"x": x, "z": z, "weight": weight}
