import torch

# Trained lm_head logits are roughly N(0, 2^2) over the vocabulary with a heavier upper tail;
# the spread sets how many terms matter in the log-sum-exp.
LOGIT_STD = 2.0
# Share of positions whose label is ignore_index (-100): padding and, in SFT, prompt tokens.
IGNORED = 0.1


def _make_inputs(num_tokens, vocab_size, device="cuda"):
    logits = (torch.randn(num_tokens, vocab_size, device=device) * LOGIT_STD).to(torch.bfloat16)
    labels = torch.randint(0, vocab_size, (num_tokens,), device=device)
    labels = torch.where(torch.rand(num_tokens, device=device) < IGNORED, -100, labels)
    return {"logits": logits, "labels": labels}
