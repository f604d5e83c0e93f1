import torch
import torch.nn as nn


class Model(nn.Module):
    """Gumbel-max sampling of one token per request from temperature-scaled logits.

    logits [B, V] (fp32, as samplers receive them after the lm_head cast), temperature [B] > 0,
    exp_noise [B, V] ~ Exp(1) -> token ids [B] int64:

        token[b] = argmax_v ( logits[b, v] / temperature[b] - log(exp_noise[b, v]) )

    -log(E) with E ~ Exp(1) is a standard Gumbel variable, so token[b] is a draw from
    softmax(logits[b] / temperature[b]) (the Gumbel-max trick). It is the same draw as vLLM's
    `probs.div_(q).argmax()` (q ~ Exp(1)) in exact arithmetic, without forming the probabilities.
    The noise is an input so that the result is deterministic and checkable. Equal maxima go to
    the lowest index (torch.argmax's rule).
    """

    def __init__(self):
        super().__init__()

    def forward(self, logits, temperature, exp_noise):
        acc = torch.promote_types(logits.dtype, torch.float32)
        scores = logits.to(acc) / temperature.to(acc).unsqueeze(-1) - torch.log(exp_noise.to(acc))
        return torch.argmax(scores, dim=-1)
