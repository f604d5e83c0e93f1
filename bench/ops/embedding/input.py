import torch


def _make_inputs(num_tokens, vocab_size, hidden_size, device="cuda"):
    # Trained embedding rows have std ~0.02 in Llama-class models; uniform ids over the vocab.
    ids = torch.randint(0, vocab_size, (num_tokens,), device=device, dtype=torch.int64)
    weight = torch.randn(vocab_size, hidden_size, device=device, dtype=torch.bfloat16) * 0.02
    return {"ids": ids, "weight": weight}
