import torch


def _make_inputs(batch: int, vocab: int, dtype: str = "bfloat16",
                 device: str = "cuda") -> dict[str, torch.Tensor]:
    # Std 3 spreads the logits the way a trained LM head does (the top token a few percent of
    # the mass over a 150k vocabulary, not the near-uniform rows that std 1 would give).
    logits = 3.0 * torch.randn(batch, vocab, device=device)
    return {"logits": logits.to(getattr(torch, dtype))}
