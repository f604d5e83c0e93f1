import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Mixture-of-experts MLP over pre-computed top-k routing (vLLM's fused_moe semantics).

    hidden [T, H], w1 [E, 2I, H] (rows 0..I-1 gate, I..2I-1 up), w2 [E, H, I],
    topk_weights [T, k] fp32, topk_ids [T, k] int32 -> out [T, H] in hidden's dtype:

        out[t] = sum_j topk_weights[t, j] * (silu(x W1g^T) * (x W1u^T)) W2^T   for e = topk_ids[t, j]

    An id of -1 means the expert lives on another expert-parallel rank: it contributes
    nothing (vLLM's expert_map convention). Rounding points follow the production kernels:
    each GEMM accumulates in fp32 and stores in the activation dtype, SiLU-and-mul runs in fp32
    and stores in the activation dtype (it is the next GEMM's operand), and the k weighted
    expert outputs are summed in fp32 before the final cast.
    """

    def __init__(self):
        super().__init__()

    def forward(self, hidden, w1, w2, topk_weights, topk_ids):
        dtype = hidden.dtype
        acc = torch.promote_types(dtype, torch.float32)
        T, H = hidden.shape
        num_experts, top_k = w1.shape[0], topk_ids.shape[1]
        inter = w2.shape[2]
        # Group the T*k (token, slot) pairs by expert with one sort, so the loop below needs no
        # per-expert device sync (a nonzero() per expert made the 128-expert shapes take 25-45 ms
        # on an H200, mostly waiting on syncs).
        flat_ids = topk_ids.flatten().long()
        order = torch.argsort(flat_ids, stable=True)
        counts = torch.bincount(flat_ids + 1, minlength=num_experts + 1).tolist()  # [0]: id -1
        flat_weights = topk_weights.flatten()
        out = torch.zeros(T, H, dtype=acc, device=hidden.device)
        start = counts[0]  # pairs routed to other EP ranks sort first and are skipped
        for e in range(num_experts):
            pairs = order[start:start + counts[e + 1]]
            start += counts[e + 1]
            if pairs.numel() == 0:
                continue
            token_idx = pairs // top_k
            x = hidden.index_select(0, token_idx)
            gate, up = F.linear(x, w1[e]).to(acc).split(inter, dim=-1)
            act = (F.silu(gate) * up).to(dtype)
            y = F.linear(act, w2[e]).to(acc)
            out.index_add_(0, token_idx, y * flat_weights[pairs].to(acc)[:, None])
        return out.to(dtype)
