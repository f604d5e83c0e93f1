import torch
import torch.nn as nn


class Model(nn.Module):
    """Decode attention over a paged fp8 (e4m3) KV cache with per-token, per-head scales.

    q [B, Hq, D] bf16; key_cache, value_cache [num_blocks, block_size, Hkv, D] float8_e4m3fn;
    k_scale, v_scale [num_blocks, block_size, Hkv] fp32 (written with the token: amax / 448 of
    its head vector); block_tables [B, max_blocks] int32; seq_lens [B] int32 -> out [B, Hq, D] bf16.
    Dequantisation is K = key_cache * k_scale (per token and head; exact in fp32), then GQA
    decode attention as paged_decode_attention: fp32 scores, softmax and P @ V over j < seq_lens[b].
    """

    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, q, key_cache, value_cache, k_scale, v_scale, block_tables, seq_lens):
        acc = torch.promote_types(q.dtype, torch.float32)
        batch, num_q_heads, head_dim = q.shape
        num_kv_heads = key_cache.shape[2]
        group = num_q_heads // num_kv_heads
        blocks = block_tables.long()
        k = key_cache[blocks].to(acc) * k_scale[blocks].to(acc).unsqueeze(-1)   # [B, nblk, P, Hkv, D]
        v = value_cache[blocks].to(acc) * v_scale[blocks].to(acc).unsqueeze(-1)
        k = k.flatten(1, 2).transpose(1, 2)                                       # [B, Hkv, L, D]
        v = v.flatten(1, 2).transpose(1, 2)
        qg = q.to(acc).view(batch, num_kv_heads, group, head_dim)
        scores = (qg @ k.transpose(-1, -2)) * self.scale
        pos = torch.arange(k.shape[2], device=q.device)
        padding = pos[None, :] >= seq_lens[:, None].long()
        scores = scores.masked_fill(padding[:, None, None, :], float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        return (probs @ v).reshape(batch, num_q_heads, head_dim).to(q.dtype)
