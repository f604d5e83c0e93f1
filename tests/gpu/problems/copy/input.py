import torch


def _make_inputs(rows: int, cols: int, device: str = "cuda"):
    return {"x": torch.randn(rows, cols, device=device, dtype=torch.float32)}
