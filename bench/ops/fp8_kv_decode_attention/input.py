import torch

FP8_MAX = 448.0   # largest finite float8_e4m3fn


def _seq_lens(batch, max_seq_len, device):
    """ceil(max_seq_len * i / batch), i = 1..batch, shuffled (as paged_decode_attention)."""
    i = torch.arange(1, batch + 1, device=device, dtype=torch.int64)
    lens = (max_seq_len * i + batch - 1) // batch
    return lens[torch.randperm(batch, device=device)].to(torch.int32)


def _block_tables(seq_lens, block_size, max_blocks, spare_blocks, device):
    used = (seq_lens.long() + block_size - 1) // block_size
    num_blocks = int(used.sum()) + spare_blocks
    perm = torch.randperm(num_blocks, device=device).to(torch.int32)
    tables = torch.zeros(seq_lens.numel(), max_blocks, dtype=torch.int32, device=device)
    starts = torch.cumsum(used, 0) - used
    for b, (s, u) in enumerate(zip(starts.tolist(), used.tolist())):
        tables[b, :u] = perm[s:s + u]
    return tables, num_blocks


def _quantize(shape, device):
    """bf16 K or V ~N(0, 1), quantised as a cache write does: per (slot, head) scale = amax / 448."""
    x = torch.randn(shape, device=device, dtype=torch.bfloat16).float()
    scale = x.abs().amax(dim=-1).clamp_min(1e-6) / FP8_MAX
    return (x / scale.unsqueeze(-1)).to(torch.float8_e4m3fn), scale


def _make_inputs(batch, max_seq_len, num_q_heads, num_kv_heads, head_dim, block_size=16, device="cuda"):
    seq_lens = _seq_lens(batch, max_seq_len, device)
    max_blocks = (max_seq_len + block_size - 1) // block_size
    tables, num_blocks = _block_tables(seq_lens, block_size, max_blocks, 8, device)
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    key_cache, k_scale = _quantize(shape, device)
    value_cache, v_scale = _quantize(shape, device)
    return {
        "q": torch.randn(batch, num_q_heads, head_dim, device=device, dtype=torch.bfloat16),
        "key_cache": key_cache, "value_cache": value_cache, "k_scale": k_scale, "v_scale": v_scale,
        "block_tables": tables, "seq_lens": seq_lens,
    }
