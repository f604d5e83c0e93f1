"""A Llama-style decoder block in plain PyTorch: the model `aka convert` is shown on.

RMSNorm -> attention (fused QKV projection, neox-style RoPE, causal GQA) -> residual ->
RMSNorm -> SwiGLU MLP (fused gate/up projection, SiLU-and-multiply) -> residual, laid out the
way vLLM's Llama is: tokens flattened to [T, hidden], positions [T], and the activation, the
rotary embedding and the attention core are modules of their own, so each is one operator a
kernel can replace.

    from examples.llama_block import factory
    model, inputs = factory("small")            # 7 tokens, hidden 64: CPU tests, interpreter
    model, inputs = factory("realistic", "cuda")  # Llama-3.1-8B dimensions, 512 tokens, bf16
    out = model(**inputs)

`aka convert model:examples.llama_block:factory` profiles it (`...:factory:size=realistic` for
the large one).
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

# Llama-3.1-8B (hidden 4096, 32 query heads, 8 KV heads of 128, MLP 14336, rope theta 5e5);
# "small" keeps GQA (2 query heads per KV head) and odd sizes (intermediate 88) so a kernel
# that assumes powers of two fails the CPU tests.
SIZES = {
    "small": dict(hidden=64, heads=4, kv_heads=2, head_dim=16, intermediate=88, tokens=7),
    "realistic": dict(hidden=4096, heads=32, kv_heads=8, head_dim=128, intermediate=14336, tokens=512),
}


class RMSNorm(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        rstd = torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (xf * rstd * self.weight.float()).to(x.dtype)


class RotaryEmbedding(nn.Module):
    """Neox-style rotary embedding (rotate halves) of q [T, Hq*D] and k [T, Hk*D] by position."""

    def __init__(self, head_dim: int, base: float = 500000.0):
        super().__init__()
        self.head_dim = head_dim
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        self.register_buffer("inv_freq", inv_freq)

    def forward(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor):
        freqs = positions.float()[:, None] * self.inv_freq[None, :]   # [T, D/2]
        cos, sin = freqs.cos()[:, None, :], freqs.sin()[:, None, :]
        return self._rotate(q, cos, sin), self._rotate(k, cos, sin)

    def _rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        t = x.shape[0]
        xf = x.float().view(t, -1, self.head_dim)
        x1, x2 = xf[..., : self.head_dim // 2], xf[..., self.head_dim // 2:]
        out = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
        return out.reshape(t, -1).to(x.dtype)


class CausalGQAttention(nn.Module):
    """softmax(q k^T / sqrt(D) + causal mask) v over one sequence, KV heads shared by groups of
    query heads; fp32 scores and softmax."""

    def __init__(self, heads: int, kv_heads: int, head_dim: int):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        t, group = q.shape[0], self.heads // self.kv_heads
        qh = q.view(t, self.heads, self.head_dim).transpose(0, 1).float()
        kh = k.view(t, self.kv_heads, self.head_dim).transpose(0, 1).float().repeat_interleave(group, dim=0)
        vh = v.view(t, self.kv_heads, self.head_dim).transpose(0, 1).float().repeat_interleave(group, dim=0)
        scores = (qh @ kh.transpose(1, 2)) / math.sqrt(self.head_dim)
        causal = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
        probs = torch.softmax(scores.masked_fill(causal, float("-inf")), dim=-1)
        return (probs @ vh).transpose(0, 1).reshape(t, self.heads * self.head_dim).to(q.dtype)


class SiluAndMul(nn.Module):
    """silu(x[..., :d]) * x[..., d:], d = last dim / 2, in fp32."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d = x.shape[-1] // 2
        return (F.silu(x[..., :d].float()) * x[..., d:].float()).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, hidden: int, heads: int, kv_heads: int, head_dim: int):
        super().__init__()
        self.q_size, self.kv_size = heads * head_dim, kv_heads * head_dim
        self.qkv_proj = nn.Linear(hidden, self.q_size + 2 * self.kv_size, bias=False)
        self.rotary_emb = RotaryEmbedding(head_dim)
        self.attn = CausalGQAttention(heads, kv_heads, head_dim)
        self.o_proj = nn.Linear(self.q_size, hidden, bias=False)

    def forward(self, positions: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv_proj(x).split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q, k = self.rotary_emb(positions, q, k)
        return self.o_proj(self.attn(q, k, v))


class MLP(nn.Module):
    def __init__(self, hidden: int, intermediate: int):
        super().__init__()
        self.gate_up_proj = nn.Linear(hidden, 2 * intermediate, bias=False)
        self.act_fn = SiluAndMul()
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_up_proj(x)))


class DecoderBlock(nn.Module):
    def __init__(self, hidden: int, heads: int, kv_heads: int, head_dim: int, intermediate: int,
                 eps: float = 1e-5):
        super().__init__()
        self.input_layernorm = RMSNorm(hidden, eps)
        self.self_attn = Attention(hidden, heads, kv_heads, head_dim)
        self.post_attention_layernorm = RMSNorm(hidden, eps)
        self.mlp = MLP(hidden, intermediate)

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        h = x + self.self_attn(positions, self.input_layernorm(x))
        return h + self.mlp(self.post_attention_layernorm(h))


def factory(size: str = "small", device: str = "cpu", dtype: str = "bfloat16", seed: int = 0,
            tokens: int | None = None):
    """(model, example inputs as forward's keyword arguments). Weights are drawn with `seed` so
    two calls build the same block; norm gains near 1 and projections scaled 1/sqrt(fan_in),
    as a trained model's are, so activations stay ~N(0, 1) through the block. `tokens`
    overrides the size's token count."""
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r} (one of {', '.join(SIZES)})")
    cfg = dict(SIZES[size])
    tokens = tokens or cfg.pop("tokens")
    cfg.pop("tokens", None)
    gen = torch.Generator().manual_seed(seed)
    model = DecoderBlock(**cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("layernorm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[-1]))
    dt = getattr(torch, dtype)
    inv_freq = model.self_attn.rotary_emb.inv_freq.clone()
    model = model.to(device=device, dtype=dt).eval()
    model.self_attn.rotary_emb.inv_freq = inv_freq.to(device)  # kept in fp32, as vLLM does
    x = torch.randn(tokens, cfg["hidden"], generator=gen).to(device=device, dtype=dt)
    positions = torch.arange(tokens, device=device) + 3  # a chunk that does not start at 0
    return model, {"x": x, "positions": positions}
