import torch


def _make_inputs(num_tokens, top_k, hidden, num_experts, device="cuda"):
    # Routing weights of a real router: softmax over the experts, top-k, renormalised.
    probs = torch.softmax(torch.randn(num_tokens, num_experts, device=device), dim=-1)
    weights = probs.topk(top_k, dim=-1).values
    return {
        "expert_out": torch.randn(num_tokens, top_k, hidden, dtype=torch.bfloat16, device=device),
        "topk_weights": weights / weights.sum(dim=-1, keepdim=True),
    }
