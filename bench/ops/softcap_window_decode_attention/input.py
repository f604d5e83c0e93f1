import torch


def _seq_lens(batch, max_seq_len, device):
    """Context lengths ceil(max_seq_len * i / batch), i = 1..batch, shuffled (as
    paged_decode_attention): a spread up to max_seq_len, some inside the window, some past it."""
    i = torch.arange(1, batch + 1, device=device, dtype=torch.int64)
    lens = (max_seq_len * i + batch - 1) // batch
    return lens[torch.randperm(batch, device=device)].to(torch.int32)


def _block_tables(seq_lens, block_size, max_blocks, spare_blocks, device):
    """Each sequence owns blocks drawn from a random permutation of the pool; unused table
    entries are 0 (vLLM's padding)."""
    used = (seq_lens.long() + block_size - 1) // block_size
    num_blocks = int(used.sum()) + spare_blocks
    perm = torch.randperm(num_blocks, device=device).to(torch.int32)
    tables = torch.zeros(seq_lens.numel(), max_blocks, dtype=torch.int32, device=device)
    starts = torch.cumsum(used, 0) - used
    for b, (s, u) in enumerate(zip(starts.tolist(), used.tolist())):
        tables[b, :u] = perm[s:s + u]
    return tables, num_blocks


def _make_inputs(batch, max_seq_len, num_q_heads, num_kv_heads, head_dim, block_size=16,
                 device="cuda"):
    seq_lens = _seq_lens(batch, max_seq_len, device)
    max_blocks = (max_seq_len + block_size - 1) // block_size
    tables, num_blocks = _block_tables(seq_lens, block_size, max_blocks, 8, device)
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    # q and k ~N(0, 1): with scale 1/16 at head_dim 256 the raw scores have std 1, and the
    # outlier stage (x50 on q) drives them to ~50, where the soft-cap bends them.
    return {
        "q": torch.randn(batch, num_q_heads, head_dim, device=device, dtype=torch.bfloat16),
        "key_cache": torch.randn(shape, device=device, dtype=torch.bfloat16),
        "value_cache": torch.randn(shape, device=device, dtype=torch.bfloat16),
        "block_tables": tables,
        "seq_lens": seq_lens,
    }
