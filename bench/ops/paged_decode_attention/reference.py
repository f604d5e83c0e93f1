import torch
import torch.nn as nn


class Model(nn.Module):
    """Decode attention of one query token per sequence over a paged KV cache (vLLM layout).

    q [B, Hq, D]; key_cache, value_cache [num_blocks, block_size, Hkv, D];
    block_tables [B, max_blocks] int32 (logical block j of sequence b lives in physical block
    block_tables[b, j]); seq_lens [B] int32 (tokens 0..seq_lens[b]-1 are valid, the query being
    the last of them) -> out [B, Hq, D] in q's dtype. Query head h reads kv head
    h // (Hq // Hkv). Scores, softmax and P @ V in fp32; table entries past a sequence's last
    block are padding and must not be read.
    """

    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, q, key_cache, value_cache, block_tables, seq_lens):
        acc = torch.promote_types(q.dtype, torch.float32)
        block_size, num_kv_heads, head_dim = key_cache.shape[1:]
        group = q.shape[1] // num_kv_heads
        out = torch.empty_like(q)
        for b, n in enumerate(seq_lens.tolist()):
            blocks = block_tables[b, : (n + block_size - 1) // block_size].long()
            k = key_cache[blocks].reshape(-1, num_kv_heads, head_dim)[:n]    # [n, Hkv, D]
            v = value_cache[blocks].reshape(-1, num_kv_heads, head_dim)[:n]
            k = k.to(acc).repeat_interleave(group, dim=1).transpose(0, 1)    # [Hq, n, D]
            v = v.to(acc).repeat_interleave(group, dim=1).transpose(0, 1)
            scores = (k @ q[b].to(acc)[:, :, None]).squeeze(-1) * self.scale  # [Hq, n]
            probs = torch.softmax(scores, dim=-1)
            out[b] = (probs[:, None, :] @ v).squeeze(1).to(q.dtype)
        return out
