import torch


def _make_inputs(num_seqs, seq_len, num_q_heads, num_kv_heads, head_dim, device="cuda"):
    """A ragged prefill batch: ceil(num_seqs/2) sequences of seq_len tokens and floor(num_seqs/2)
    of seq_len // 2, in a random order each call. The multiset is fixed so the cost formula
    is exact; the order and the two lengths make a kernel honour cu_seqlens.
    """
    n_long = (num_seqs + 1) // 2
    lens = torch.tensor([seq_len] * n_long + [seq_len // 2] * (num_seqs - n_long),
                        dtype=torch.int32, device=device)
    lens = lens[torch.randperm(num_seqs, device=device)]
    cu_seqlens = torch.zeros(num_seqs + 1, dtype=torch.int32, device=device)
    cu_seqlens[1:] = torch.cumsum(lens, dim=0)
    total = int(cu_seqlens[-1])
    # q and k ~N(0,1) as after RoPE of RMS-normed projections; logits q.k*scale then have unit
    # variance, so softmax is neither flat nor one-hot.
    q = torch.randn(total, num_q_heads, head_dim, device=device, dtype=torch.bfloat16)
    k = torch.randn(total, num_kv_heads, head_dim, device=device, dtype=torch.bfloat16)
    v = torch.randn(total, num_kv_heads, head_dim, device=device, dtype=torch.bfloat16)
    return {"q": q, "k": k, "v": v, "cu_seqlens": cu_seqlens}
