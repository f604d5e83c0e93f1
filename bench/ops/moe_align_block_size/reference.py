import torch
import torch.nn as nn


class Model(nn.Module):
    """Group (token, expert) pairs by expert, each group padded to block_size.

    topk_ids [T, k]: flat pair index i = t * k + j routes to expert topk_ids[t, j].
    Outputs, all int32 (n = T * k, m = min(E, n)):
      sorted_token_ids [n + m * (block_size - 1)]: expert 0's pair indices in
          increasing order, padded with the sentinel n up to a multiple of
          block_size, then expert 1's, ...; experts without pairs take no room.
          The length is a fixed upper bound (every non-empty expert wastes at
          most block_size - 1 slots); everything past the last segment is n.
      expert_ids [ceil(len(sorted_token_ids) / block_size)]: the expert owning
          each block of sorted_token_ids, -1 for blocks past the last segment.
      num_tokens_post_padded [1]: total length of the padded segments.
    """

    def __init__(self, num_experts, block_size):
        super().__init__()
        self.num_experts = num_experts
        self.block_size = block_size

    def forward(self, topk_ids):
        device = topk_ids.device
        bs = self.block_size
        flat = topk_ids.flatten().to(torch.int64)
        n = flat.numel()

        counts = torch.bincount(flat, minlength=self.num_experts)
        padded = (counts + bs - 1) // bs * bs
        segment_start = torch.cumsum(padded, 0) - padded
        group_start = torch.cumsum(counts, 0) - counts

        # Stable sort: pairs of one expert stay in increasing flat-index order.
        expert_of, pair = torch.sort(flat, stable=True)
        rank = torch.arange(n, device=device) - group_start[expert_of]

        max_len = n + min(self.num_experts, n) * (bs - 1)
        sorted_token_ids = torch.full((max_len,), n, dtype=torch.int32, device=device)
        sorted_token_ids[segment_start[expert_of] + rank] = pair.to(torch.int32)

        num_blocks = (max_len + bs - 1) // bs
        expert_ids = torch.full((num_blocks,), -1, dtype=torch.int32, device=device)
        owners = torch.repeat_interleave(torch.arange(self.num_experts, device=device), padded // bs)
        expert_ids[: owners.numel()] = owners.to(torch.int32)

        num_tokens_post_padded = padded.sum().to(torch.int32).reshape(1)
        return sorted_token_ids, expert_ids, num_tokens_post_padded
