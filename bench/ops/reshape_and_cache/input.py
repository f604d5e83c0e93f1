import torch


def _slot_mapping(num_tokens, num_seqs, block_size, num_blocks, device):
    """num_seqs sequences split the tokens as evenly as possible; each continues at a random
    offset of its own fresh block (the partly filled last block of its context) and runs on
    through further blocks drawn from a random permutation of the pool. About 1% of tokens
    (at least one from 8 tokens up) are padding with slot -1, as CUDA-graph padding produces."""
    base, extra = divmod(num_tokens, num_seqs)
    lens = [base + (1 if i < extra else 0) for i in range(num_seqs)]
    starts = torch.randint(0, block_size, (num_seqs,), device=device).tolist()
    need = [(s + n + block_size - 1) // block_size for s, n in zip(starts, lens)]
    assert sum(need) <= num_blocks, "cache too small for this shape"
    perm = torch.randperm(num_blocks, device=device)
    pieces, used = [], 0
    for s, n, u in zip(starts, lens, need):
        pos = torch.arange(s, s + n, device=device)
        blocks = perm[used:used + u]
        pieces.append(blocks[pos // block_size] * block_size + pos % block_size)
        used += u
    slots = torch.cat(pieces)
    # A single decode token is never padding (the op would write nothing).
    num_pad = max(1, num_tokens // 100) if num_tokens >= 8 else 0
    pad = torch.randperm(num_tokens, device=device)[:num_pad]
    slots[pad] = -1
    return slots.to(torch.int64)


def _make_inputs(num_tokens, num_kv_heads, head_dim, num_blocks, num_seqs, block_size=16,
                 device="cuda"):
    cache_shape = (num_blocks, block_size, num_kv_heads, head_dim)
    return {
        "key": torch.randn(num_tokens, num_kv_heads, head_dim, device=device,
                           dtype=torch.bfloat16),
        "value": torch.randn(num_tokens, num_kv_heads, head_dim, device=device,
                             dtype=torch.bfloat16),
        # Earlier tokens' K/V: untouched entries must survive bit for bit.
        "key_cache": torch.randn(cache_shape, device=device, dtype=torch.bfloat16),
        "value_cache": torch.randn(cache_shape, device=device, dtype=torch.bfloat16),
        "slot_mapping": _slot_mapping(num_tokens, num_seqs, block_size, num_blocks, device),
    }
