"""
---
id: kernels/gated_delta_rule_decode/row_chunked
op: gated_delta_rule_decode
category: LinearAlgebra
dtypes: [bfloat16, float32]
techniques: [recurrent-state, state-tiling, memory-bound, row-chunked-two-pass, bounded-registers, full-row-coalescing, two-pass-l2-resident, kernel-fusion, int64-offsets, masking]
params:
  BK: [8, 16, 32]
  BV: [64, 128]
  num_warps: [2, 4, 8]
summary: One program per (sequence, value head, BV columns) with wide BV (whole 512-byte state rows) and bounded registers - pass 1 walks the state in BK-row slabs accumulating S'^T k, pass 2 re-reads each slab (L2), applies the rank-1 delta update, writes it and accumulates S_new^T q. Two reads of the state, one write.
---
What it does: The gated delta rule decode step with the [Dk, BV] state tile processed in
BK-row slabs: the reduction u = beta (v - S'^T k) needs all Dk rows before any row can be
updated, so pass 1 reads slab after slab of exp(g) S and accumulates sum_k S'[k, :] k_k, and
pass 2 reads each slab again, forms S_new = S' + k u^T, stores it and accumulates
o = S_new^T q * scale. Live state is one [BK, BV] slab plus [BV] vectors, so BV can be the whole
head (Dv = 128: rows of 512 contiguous bytes, fully coalesced) at a few registers per thread.

When to use it: `column_split` and `head_loop` hold a [Dk, BV] tile
(128 x 32 fp32 = 16 KB) and read the state exactly once - minimum traffic, the right design
when that tile fits in registers, which it does at Dk = 128. This kernel reads the state twice
(the second read from L2, if the 64 KB of a head is still there) to keep registers bounded:
the design for larger heads (Dk = Dv = 256) or when more programs per SM are needed to hide
latency. Expect it to lose to `column_split` at the benchmark's Dk = 128; CPU interpreter
timing is meaningless, the H200 verify decides.

Parameters: BK: state rows per slab; BV: state columns per program (capped at next_pow2(Dv));
num_warps as launched.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"BK": 16, "BV": 128, "num_warps": 4}


@triton.jit
def _gdr_row_chunked(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, s_ptr, so_ptr, o_ptr, scale, HV, GROUP,
                     s_qb, s_qh, s_kb, s_kh, s_vb, s_vh, s_gb, s_bb, s_ob, s_oh,
                     DK: tl.constexpr, DV: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr):
    b = tl.program_id(0)
    hv = tl.program_id(1)
    hk = hv // GROUP
    vv = tl.program_id(2) * BV + tl.arange(0, BV)
    vm = vv < DV
    decay = tl.exp(tl.load(g_ptr + b * s_gb + hv).to(tl.float32))
    beta = tl.load(beta_ptr + b * s_bb + hv).to(tl.float32)
    base = (b * HV + hv).to(tl.int64) * (DK * DV)
    qrow = q_ptr + b * s_qb + hk * s_qh
    krow = k_ptr + b * s_kb + hk * s_kh
    recalled = tl.zeros((BV,), dtype=tl.float32)
    for k0 in range(0, DK, BK):
        kk = k0 + tl.arange(0, BK)
        km = kk < DK
        k = tl.load(krow + kk, mask=km, other=0.0).to(tl.float32)
        S = tl.load(s_ptr + base + kk[:, None] * DV + vv[None, :], mask=km[:, None] & vm[None, :], other=0.0,
                    eviction_policy="evict_last")
        recalled += tl.sum(S * k[:, None], axis=0)
    v = tl.load(v_ptr + b * s_vb + hv * s_vh + vv, mask=vm, other=0.0).to(tl.float32)
    u = beta * (v - recalled * decay)
    o = tl.zeros((BV,), dtype=tl.float32)
    for k0 in range(0, DK, BK):
        kk = k0 + tl.arange(0, BK)
        km = kk < DK
        k = tl.load(krow + kk, mask=km, other=0.0).to(tl.float32)
        q = tl.load(qrow + kk, mask=km, other=0.0).to(tl.float32)
        offs = base + kk[:, None] * DV + vv[None, :]
        tmask = km[:, None] & vm[None, :]
        S = tl.load(s_ptr + offs, mask=tmask, other=0.0, eviction_policy="evict_first") * decay + k[:, None] * u[None, :]
        tl.store(so_ptr + offs, S, mask=tmask)
        o += tl.sum(S * q[:, None], axis=0)
    tl.store(o_ptr + b * s_ob + hv * s_oh + vv, (o * scale).to(o_ptr.dtype.element_ty), mask=vm)


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
        _gdr_row_chunked[(B, HV, triton.cdiv(DV, bv))](
            q, k, v, g, beta, state, final, out, self.scale, HV, HV // HK,
            q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
            g.stride(0), beta.stride(0), out.stride(0), out.stride(1),
            DK=DK, DV=DV, BK=AKA_PARAMS["BK"], BV=bv, num_warps=AKA_PARAMS["num_warps"])
        return {"out": out, "final_state": final}
