import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """SwiGLU activation of the fused gate/up projection: x [T, 2I] -> silu(x[:, :I]) * x[:, I:].

    The first half is the gate, the second half the up projection (vLLM's and SGLang's
    MergedColumnParallelLinear order). Computed in fp32, rounded once to x.dtype (FlashInfer);
    vLLM's CUDA kernel rounds silu(gate) to bf16 before the multiply, within one bf16 ulp.
    """

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        acc = torch.promote_types(x.dtype, torch.float32)
        d = x.shape[-1] // 2
        gate = x[..., :d].to(acc)
        up = x[..., d:].to(acc)
        return (F.silu(gate) * up).to(x.dtype)
