import torch
import torch.nn as nn


class Model(nn.Module):
    """Per-token cross-entropy over a large vocabulary, with its log-sum-exp.

    logits [T, V] (bf16, the lm_head output), labels [T] int64 -> (loss [T] fp32, lse [T] fp32):

        lse[t]  = log(sum_v exp(logits[t, v]))
        loss[t] = lse[t] - logits[t, labels[t]],  0 where labels[t] == ignore_index

    in fp32 (F.cross_entropy(..., reduction="none") on upcast logits). lse is what a backward pass
    keeps (d logits = softmax - onehot = exp(logits - lse) - onehot), and -loss is the token's
    log-probability (RL rollouts, prompt scoring). lse is computed for ignored tokens too.
    """

    def __init__(self, ignore_index: int = -100):
        super().__init__()
        self.ignore_index = ignore_index

    def forward(self, logits, labels):
        acc = torch.promote_types(logits.dtype, torch.float32)
        x = logits.to(acc)
        lse = torch.logsumexp(x, dim=-1)
        ignored = labels == self.ignore_index
        picked = x.gather(-1, labels.masked_fill(ignored, 0).unsqueeze(-1)).squeeze(-1)
        loss = torch.where(ignored, torch.zeros_like(lse), lse - picked)
        return loss, lse
