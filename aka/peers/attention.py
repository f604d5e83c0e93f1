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


_FLEX_COMPILED = {}


def _flex():
    """flex_attention, compiled once per process on a GPU (the Triton flex-decoding kernels); the
    eager form elsewhere (a math path: small CPU shapes only, as the tests run it)."""
    from torch.nn.attention.flex_attention import flex_attention
    if torch.cuda.is_available() and "f" not in _FLEX_COMPILED:
        _FLEX_COMPILED["f"] = torch.compile(flex_attention, dynamic=False)
    return _FLEX_COMPILED.get("f", flex_attention)


class FlexPagedDecodePeer(nn.Module):
    """Paged decode through PyTorch's flex_attention, the torch-native way to read a vLLM-layout
    cache in place: the cache [num_blocks, block_size, Hkv, D] is one key/value pool of
    num_blocks * block_size positions (batch 1, broadcast over the sequences), and a block mask
    with the KV block size set to the page size lists each sequence's pages from its block table:
    full pages as full blocks (no mask), the last partial page through a mask_mod that keeps
    positions below the sequence's length. The query is one token per sequence, GQA via
    enable_gqa.

    The block mask is built once per (block_tables, seq_lens) pair and reused while neither
    tensor changes (same storage, same version counter), as a serving engine builds it once per
    decode step for every layer; so the timed call is the attention alone."""

    def __init__(self, ref):
        super().__init__()
        self.scale = float(ref.scale)
        self._mask = None   # (key, BlockMask)

    @staticmethod
    def unavailable(device: str) -> str | None:
        try:
            from torch.nn.attention.flex_attention import BlockMask  # noqa: F401
        except ImportError:
            return f"this torch ({torch.__version__}) has no flex_attention"
        return None

    def _block_mask(self, block_tables, seq_lens, num_blocks: int, page: int):
        from torch.nn.attention.flex_attention import BlockMask
        key = (block_tables.data_ptr(), block_tables._version, tuple(block_tables.shape),
               seq_lens.data_ptr(), seq_lens._version, num_blocks, page)
        if self._mask is not None and self._mask[0] == key:
            return self._mask[1]
        dev, (batch, max_blocks) = block_tables.device, block_tables.shape
        seq = seq_lens.long()
        n_full = seq // page                                        # pages every position of which is valid
        has_tail = (seq % page != 0).to(torch.int32)                # a last, partial page
        j = torch.arange(max_blocks, device=dev)
        tables = block_tables.long()
        # physical page -> its owner and its place in the owner's sequence (spare pages: owner -1);
        # table entries past a sequence's pages go to a dump slot num_blocks, never read
        used = j[None, :] < (n_full + has_tail)[:, None]
        slot = torch.where(used, tables, torch.full_like(tables, num_blocks)).flatten()
        owner = torch.full((num_blocks + 1,), -1, dtype=torch.long, device=dev).scatter_(
            0, slot, torch.arange(batch, device=dev).repeat_interleave(max_blocks))
        logical = torch.zeros(num_blocks + 1, dtype=torch.long, device=dev).scatter_(
            0, slot, j.repeat(batch))
        full_idx = torch.zeros(batch, 1, 1, num_blocks, dtype=torch.int32, device=dev)
        full_idx[..., :max_blocks] = block_tables.view(batch, 1, 1, max_blocks)
        tail_idx = torch.zeros(batch, 1, 1, num_blocks, dtype=torch.int32, device=dev)
        tail_idx[..., 0] = tables.gather(1, n_full.clamp(max=max_blocks - 1)[:, None]).view(batch, 1, 1).int()

        def mask_mod(b, h, q_idx, kv_idx):
            p = kv_idx // page
            return (owner[p] == b) & (logical[p] * page + kv_idx % page < seq[b])

        bm = BlockMask.from_kv_blocks(has_tail.view(batch, 1, 1), tail_idx,
                                      n_full.to(torch.int32).view(batch, 1, 1), full_idx,
                                      BLOCK_SIZE=(1, page), mask_mod=mask_mod, seq_lengths=(1, num_blocks * page))
        self._mask = (key, bm)
        return bm

    def forward(self, q, key_cache, value_cache, block_tables, seq_lens):
        num_blocks, page, num_kv_heads, head_dim = key_cache.shape
        batch = q.shape[0]
        # [B, Hkv, pool, D] views of the one pool (batch stride 0: nothing copied)
        k = key_cache.view(1, num_blocks * page, num_kv_heads, head_dim).transpose(1, 2).expand(batch, -1, -1, -1)
        v = value_cache.view(1, num_blocks * page, num_kv_heads, head_dim).transpose(1, 2).expand(batch, -1, -1, -1)
        bm = self._block_mask(block_tables, seq_lens, num_blocks, page)
        out = _flex()(q.unsqueeze(2), k, v, block_mask=bm, scale=self.scale,
                      enable_gqa=q.shape[1] != num_kv_heads)
        return out.squeeze(2)
