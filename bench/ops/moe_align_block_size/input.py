import torch


def _make_inputs(num_tokens, top_k, num_experts, device="cuda"):
    # A real top-k (distinct experts per token) of noisy scores with a per-expert
    # bias, so expert loads are uneven as in served traffic.
    bias = 0.5 * torch.randn(num_experts, device=device)
    scores = torch.randn(num_tokens, num_experts, device=device) + bias
    return {"topk_ids": scores.topk(top_k, dim=-1).indices.to(torch.int32)}
