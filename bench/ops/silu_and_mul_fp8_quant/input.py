import torch


def _make_inputs(num_tokens, intermediate_size, device="cuda"):
    # num_tokens counts rows: for MoE shapes, tokens x top_k dispatched rows.
    return {"x": torch.randn(num_tokens, 2 * intermediate_size, dtype=torch.bfloat16, device=device)}
