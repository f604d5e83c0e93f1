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
        block_size, width = kv_c_and_k_pe.shape[1:]
        r = q_nope.shape[-1]  # kv_lora_rank
        out = torch.empty_like(q_nope)
        for b, n in enumerate(seq_lens.tolist()):
            blocks = block_tables[b, : (n + block_size - 1) // block_size].long()
            entries = kv_c_and_k_pe[blocks].reshape(-1, width)[:n].to(acc)   # [n, 576]
            c, k_pe = entries[:, :r], entries[:, r:]
            scores = (q_nope[b].to(acc) @ c.t() + q_pe[b].to(acc) @ k_pe.t()) * self.scale
            probs = torch.softmax(scores, dim=-1)                           # [H, n]
            out[b] = (probs @ c).to(q_nope.dtype)
        return out
