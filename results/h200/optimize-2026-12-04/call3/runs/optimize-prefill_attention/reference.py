import torch
import torch.nn as nn


class Model(nn.Module):
    """Causal GQA self-attention over packed variable-length sequences (flash_attn_varlen form).

    q [T, Hq, D], k [T, Hkv, D], v [T, Hkv, D], cu_seqlens [num_seqs + 1] int32 (sequence i is
    rows cu_seqlens[i]:cu_seqlens[i+1]) -> out [T, Hq, D] in q's dtype. Query head h attends
    to kv head h // (Hq // Hkv). Scores, softmax and P @ V are in fp32; position j is visible
    to position i of the same sequence iff j <= i.
    """

    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, q, k, v, cu_seqlens):
        acc = torch.promote_types(q.dtype, torch.float32)
        group = q.shape[1] // k.shape[1]
        out = torch.empty_like(q)
        bounds = cu_seqlens.tolist()
        for start, end in zip(bounds[:-1], bounds[1:]):
            qs = q[start:end].to(acc).transpose(0, 1)                       # [Hq, S, D]
            ks = k[start:end].to(acc).repeat_interleave(group, dim=1).transpose(0, 1)
            vs = v[start:end].to(acc).repeat_interleave(group, dim=1).transpose(0, 1)
            scores = (qs @ ks.transpose(1, 2)) * self.scale                 # [Hq, S, S]
            n = end - start
            future = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)
            scores = scores.masked_fill(future, float("-inf"))
            probs = torch.softmax(scores, dim=-1)
            out[start:end] = (probs @ vs).transpose(0, 1).to(q.dtype)
        return out
