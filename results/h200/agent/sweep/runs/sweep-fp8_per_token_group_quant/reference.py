import torch
import torch.nn as nn

FP8_MAX = 448.0  # largest finite float8_e4m3fn value


class Model(nn.Module):
    """Dynamic per-token-group FP8 (e4m3fn) quantization (DeepSeek-V3 block FP8).

    Each row of x [T, H] is cut into H / group_size contiguous groups g:
    scale[t, g] = max(amax(|x[t, g]|) / 448, min_scale)      fp32, [T, H / group_size]
    q[t, i]     = fp8(clamp(x[t, i] / scale[t, g(i)], -448, 448))
    Scales are row-major (one row of scales per token). min_scale defaults to
    1 / (448 * 512), the floor of vLLM's per_token_group_quant_fp8 CUDA kernel.
    """

    def __init__(self, group_size=128, min_scale=1.0 / (FP8_MAX * 512.0)):
        super().__init__()
        self.group_size = group_size
        self.min_scale = min_scale

    def forward(self, x):
        compute = torch.promote_types(x.dtype, torch.float32)
        groups = x.to(compute).unflatten(-1, (-1, self.group_size))
        amax = groups.abs().amax(dim=-1, keepdim=True)
        scale = torch.clamp(amax / FP8_MAX, min=self.min_scale)
        q = torch.clamp(groups / scale, -FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
        return q.flatten(-2), scale.squeeze(-1).to(torch.float32)
