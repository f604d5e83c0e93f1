import torch
import torch.nn as nn


class Model(nn.Module):
    """Sampling softmax over the vocabulary: probs = softmax(logits, dim=-1), always fp32 out.

    Serving samples from fp32 probabilities whatever the logits' dtype: vLLM's sampler casts the
    lm_head's bf16 logits to fp32 before the temperature and softmax, so its softmax reads fp32;
    a fused kernel reads the bf16 logits directly. Both input dtypes occur (the `dtype` input
    kwarg); the output is fp32 (fp64 only when the harness upcasts inputs to validate).
    Max-subtracted, exp and sum in fp32.
    """

    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        acc = torch.promote_types(logits.dtype, torch.float32)
        lf = logits.to(acc)
        e = torch.exp(lf - lf.amax(dim=-1, keepdim=True))
        return e / e.sum(dim=-1, keepdim=True)
