import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Per-request top-k then top-p (nucleus) filtering of sampling logits.

    Row b keeps logit v iff all of:
      * top-k: v >= the k-th largest value of the row (ties with it are all kept;
        k is clamped to [1, V], k = V disables top-k);
      * top-p: the softmax mass, over the top-k survivors, of the values strictly
        greater than v is < p (the smallest high-to-low prefix whose mass reaches
        p, with ties at its edge kept). p >= 1 disables top-p; the largest value is
        always kept.
    Every other entry becomes -inf; kept entries are returned unchanged.
    Softmax and the running mass are fp32 (over the row sorted high to low).
    """

    def __init__(self):
        super().__init__()

    def forward(self, logits, top_k, top_p):
        compute = torch.promote_types(logits.dtype, torch.float32)
        vocab = logits.shape[-1]
        x = logits.to(compute)
        ranked = torch.sort(x, dim=-1, descending=True).values

        k = top_k.clamp(1, vocab).to(torch.int64).unsqueeze(-1)
        in_top_k = ranked >= ranked.gather(-1, k - 1)

        probs = torch.softmax(ranked.masked_fill(~in_top_k, float("-inf")), dim=-1)
        # Exclusive running sum: mass of the entries ranked strictly above.
        mass_above = F.pad(torch.cumsum(probs, dim=-1)[..., :-1], (1, 0))
        p = top_p.to(compute).unsqueeze(-1)
        keep = in_top_k & ((mass_above < p) | (p >= 1))

        # keep is a prefix of the ranking; its last value is the row threshold.
        num_keep = keep.sum(dim=-1, keepdim=True).clamp(min=1)
        threshold = ranked.gather(-1, num_keep - 1)
        return logits.masked_fill(x < threshold, float("-inf"))
