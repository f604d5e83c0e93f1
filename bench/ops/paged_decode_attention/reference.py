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
        batch, num_q_heads, head_dim = q.shape
        num_kv_heads = key_cache.shape[2]
        group = num_q_heads // num_kv_heads
        # Every sequence's blocks gathered into one padded [B, Hkv, L, D] tensor, L = max_blocks *
        # block_size; positions at or past seq_lens[b] (the table's padding) are masked out of
        # the softmax, so what they hold never reaches the output.
        blocks = block_tables.long()
        k = key_cache[blocks].flatten(1, 2).transpose(1, 2).to(acc)
        v = value_cache[blocks].flatten(1, 2).transpose(1, 2).to(acc)
        qg = q.to(acc).view(batch, num_kv_heads, group, head_dim)        # [B, Hkv, group, D]
        scores = (qg @ k.transpose(-1, -2)) * self.scale                  # [B, Hkv, group, L]
        pos = torch.arange(k.shape[2], device=q.device)
        padding = pos[None, :] >= seq_lens[:, None].long()                # [B, L]
        scores = scores.masked_fill(padding[:, None, None, :], float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        return (probs @ v).reshape(batch, num_q_heads, head_dim).to(q.dtype)
