"""
---
id: kernels/moe_topk_softmax/iterative_argmax
op: moe_topk_softmax
category: Index
dtypes: [bfloat16, float32]
techniques: [tokens-per-program, iterative-argmax, lowest-index-tie-break, fp32-routing, row-in-registers]
params:
  BT: [4, 8, 16, 32]
  num_warps: [1, 2, 4, 8]
summary: BT tokens per program as a [BT, next_pow2(E)] fp32 tile; softmax statistics, then k rounds of (max, lowest id holding it, mask it out) on the logits.
---
Selection runs on the fp32 logits, as the reference defines it: each round takes the row maximum
and the lowest expert id equal to it (`min(where(x == best, id, BE))`), so equal logits come out
in ascending id order and a tie at the k-th place goes to the lower id. Selecting on the logits
rather than on probabilities keeps the choice defined where exp() underflows (a x50 outlier
logit puts every other expert's probability at 0). Weights are exp(x - max) / sum over all experts,
then divided by their own sum when renormalising. All k rounds work on the register tile, BT
tokens at once, so the k dependent reductions are paid once per BT tokens. Padding lanes are
-inf and never win. BT is capped at 1024 x num_warps / BE tokens (32 logits per thread; E 512 at 4 warps gives 8).

When to use it: the MoE router (gate logits -> top-k expert ids and their softmax weights) when k
is small next to the expert count, e.g. 2 of 8 (Mixtral) or 8 of 64-128 (Qwen3 MoE): k
max-reductions over the register tile are cheaper than a full sorting network, and the code is
the easiest to check. It is also the one to start from when routing disagrees with the reference
only on some tokens: bf16 logits often hold exact ties, and a selection that does not take the
lowest id among equal values, or that selects on probabilities that underflowed to zero, picks
other experts there and so gets their weights wrong. `packed_topk` gives the same order with one
bitonic network, better for large k over hundreds of experts.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"BT": 16, "num_warps": 4}


@triton.jit
def _topk_softmax_iter(g_ptr, w_ptr, id_ptr, T, E, stride_g,
                       K: tl.constexpr, KP: tl.constexpr, BT: tl.constexpr, BE: tl.constexpr,
                       RENORM: tl.constexpr):
    toks = tl.program_id(0) * BT + tl.arange(0, BT)
    e = tl.arange(0, BE)
    tm = toks < T
    em = e < E
    x = tl.load(g_ptr + toks.to(tl.int64)[:, None] * stride_g + e[None, :],
                mask=tm[:, None] & em[None, :], other=float("-inf")).to(tl.float32)
    mx = tl.max(x, axis=1)
    mx = tl.where(tm, mx, 0.0)                       # rows past T: keep exp() finite
    denom = tl.sum(tl.exp(x - mx[:, None]), axis=1)
    kk = tl.arange(0, KP)
    top_x = tl.zeros([BT, KP], tl.float32)
    top_i = tl.zeros([BT, KP], tl.int32)
    work = x
    for j in tl.static_range(K):
        best = tl.max(work, axis=1)
        idx = tl.min(tl.where(work == best[:, None], e[None, :], BE), axis=1)
        top_x = tl.where(kk[None, :] == j, best[:, None], top_x)
        top_i = tl.where(kk[None, :] == j, idx[:, None], top_i)
        work = tl.where(e[None, :] == idx[:, None], float("-inf"), work)
    w = tl.exp(top_x - mx[:, None]) / denom[:, None]
    km = kk < K
    w = tl.where(km[None, :], w, 0.0)
    if RENORM:
        w = w / tl.sum(w, axis=1)[:, None]
    om = tm[:, None] & km[None, :]
    out = toks.to(tl.int64)[:, None] * K + kk[None, :]
    tl.store(w_ptr + out, w, mask=om)
    tl.store(id_ptr + out, top_i, mask=om)


class ModelNew(nn.Module):
    def __init__(self, top_k, renormalize=True):
        super().__init__()
        self.top_k = top_k
        self.renormalize = renormalize

    def forward(self, gating_output):
        E = gating_output.shape[-1]
        g = gating_output.reshape(-1, E)
        if g.stride(1) != 1:
            g = g.contiguous()
        T, K = g.shape[0], self.top_k
        w = torch.empty((T, K), dtype=torch.float32, device=g.device)
        ids = torch.empty((T, K), dtype=torch.int32, device=g.device)
        be = triton.next_power_of_2(E)
        # at most 32 logits per thread: BT x BE <= 1024 x num_warps (E 512, 4 warps: BT 8)
        bt = max(1, min(AKA_PARAMS["BT"], 1024 * AKA_PARAMS["num_warps"] // be))
        _topk_softmax_iter[(triton.cdiv(T, bt),)](
            g, w, ids, T, E, g.stride(0), K=K, KP=triton.next_power_of_2(K), BT=bt, BE=be,
            RENORM=bool(self.renormalize), num_warps=AKA_PARAMS["num_warps"])
        return w.view(*gating_output.shape[:-1], K), ids.view(*gating_output.shape[:-1], K)
