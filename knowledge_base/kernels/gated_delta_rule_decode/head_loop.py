"""
---
id: kernels/gated_delta_rule_decode/head_loop
op: gated_delta_rule_decode
category: LinearAlgebra
dtypes: [bfloat16, float32]
techniques: [recurrent-state, state-tiling, memory-bound, head-per-program, column-loop, row-in-registers, one-pass-reduction, kernel-fusion, int64-offsets, masking]
params:
  BV: [16, 32, 64]
  num_warps: [2, 4, 8]
summary: One program per (sequence, value head) walks the head's [Dk, Dv] fp32 state in BV-column slabs; q, k, the decay and beta are loaded once per head, each slab is read once, decayed, given the rank-1 delta update and written once, and its BV outputs stored.
---
What it does: The gated delta rule decode step, S' = exp(g) S; u = beta (v - S'^T k);
S_new = S' + k u^T; o = S_new^T q * scale, for the value head's whole state. The columns of S
are independent (both reductions run over the Dk rows), so a program can take them BV at a
time: it loads q and k of the shared key head (GQA-style grouping, hk = hv // (Hv / Hk)) and the
two scalars once, then per slab reads [Dk, BV] of S, forms u and o for those BV columns and
writes the slab back. State traffic is one read and one write of 4 * Dk * Dv bytes per head,
as in every correct kernel for this op.

When to use it: `column_split` puts each slab in its own program
(grid B x Hv x Dv / BV): more programs in flight (good for batch 1-8, where B * Hv = 32-256 heads
leave most of 132 SMs idle here), but q, k and the scalars are re-read per slab. This kernel
issues B * Hv programs, each streaming 64 KB of state (Dk = Dv = 128) with the slabs' loads
serialised by the loop, so it should lose at small batch and can win from batch ~32 up (1024+
heads) where the grid is full anyway and fewer, longer programs cut scheduling. Untimed: CPU
interpreter timing is meaningless; pick by the H200 verify.

Parameters: BV: state columns per slab (power of two); num_warps as launched.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"BV": 32, "num_warps": 4}


@triton.jit
def _gdr_head_loop(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, s_ptr, so_ptr, o_ptr, scale, HV, GROUP,
                   s_qb, s_qh, s_kb, s_kh, s_vb, s_vh, s_gb, s_bb, s_ob, s_oh,
                   DK: tl.constexpr, DV: tl.constexpr, DK_PAD: tl.constexpr, BV: tl.constexpr):
    b = tl.program_id(0)
    hv = tl.program_id(1)
    hk = hv // GROUP
    kk = tl.arange(0, DK_PAD)
    km = kk < DK
    q = tl.load(q_ptr + b * s_qb + hk * s_qh + kk, mask=km, other=0.0).to(tl.float32)[:, None]
    k = tl.load(k_ptr + b * s_kb + hk * s_kh + kk, mask=km, other=0.0).to(tl.float32)[:, None]
    decay = tl.exp(tl.load(g_ptr + b * s_gb + hv).to(tl.float32))
    beta = tl.load(beta_ptr + b * s_bb + hv).to(tl.float32)
    base = (b * HV + hv).to(tl.int64) * (DK * DV)
    for v0 in range(0, DV, BV):
        vv = v0 + tl.arange(0, BV)
        vm = vv < DV
        v = tl.load(v_ptr + b * s_vb + hv * s_vh + vv, mask=vm, other=0.0).to(tl.float32)
        offs = base + kk[:, None] * DV + vv[None, :]
        tmask = km[:, None] & vm[None, :]
        S = tl.load(s_ptr + offs, mask=tmask, other=0.0) * decay
        u = beta * (v - tl.sum(S * k, axis=0))
        S = S + k * u[None, :]
        tl.store(so_ptr + offs, S, mask=tmask)
        o = tl.sum(S * q, axis=0) * scale
        tl.store(o_ptr + b * s_ob + hv * s_oh + vv, o.to(o_ptr.dtype.element_ty), mask=vm)


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, q, k, v, g, beta, initial_state):
        B, HK, DK = q.shape
        HV, DV = v.shape[1], v.shape[2]
        state = initial_state.contiguous()
        out = torch.empty((B, HV, DV), dtype=v.dtype, device=v.device)
        final = torch.empty_like(state)
        bv = min(AKA_PARAMS["BV"], max(16, triton.next_power_of_2(DV)))
        _gdr_head_loop[(B, HV)](
            q, k, v, g, beta, state, final, out, self.scale, HV, HV // HK,
            q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
            g.stride(0), beta.stride(0), out.stride(0), out.stride(1),
            DK=DK, DV=DV, DK_PAD=triton.next_power_of_2(DK), BV=bv, num_warps=AKA_PARAMS["num_warps"])
        return {"out": out, "final_state": final}
