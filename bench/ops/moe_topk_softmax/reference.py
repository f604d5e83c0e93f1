import torch
import torch.nn as nn


class Model(nn.Module):
    """MoE router: softmax over experts, top-k, optional renormalisation.

    The top_k experts are those with the largest logits (the same set and order as
    the largest softmax probabilities in exact arithmetic), returned in descending
    order, equal logits ordered by ascending expert id (the lower id also wins a
    tie at the k-th place). Selecting on the logits keeps the choice defined when
    fp32 exp() underflows to 0 for experts far below the maximum, where
    probabilities would tie at 0. Weights are those experts' softmax probabilities
    (fp32); with renormalize they are divided by their sum (Qwen3-MoE
    norm_topk_prob, Mixtral). Returns (topk_weights fp32 [T, k], topk_ids int32 [T, k]).
    """

    def __init__(self, top_k, renormalize=True):
        super().__init__()
        self.top_k = top_k
        self.renormalize = renormalize

    def forward(self, gating_output):
        compute = torch.promote_types(gating_output.dtype, torch.float32)
        logits = gating_output.to(compute)
        # A stable descending sort keeps equal logits in ascending id order.
        ids = torch.sort(logits, dim=-1, descending=True, stable=True).indices[..., : self.top_k]
        weights = torch.softmax(logits, dim=-1).gather(-1, ids)
        if self.renormalize:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return weights.to(torch.float32), ids.to(torch.int32)
