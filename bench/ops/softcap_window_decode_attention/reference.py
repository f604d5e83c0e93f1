import torch
import torch.nn as nn


class Model(nn.Module):
    """Decode attention with logit soft-capping and a sliding window over a paged KV cache.

    The Gemma-2 / Gemma-3 attention of one query token per sequence. q [B, Hq, D];
    key_cache, value_cache [num_blocks, block_size, Hkv, D] (vLLM layout); block_tables
    [B, max_blocks] int32; seq_lens [B] int32 -> out [B, Hq, D] in q's dtype. For sequence b
    (length L, the query being token L-1) and query head h (kv head h // (Hq // Hkv)):

        s_j = softcap * tanh(scale * q.k_j / softcap)      (s_j = scale * q.k_j if softcap <= 0)
        out = softmax_j(s_j) @ V   over   max(0, L - window) <= j < L

    i.e. the query sees itself and the window - 1 tokens before it (Hugging Face Gemma-2's
    sliding mask). Global layers use a window at least the context length. fp32 scores,
    soft-cap, softmax and P @ V; table entries past a sequence's last block are padding.
    """

    def __init__(self, scale, softcap, window):
        super().__init__()
        self.scale = scale
        self.softcap = softcap
        self.window = window

    def forward(self, q, key_cache, value_cache, block_tables, seq_lens):
        acc = torch.promote_types(q.dtype, torch.float32)
        batch, num_q_heads, head_dim = q.shape
        num_kv_heads = key_cache.shape[2]
        group = num_q_heads // num_kv_heads
        blocks = block_tables.long()
        k = key_cache[blocks].flatten(1, 2).transpose(1, 2).to(acc)           # [B, Hkv, L, D]
        v = value_cache[blocks].flatten(1, 2).transpose(1, 2).to(acc)
        qg = q.to(acc).view(batch, num_kv_heads, group, head_dim)
        scores = (qg @ k.transpose(-1, -2)) * self.scale                     # [B, Hkv, group, L]
        if self.softcap > 0:
            scores = self.softcap * torch.tanh(scores / self.softcap)
        pos = torch.arange(k.shape[2], device=q.device)
        lens = seq_lens.long()[:, None]
        outside = (pos[None, :] >= lens) | (pos[None, :] < lens - self.window)  # [B, L]
        scores = scores.masked_fill(outside[:, None, None, :], float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        return (probs @ v).reshape(batch, num_q_heads, head_dim).to(q.dtype)
