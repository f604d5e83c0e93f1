import torch
import torch.nn as nn
import torch.nn.functional as F

FP8_MAX = 448.0  # largest finite float8_e4m3fn value


class Model(nn.Module):
    """SwiGLU activation fused with per-token-group FP8 quantization.

    x [T, 2I] = [gate | up] (gate first, vLLM's MergedColumnParallelLinear layout).
    y = silu(gate) * up, kept in fp32 (never rounded to bf16: the point of the
    fusion, as in vLLM's silu_mul_fp8_quant_deep_gemm Triton kernel). Then per
    group of group_size columns:
    scale[t, g] = max(amax(|y[t, g]|) / 448, min_scale)     fp32, [T, I / group_size]
    q[t, i]     = fp8(clamp(y[t, i] / scale[t, g(i)], -448, 448))   [T, I]
    """

    def __init__(self, group_size=128, min_scale=1.0 / (FP8_MAX * 512.0)):
        super().__init__()
        self.group_size = group_size
        self.min_scale = min_scale

    def forward(self, x):
        compute = torch.promote_types(x.dtype, torch.float32)
        gate, up = x.to(compute).chunk(2, dim=-1)
        y = F.silu(gate) * up
        groups = y.unflatten(-1, (-1, self.group_size))
        amax = groups.abs().amax(dim=-1, keepdim=True)
        scale = torch.clamp(amax / FP8_MAX, min=self.min_scale)
        q = torch.clamp(groups / scale, -FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
        return q.flatten(-2), scale.squeeze(-1).to(torch.float32)
