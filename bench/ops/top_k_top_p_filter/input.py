import torch

# Logit spread: with N(0, 5^2) logits over ~150k tokens the top token holds ~15% of
# the mass and the p = 0.95 nucleus is ~60 tokens, close to what chat models show.
LOGIT_STD = 5.0
MAX_TOP_K = 1024
# Smallest probability allowed for the last token inside the nucleus. p is set
# halfway into that token's mass, so the fp32 running sum (error ~1e-6) of any
# summation order lands on the same side of p as the float64 one.
MIN_EDGE_PROB = 1e-4


def _make_inputs(num_seqs, vocab_size, device="cuda"):
    logits = torch.randn(num_seqs, vocab_size, device=device) * LOGIT_STD

    # A quarter of the requests leave top-k off (k = V), a quarter top-p off (p = 1).
    top_k = torch.randint(1, min(MAX_TOP_K, vocab_size) + 1, (num_seqs,), device=device)
    top_k = torch.where(torch.rand(num_seqs, device=device) < 0.25, vocab_size, top_k)
    wanted_p = 0.5 + 0.45 * torch.rand(num_seqs, dtype=torch.float64, device=device)

    ranked = logits.double().sort(dim=-1, descending=True).values
    kth = ranked.gather(-1, (top_k - 1).unsqueeze(-1))
    probs = torch.softmax(ranked.masked_fill(ranked < kth, float("-inf")), dim=-1)
    mass_above = torch.cumsum(probs, dim=-1) - probs
    # Nucleus size for the wanted p, capped so its last token is not a sliver.
    n = (mass_above < wanted_p.unsqueeze(-1)).sum(-1)
    n = torch.minimum(n, (probs >= MIN_EDGE_PROB).sum(-1)).clamp(min=1).unsqueeze(-1)
    top_p = (mass_above.gather(-1, n - 1) + 0.5 * probs.gather(-1, n - 1)).squeeze(-1)
    top_p = torch.where(torch.rand(num_seqs, device=device) < 0.25, 1.0, top_p)

    return {"logits": logits, "top_k": top_k, "top_p": top_p.to(torch.float32)}
