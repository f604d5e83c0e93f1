"""Attention peers: PyTorch's scaled_dot_product_attention (FlashAttention-2 on an H100/H200 for
bf16 and head_dim <= 256; the math backend on a CPU)."""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class SDPAVarlenPeer(nn.Module):
    """Causal GQA prefill over packed sequences, one SDPA call per sequence (is_causal,
    enable_gqa), as a user without flash_attn_varlen_func would run it. The sequence bounds are
    read on the host (cu_seqlens.tolist(), as the reference does), so the call is timed with CUDA
    events, not a graph."""

    def __init__(self, ref):
        super().__init__()
        self.scale = float(ref.scale)

    def forward(self, q, k, v, cu_seqlens):
        gqa = q.shape[1] != k.shape[1]
        out = torch.empty_like(q)
        bounds = cu_seqlens.tolist()
        for start, end in zip(bounds[:-1], bounds[1:]):
            if end <= start:
                continue
            qs, ks, vs = (t[start:end].transpose(0, 1).unsqueeze(0) for t in (q, k, v))  # [1, H, S, D]
            o = F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, scale=self.scale, enable_gqa=gqa)
            out[start:end] = o[0].transpose(0, 1)
        return out
