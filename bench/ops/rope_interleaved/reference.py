import torch
import torch.nn as nn


class Model(nn.Module):
    """GPT-J-style (interleaved pairs) rotary embedding on query and key.

    Pair i of a head is (x[2i], x[2i+1]); with cos_i, sin_i taken from
    cos_sin_cache[positions[t]] (first D/2 columns cos, last D/2 sin):
        out[2i]   = x[2i] * cos_i - x[2i+1] * sin_i
        out[2i+1] = x[2i+1] * cos_i + x[2i] * sin_i
    rotary_dim == head_size. Computed in fp32, rounded once to the activation dtype.
    """

    def __init__(self):
        super().__init__()

    def forward(self, positions, query, key, cos_sin_cache):
        compute = torch.promote_types(query.dtype, torch.float32)
        cos, sin = cos_sin_cache.index_select(0, positions).to(compute).chunk(2, dim=-1)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        return _rotate_pairs(query, cos, sin), _rotate_pairs(key, cos, sin)


def _rotate_pairs(x, cos, sin):
    pairs = x.to(cos.dtype).unflatten(-1, (-1, 2))
    even, odd = pairs[..., 0], pairs[..., 1]
    out = torch.stack((even * cos - odd * sin, odd * cos + even * sin), dim=-1)
    return out.flatten(-2).to(x.dtype)
