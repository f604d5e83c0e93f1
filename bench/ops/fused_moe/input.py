import math

import torch


def _make_inputs(num_tokens, hidden_size, intermediate_size, num_experts, top_k, ep_size=1,
                 device="cuda"):
    """Inputs of one rank's MoE layer.

    With ep_size > 1 the model has num_experts * ep_size experts and this rank holds
    num_experts of them (rank 0's block); tokens are routed over all experts, and ids of
    experts held elsewhere become -1, as vLLM's expert_map does for every rank that receives
    all tokens.
    """
    total_experts = num_experts * ep_size
    hidden = torch.randn(num_tokens, hidden_size, device=device, dtype=torch.bfloat16)
    # Weights with std 1/sqrt(fan_in) keep every stage O(1), so bf16 rounding is measured at
    # unit scale.
    w1 = torch.randn(num_experts, 2 * intermediate_size, hidden_size, device=device,
                     dtype=torch.bfloat16) * (1.0 / math.sqrt(hidden_size))
    w2 = torch.randn(num_experts, hidden_size, intermediate_size, device=device,
                     dtype=torch.bfloat16) * (1.0 / math.sqrt(intermediate_size))
    # Router: softmax over logits with a per-expert bias (std 0.5) so load is uneven, then a
    # real top-k renormalised over the chosen experts (Mixtral, Qwen3 norm_topk_prob=True).
    bias = 0.5 * torch.randn(total_experts, device=device)
    logits = torch.randn(num_tokens, total_experts, device=device) + bias
    probs = torch.softmax(logits, dim=-1)
    topk_weights, topk_ids = probs.topk(top_k, dim=-1)
    topk_weights = topk_weights / topk_weights.sum(dim=-1, keepdim=True)
    topk_ids = topk_ids.to(torch.int32)
    if ep_size > 1:
        topk_ids = torch.where(topk_ids < num_experts, topk_ids, torch.full_like(topk_ids, -1))
    return {"hidden": hidden, "w1": w1, "w2": w2,
            "topk_weights": topk_weights.float().contiguous(), "topk_ids": topk_ids.contiguous()}


def _cost_vars(inputs, num_experts, **_):
    """The cost model's data-dependent value (meta.json cost.vars): how many of this rank's
    experts the batch's routing reaches, whose weights any kernel has to read."""
    ids = inputs["topk_ids"]
    local = ids[(ids >= 0) & (ids < num_experts)]
    return {"experts_hit": int(local.unique().numel())}
