import torch


def _cos_sin_cache(max_position, head_size, rope_theta, device):
    # fp32 [max_position, head_size]: cos of the D/2 frequencies, then their sin.
    exponent = torch.arange(0, head_size, 2, dtype=torch.float64, device=device) / head_size
    inv_freq = 1.0 / (rope_theta ** exponent)
    t = torch.arange(max_position, dtype=torch.float64, device=device)
    freqs = torch.outer(t, inv_freq)
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1).to(torch.float32)


def _make_inputs(num_tokens, num_q_heads, num_kv_heads, head_size, max_position, rope_theta,
                 device="cuda"):
    width = (num_q_heads + 2 * num_kv_heads) * head_size
    return {
        "positions": torch.randint(0, max_position, (num_tokens,), dtype=torch.int64, device=device),
        "qkv": torch.randn(num_tokens, width, dtype=torch.bfloat16, device=device),
        "cos_sin_cache": _cos_sin_cache(max_position, head_size, rope_theta, device),
    }
