"""Peers that PyTorch itself ships: cuBLAS GEMMs, fp8 scaled GEMMs, grouped GEMMs, softmax.

Each is what a serving stack calls when it has no kernel of its own: vLLM's unquantised linear is
F.linear, torchtitan's MoE runs its experts through torch._grouped_mm, fp8 blockwise GEMMs go
through torch's scaled_mm where DeepGEMM is not installed, and vLLM's sampler is torch.softmax.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


def _needs_cuda(device: str, what: str) -> str | None:
    return None if str(device).startswith("cuda") else f"{what} runs on CUDA GPUs only"


class LinearPeer(nn.Module):
    """cuBLAS (cuBLASLt) through F.linear: bf16 operands, fp32 accumulation, bf16 out."""

    def __init__(self, ref=None):
        super().__init__()

    def forward(self, x, w):
        return F.linear(x, w)


class SoftmaxPeer(nn.Module):
    """torch.softmax with an fp32 result, the call vLLM's sampler makes (one fused kernel that
    reads bf16 or fp32 logits)."""

    def __init__(self, ref=None):
        super().__init__()

    def forward(self, logits):
        acc = torch.promote_types(logits.dtype, torch.float32)
        return torch.softmax(logits, dim=-1, dtype=acc)


BLOCK = 128


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


class BlockScaledMMPeer(nn.Module):
    """DeepSeek-V3's fp8 GEMM through torch's scaled_mm with blockwise recipes: a scaled per 1x128
    group, b per 128x128 block, fp32 accumulation (use_fast_accum off), bf16 out.

    The scales are laid out as torch's blockwise path requires (torch/_meta_registrations.py,
    1x128 x 128x128): a's [M, K/128] column-major, b's as blocks of the [K, N] operand, [L4, N/128]
    column-major with L4 = K/128 rounded up to 4. The inputs hand them over row-major, so each call
    pays two small copies (under 0.1% of the operand bytes at K = 7168), as a serving stack would
    not: it converts the weight scales once at load time.
    """

    def __init__(self, ref=None):
        super().__init__()

    @staticmethod
    def unavailable(device: str) -> str | None:
        if not hasattr(F, "scaled_mm") or not hasattr(F, "ScalingType"):
            return f"torch {torch.__version__} has no F.scaled_mm (blockwise fp8 recipes came with torch 2.10)"
        return _needs_cuda(device, "torch's blockwise fp8 scaled_mm")

    def forward(self, a, a_scale, b, b_scale):
        M, K = a.shape
        N = b.shape[0]
        if K % BLOCK or N % BLOCK:
            # torch's 128x128 path reads whole blocks only (its checks use K // 128, N // 128)
            raise ValueError(f"torch's blockwise fp8 scaled_mm needs K and N multiples of {BLOCK} (K={K}, N={N})")
        kb = K // BLOCK
        sa = torch.empty(kb, M, dtype=torch.float32, device=a.device)
        sa.copy_(a_scale[:, :kb].t())
        sa = sa.t()                                     # [M, K/128], stride (1, M)
        l4 = _round_up(kb, 4)
        sb = torch.zeros(N // BLOCK, l4, dtype=torch.float32, device=a.device)
        sb[:, :kb] = b_scale[:N // BLOCK, :kb]
        sb = sb.t()                                     # [L4, N/128], stride (1, L4)
        st = F.ScalingType
        return F.scaled_mm(a, b.t(), sa, st.BlockWise1x128, sb, st.BlockWise128x128,
                           output_dtype=torch.bfloat16, use_fast_accum=False)


class GroupedMMMoEPeer(nn.Module):
    """MoE MLP with its expert GEMMs in torch._grouped_mm (F.grouped_mm where torch has it), as
    torchtitan runs them: token-expert pairs sorted by expert, one grouped GEMM for gate/up, SiLU
    and mul in fp32 stored in bf16, one grouped GEMM for down, then the weighted combine in fp32
    with index_add_. Ids of -1 (experts on another EP rank) sort last, past the groups' end.
    Group offsets come from a scatter-add count, so a small call needs no host sync and can be
    graph-captured; its rows for other ranks' pairs are computed and masked out of the combine.

    Above SYNC_ELEMS gathered elements (T * k * H), the peer reads the count of this rank's pairs
    once on the host and works on those rows only, as an EP deployment does after its all-to-all
    (torchtitan sizes its buffers from the split sizes on the host). Without it the peer gathered,
    activated, weighted and combined every one of the T * k rows, ~97% of them other ranks' at
    DeepSeek-V3 EP 32: 10.8 ms at bench shape 14 on an H100 against the kernel's 0.65 ms
    (results/h100/device-2026-12-08), a 16.8x that measured the peer's waste, not the kernel. The
    sync costs a scalar copy and the GPU's wait while the host launches the rest of the call (not
    yet measured; the harness times such a call behind its fixed head start and says so), and the
    decode shapes (bench shapes 0-5, 2**22 elements at most) never pay it."""

    SYNC_ELEMS = 1 << 22

    def __init__(self, ref=None):
        super().__init__()

    @staticmethod
    def unavailable(device: str) -> str | None:
        if not hasattr(torch, "_grouped_mm"):
            return f"torch {torch.__version__} has no _grouped_mm"
        return None

    def forward(self, hidden, w1, w2, topk_weights, topk_ids):
        gmm = getattr(F, "grouped_mm", None) or torch._grouped_mm
        T, H = hidden.shape
        E, top_k = w1.shape[0], topk_ids.shape[1]
        inter = w2.shape[2]
        ids = topk_ids.flatten().long()
        valid = ids >= 0
        keyed = torch.where(valid, ids, torch.full_like(ids, E))
        order = torch.argsort(keyed, stable=True)
        counts = torch.zeros(E + 1, dtype=torch.int64, device=hidden.device)
        counts.scatter_add_(0, keyed, torch.ones_like(keyed))
        offs = torch.cumsum(counts[:E], 0).to(torch.int32)
        mask_rows = True
        if ids.numel() * H > self.SYNC_ELEMS:
            n_local = int(offs[-1])                                     # the one host sync
            if n_local == 0:                                            # every pair on other ranks
                return torch.zeros_like(hidden)
            order, mask_rows = order[:n_local], False                   # this rank's pairs sort first
        token_idx = order // top_k
        x = hidden.index_select(0, token_idx)
        h = gmm(x, w1.transpose(-2, -1), offs=offs)                    # [rows, 2I] bf16
        gate, up = h.float().split(inter, dim=-1)
        act = (F.silu(gate) * up).to(hidden.dtype)
        y = gmm(act, w2.transpose(-2, -1), offs=offs).float()          # [rows, H]
        wts = topk_weights.flatten()[order].float()
        if mask_rows:
            keep = valid[order]
            y = torch.where(keep[:, None], y * wts[:, None], torch.zeros((), device=y.device))
        else:
            y = y * wts[:, None]
        out = torch.zeros(T, H, dtype=torch.float32, device=hidden.device)
        out.index_add_(0, token_idx, y)
        return out.to(hidden.dtype)
