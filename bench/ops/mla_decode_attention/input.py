import torch


def _seq_lens(batch, max_seq_len, device):
    """Context lengths ceil(max_seq_len * i / batch), i = 1..batch, shuffled (sum ~
    max_seq_len * (batch + 1) / 2, the figure the cost formula uses)."""
    i = torch.arange(1, batch + 1, device=device, dtype=torch.int64)
    lens = (max_seq_len * i + batch - 1) // batch
    return lens[torch.randperm(batch, device=device)].to(torch.int32)


def _make_inputs(batch, max_seq_len, num_heads, block_size=64, kv_lora_rank=512, rope_dim=64,
                 device="cuda"):
    seq_lens = _seq_lens(batch, max_seq_len, device)
    used = (seq_lens.long() + block_size - 1) // block_size
    num_blocks = int(used.sum()) + 4  # a few spare blocks of stale data
    perm = torch.randperm(num_blocks, device=device).to(torch.int32)
    max_blocks = (max_seq_len + block_size - 1) // block_size
    tables = torch.zeros(batch, max_blocks, dtype=torch.int32, device=device)
    starts = torch.cumsum(used, 0) - used
    for b, (s, u) in enumerate(zip(starts.tolist(), used.tolist())):
        tables[b, :u] = perm[s:s + u]
    # The latent c is the output of kv_a_layernorm (an RMSNorm), so ~N(0,1); the queries are
    # ~N(0,1) too. Dot products over 512 + 64 dims times 1/sqrt(192) give logits of std ~1.7,
    # a peaked but not one-hot softmax.
    width = kv_lora_rank + rope_dim
    return {
        "q_nope": torch.randn(batch, num_heads, kv_lora_rank, device=device, dtype=torch.bfloat16),
        "q_pe": torch.randn(batch, num_heads, rope_dim, device=device, dtype=torch.bfloat16),
        "kv_c_and_k_pe": torch.randn(num_blocks, block_size, width, device=device,
                                     dtype=torch.bfloat16),
        "block_tables": tables,
        "seq_lens": seq_lens,
    }
