import torch


def _make_inputs(num_tokens: int, num_q_heads: int, num_kv_heads: int, head_dim: int,
                 device: str = "cuda") -> dict[str, torch.Tensor]:
    # q and k as contiguous per-rank tensors (vLLM hands the norm views of the fused qkv
    # projection; a contiguous copy keeps the contract simple and moves the same bytes).
    q = torch.randn(num_tokens, num_q_heads, head_dim, device=device).to(torch.bfloat16)
    k = torch.randn(num_tokens, num_kv_heads, head_dim, device=device).to(torch.bfloat16)
    q_weight = (1.0 + 0.1 * torch.randn(head_dim, device=device)).to(torch.bfloat16)
    k_weight = (1.0 + 0.1 * torch.randn(head_dim, device=device)).to(torch.bfloat16)
    return {"q": q, "k": k, "q_weight": q_weight, "k_weight": k_weight}
