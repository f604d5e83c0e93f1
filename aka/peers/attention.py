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
# The block mask's query block: one query token per sequence fits in one block, but the compiled
# flex-decoding kernel skips every configuration whose BLOCK_M (the next power of two of query
# tokens x GQA group, at least 16) does not divide it (torch/_inductor/kernel/flex/flex_decoding.py,
# torch 2.11-2.13): a query block of 1 would leave it none. 128 covers groups up to 128 (MLA's).
Q_BLOCK = 128


def _flex():
    """flex_attention, compiled once per process on a GPU (the Triton flex-decoding kernels); the
    eager form elsewhere (a math path: small CPU shapes only, as the tests run it)."""
    from torch.nn.attention.flex_attention import flex_attention
    if torch.cuda.is_available() and "f" not in _FLEX_COMPILED:
        # one compile per shape (static): a benchmark op has up to 16 shapes, past dynamo's default
        # of 8 recompiles per code object, after which it would silently run flex eagerly (a dense
        # mask over the whole pool)
        import torch._dynamo.config as dyn
        for name in ("recompile_limit", "cache_size_limit"):
            if hasattr(dyn, name):
                setattr(dyn, name, max(getattr(dyn, name), 64))
        _FLEX_COMPILED["f"] = torch.compile(flex_attention, dynamic=False)
    return _FLEX_COMPILED.get("f", flex_attention)


def _options(group: int, page: int) -> dict | None:
    """flex's kernel options for a GQA group: None (its decoding kernel) for a power of two; the
    main kernel otherwise, which the decoding kernel refuses (Llama-3.1-70B at TP2: 28 query heads
    on 4 KV heads), with blocks the page-sized KV blocks divide."""
    if group & (group - 1) == 0:
        return None
    return {"FORCE_USE_FLEX_ATTENTION": True, "BLOCK_M": 16, "BLOCK_N": min(page, 64)}


MIN_PAGE = 16   # the smallest page (KV block) flex_attention's compiled kernels take


class FlexPagedDecodePeer(nn.Module):
    """Paged decode through PyTorch's flex_attention, the torch-native way to read a vLLM-layout
    cache in place: the cache [num_blocks, block_size, Hkv, D] is one key/value pool of
    num_blocks * block_size positions (broadcast over the sequences, nothing copied), and a block
    mask with the KV block size set to the page size lists each sequence's pages from its block
    table: pages wholly inside what the query sees as full blocks (no mask), the partial ones (the
    last page; with a sliding window also the first) through a mask_mod on the token's place in its
    sequence. The query is one token per sequence, GQA via enable_gqa. A reference with `softcap`
    > 0 gets it as a score_mod (softcap * tanh(score / softcap) on the scaled score) and one with
    `window` sees only its last `window` tokens (Gemma-2's sliding layers).

    The block mask is built once per (block_tables, seq_lens) pair and reused while neither
    tensor changes, as a serving engine builds it once per decode step for every layer; so the
    timed call is the attention alone. A pair is the same tensor objects (held by the cache, so
    their memory cannot be handed to new tensors meanwhile) at the same version counters (an
    in-place edit bumps them); the last MASKS pairs are kept, one per input set the timing
    rotates through."""

    MASKS = 16

    def __init__(self, ref):
        super().__init__()
        self.scale = float(ref.scale)
        self.softcap = float(getattr(ref, "softcap", 0.0) or 0.0)
        window = getattr(ref, "window", None)
        self.window = int(window) if window is not None else None
        self._masks = []    # [(block_tables, its version, seq_lens, its version, num_blocks, page, BlockMask)]

    @staticmethod
    def require_page(page: int, device: str) -> None:
        """Compiled flex (a GPU) takes no page under MIN_PAGE tokens. The KV block is the page, and a
        sequence's pages are not adjacent in the pool, so no larger block can list them (the H100,
        2026-12-06: 8-token pages failed in Inductor's flex template). A CPU's eager flex applies
        the mask densely and takes any page."""
        if device != "cpu" and page < MIN_PAGE:
            raise NotImplementedError(f"flex_attention's Triton kernels take KV blocks of at least {MIN_PAGE} tokens "
                                      f"(tl.dot's smallest tile); this cache pages {page} tokens")

    @staticmethod
    def unavailable(device: str) -> str | None:
        try:
            from torch.nn.attention.flex_attention import BlockMask  # noqa: F401
        except ImportError:
            return f"this torch ({torch.__version__}) has no flex_attention"
        return None

    def _block_mask(self, block_tables, seq_lens, num_blocks: int, page: int):
        from torch.nn.attention.flex_attention import BlockMask
        for i, (bt, btv, sl, slv, nb, pg, bm) in enumerate(self._masks):
            if bt is block_tables and sl is seq_lens and (btv, slv, nb, pg) == (
                    block_tables._version, seq_lens._version, num_blocks, page):
                self._masks.append(self._masks.pop(i))
                return bm
        dev, (batch, max_blocks) = block_tables.device, block_tables.shape
        seq = seq_lens.long()
        lo = (seq - self.window).clamp(min=0) if self.window is not None else torch.zeros_like(seq)
        j = torch.arange(max_blocks, device=dev)
        tables = block_tables.long()
        # per sequence and logical page: seen at all, seen whole
        seen = (j[None, :] >= (lo // page)[:, None]) & (j[None, :] * page < seq[:, None])
        whole = (j[None, :] * page >= lo[:, None]) & ((j[None, :] + 1) * page <= seq[:, None])
        part = seen & ~whole
        # physical page -> its owner and its logical page; table padding (0, a real page of some
        # other sequence) goes to a dump slot num_blocks that no mask reads
        owned = j[None, :] < ((seq + page - 1) // page)[:, None]
        slot = torch.where(owned, tables, torch.full_like(tables, num_blocks)).flatten()
        owner = torch.full((num_blocks + 1,), -1, dtype=torch.long, device=dev).scatter_(
            0, slot, torch.arange(batch, device=dev).repeat_interleave(max_blocks))
        logical = torch.zeros(num_blocks + 1, dtype=torch.long, device=dev).scatter_(
            0, slot, j.repeat(batch))

        def listed(sel):  # the selected pages of each sequence first, in logical order, as [B, 1, 1, num_blocks]
            order = torch.argsort(torch.where(sel, j[None, :], j[None, :] + max_blocks), dim=1, stable=True)
            idx = torch.zeros(batch, 1, 1, num_blocks, dtype=torch.int32, device=dev)
            idx[..., :max_blocks] = tables.gather(1, order).view(batch, 1, 1, max_blocks).int()
            return sel.sum(1).to(torch.int32).view(batch, 1, 1), idx

        window = self.window

        def mask_mod(b, h, q_idx, kv_idx):
            p = kv_idx // page
            pos = logical[p] * page + kv_idx % page
            ok = (owner[p] == b) & (pos < seq[b])
            return ok & (pos >= seq[b] - window) if window is not None else ok

        n_part, part_idx = listed(part)
        n_whole, whole_idx = listed(whole)
        bm = BlockMask.from_kv_blocks(n_part, part_idx, n_whole, whole_idx, BLOCK_SIZE=(Q_BLOCK, page),
                                      mask_mod=mask_mod, seq_lengths=(1, num_blocks * page))
        self._masks = self._masks[-(self.MASKS - 1):] + [
            (block_tables, block_tables._version, seq_lens, seq_lens._version, num_blocks, page, bm)]
        return bm

    def forward(self, q, key_cache, value_cache, block_tables, seq_lens):
        num_blocks, page, num_kv_heads, head_dim = key_cache.shape
        self.require_page(page, q.device.type)
        batch = q.shape[0]
        # [B, Hkv, pool, D] views of the one pool (batch stride 0: nothing copied)
        k = key_cache.view(1, num_blocks * page, num_kv_heads, head_dim).transpose(1, 2).expand(batch, -1, -1, -1)
        v = value_cache.view(1, num_blocks * page, num_kv_heads, head_dim).transpose(1, 2).expand(batch, -1, -1, -1)
        bm = self._block_mask(block_tables, seq_lens, num_blocks, page)
        cap = self.softcap
        score_mod = None
        if cap > 0:
            def score_mod(score, b, h, q_idx, kv_idx):
                return cap * torch.tanh(score / cap)
        out = _flex()(q.unsqueeze(2), k, v, score_mod=score_mod, block_mask=bm, scale=self.scale,
                      enable_gqa=q.shape[1] != num_kv_heads, kernel_options=_options(q.shape[1] // num_kv_heads, page))
        return out.squeeze(2)


class FlexMLADecodePeer(FlexPagedDecodePeer):
    """MLA decode (absorbed form) through the same flex_attention over the paged pool: one key
    head of width 576 (the latent c and the RoPE key k_pe, read in place), the value the latent's
    first 512 columns of the same pool (a view), all H query heads sharing it through enable_gqa;
    the query is [q_nope | q_pe] (one small copy per call)."""

    def forward(self, q_nope, q_pe, kv_c_and_k_pe, block_tables, seq_lens):
        num_blocks, page, width = kv_c_and_k_pe.shape
        self.require_page(page, q_nope.device.type)
        batch, rank = q_nope.shape[0], q_nope.shape[-1]
        pool = kv_c_and_k_pe.view(1, 1, num_blocks * page, width).expand(batch, -1, -1, -1)
        q = torch.cat([q_nope, q_pe], dim=-1).unsqueeze(2)                    # [B, H, 1, 576]
        bm = self._block_mask(block_tables, seq_lens, num_blocks, page)
        out = _flex()(q, pool, pool[..., :rank], block_mask=bm, scale=self.scale, enable_gqa=True,
                      kernel_options=_options(q.shape[1], page))
        return out.squeeze(2)
