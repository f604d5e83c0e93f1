import torch

# Logit spread as in top_k_top_p_filter: N(0, 5^2) over ~150k tokens puts ~15% of the mass on
# the top token, close to what chat models show.
LOGIT_STD = 5.0
# The winner's score is kept at least MARGIN above the runner-up (score units, logits / T):
# the candidate's fp32 division and log (approximate on the GPU, ~2 ulp) then cannot flip the
# argmax. Without it two scores within ~1e-5 occur about once per 1e5 rows. Moving one noise
# value by a factor exp(-2e-3) changes the sampling distribution by under 0.2% on the rows it
# touches (those with a near-tie, ~1e-3 of them).
MARGIN = 1e-3


def _make_inputs(batch, vocab_size, device="cuda"):
    logits = torch.randn(batch, vocab_size, device=device) * LOGIT_STD
    # Requests mix greedy-like and creative temperatures; 0 (greedy) is a separate argmax path.
    temperature = 0.5 + torch.rand(batch, device=device)
    noise = torch.empty(batch, vocab_size, device=device).exponential_().clamp_min(1e-30)
    scores = logits.double() / temperature.double().unsqueeze(-1) - torch.log(noise.double())
    top2 = scores.topk(2, dim=-1)
    close = (top2.values[:, 0] - top2.values[:, 1]) < MARGIN
    rows = torch.nonzero(close).flatten()
    noise[rows, top2.indices[rows, 0]] *= torch.exp(torch.tensor(-2 * MARGIN, device=device))
    return {"logits": logits, "temperature": temperature, "exp_noise": noise}
