import torch
import torch.nn as nn


class Model(nn.Module):
    """NeoX-style (half-split) rotary embedding on query and key.

    For each token t and head h, with x = [x1, x2] split into halves of D/2 and
    cos, sin = cos_sin_cache[positions[t]].chunk(2):
        out = [x1 * cos - x2 * sin, x2 * cos + x1 * sin]
    rotary_dim == head_size (the whole head is rotated). The rotation is computed
    in fp32 (as FlashInfer's and SGLang's kernels do) and rounded once to the
    activation dtype.
    """

    def __init__(self):
        super().__init__()

    def forward(self, positions, query, key, cos_sin_cache):
        compute = torch.promote_types(query.dtype, torch.float32)
        cos, sin = cos_sin_cache.index_select(0, positions).to(compute).chunk(2, dim=-1)
        # [T, D/2] -> [T, 1, D/2], broadcast over heads
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        return _rotate_half_split(query, cos, sin), _rotate_half_split(key, cos, sin)


def _rotate_half_split(x, cos, sin):
    x1, x2 = x.to(cos.dtype).chunk(2, dim=-1)
    out = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    return out.to(x.dtype)
