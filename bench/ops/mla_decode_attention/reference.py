import torch
import torch.nn as nn


class Model(nn.Module):
    """DeepSeek-V3 multi-head latent attention, decode, absorbed form (FlashMLA semantics).

    q_nope [B, H, 512] (the no-RoPE query already multiplied by W_UK, i.e. in latent space),
    q_pe [B, H, 64]; kv_c_and_k_pe [num_blocks, block_size, 576] holds per token the latent
    c (first 512) and the shared RoPE key k_pe (last 64); block_tables [B, max_blocks] int32,
    seq_lens [B] int32 -> out [B, H, 512] in q's dtype, still in latent space (W_UV is applied
    afterwards, outside this op). All H heads share the one latent cache entry per token:

        score[h, t] = (q_nope[h] . c[t] + q_pe[h] . k_pe[t]) * scale,  out[h] = softmax(score[h]) @ c

    with scale = 1/sqrt(128 + 64), the model's qk head dim. fp32 scores, softmax and P @ c.
    The latent width (512) is q_nope's last dim, the RoPE width (64) q_pe's.
    """

    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, q_nope, q_pe, kv_c_and_k_pe, block_tables, seq_lens):
        acc = torch.promote_types(q_nope.dtype, torch.float32)
        r = q_nope.shape[-1]  # kv_lora_rank
        # Every sequence's blocks gathered into one padded [B, L, 576] tensor, L = max_blocks *
        # block_size; positions at or past seq_lens[b] (the table's padding) are masked out of
        # the softmax, so what they hold never reaches the output.
        entries = kv_c_and_k_pe[block_tables.long()].flatten(1, 2).to(acc)
        c, k_pe = entries[..., :r], entries[..., r:]
        scores = (q_nope.to(acc) @ c.transpose(1, 2) + q_pe.to(acc) @ k_pe.transpose(1, 2)) * self.scale
        pos = torch.arange(entries.shape[1], device=q_nope.device)
        padding = pos[None, :] >= seq_lens[:, None].long()                # [B, L]
        scores = scores.masked_fill(padding[:, None, :], float("-inf"))  # [B, H, L]
        probs = torch.softmax(scores, dim=-1)
        return (probs @ c).to(q_nope.dtype)
