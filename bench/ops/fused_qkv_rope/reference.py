import torch
import torch.nn as nn


class Model(nn.Module):
    """Split the fused QKV projection output and apply NeoX RoPE to q and k.

    qkv: [T, (Hq + 2*Hkv) * D], columns ordered q heads, k heads, v heads (the
    layout of vLLM's QKVParallelLinear). Returns contiguous
    q [T, Hq, D], k [T, Hkv, D] (rotated) and v [T, Hkv, D] (copied).
    Rotation as in rope_neox: fp32 math, one rounding to the activation dtype.
    """

    def __init__(self, num_q_heads, num_kv_heads, head_size):
        super().__init__()
        self.num_q_heads = num_q_heads
        self.num_kv_heads = num_kv_heads
        self.head_size = head_size

    def forward(self, positions, qkv, cos_sin_cache):
        q_size = self.num_q_heads * self.head_size
        kv_size = self.num_kv_heads * self.head_size
        q, k, v = qkv.split((q_size, kv_size, kv_size), dim=-1)
        q = q.unflatten(-1, (self.num_q_heads, self.head_size))
        k = k.unflatten(-1, (self.num_kv_heads, self.head_size))
        v = v.unflatten(-1, (self.num_kv_heads, self.head_size))

        compute = torch.promote_types(qkv.dtype, torch.float32)
        cos, sin = cos_sin_cache.index_select(0, positions).to(compute).chunk(2, dim=-1)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        return _rotate_half_split(q, cos, sin), _rotate_half_split(k, cos, sin), v.contiguous()


def _rotate_half_split(x, cos, sin):
    x1, x2 = x.to(cos.dtype).chunk(2, dim=-1)
    out = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    return out.to(x.dtype).contiguous()
