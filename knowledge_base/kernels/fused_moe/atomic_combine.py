"""
---
id: kernels/fused_moe/atomic_combine
op: fused_moe
category: Fusion
dtypes: [bfloat16]
techniques: [moe-align, token-sorting, padding-to-block, grouped-gemm, gather-rows, epilogue-fusion, kernel-fusion, grouped-ordering, fp32-accumulation, int64-offsets]
params:
  BM: [16, 32, 64, 128]
  BN: [32, 64, 128]
  BK: [32, 64, 128]
  GROUP: [1, 8]
  num_warps: [4, 8]
  num_stages: [2, 3, 4]
summary: Fused MoE with atomic alignment and an atomic combine. Integer-atomic histogram and slot assignment, grouped GEMM1 with SiLU-and-mul in the epilogue, grouped GEMM2 whose epilogue multiplies by the routing weight and atomically adds into an fp32 [T, H] accumulator, then one cast kernel.
---
out[t] = sum_j w[t, j] * W2[e] (silu(W1g[e] x_t) * W1u[e] x_t), e = topk_ids[t, j] (-1: skip).

Pipeline (seven launches plus three memsets, no host sync, no torch compute):
1. `_count`: integer tl.atomic_add of 1 per (token, slot) into counts[e] (ids of -1 skipped);
   integer atomics are exact, so the counts are deterministic.
2. `_offsets` (one program): segments padded to BM, their starts and ends, the padded total;
   `_block_experts` then labels every BM-row block with its expert (-1 past the total: those
   blocks' GEMM programs exit first).
3. `_assign`: position = segment_start[e] + atomic_add(cursor[e], 1). The order inside an
   expert's segment varies run to run, which changes nothing: every GEMM row is computed on its
   own and the combine adds per token.
4. `_moe_gemm1_silu`: as in kernels/fused_moe/sorted_grouped: gathered x rows, gate and up
   accumulators, bf16 rounding of both (the reference's GEMM1 output), silu(g) * u in fp32,
   bf16 `act` in sorted row order.
5. `_moe_gemm2_combine`: act @ w2[e]^T, rounded to bf16 (the reference's GEMM2 output), times the
   routing weight in fp32, tl.atomic_add into out32[token] (fp32). A token appears at most once
   per expert, so a tile never adds twice to one address; the k adds per element land in any
   order, a last-bit fp32 difference that the bf16 output almost never shows (the harness's
   repeat check compares two runs within tolerance).
6. `_cast`: out32 -> bf16, one rounding.
Compared with sorted_grouped this skips the [T*k, H] per-slot buffer and the moe_sum pass (a
write and a read of T*k*H*2 bytes) at the price of fp32 atomics and an fp32 [T, H] accumulator.
Defaults lean to decode (BM 16); the prefill shapes want BM 64-128.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"BM": 16, "BN": 64, "BK": 128, "GROUP": 8, "num_warps": 4, "num_stages": 3}

PAIRS_PER_PROG = 1024
_SMEM_BUDGET = 200 * 1024


@triton.jit
def _count(ids_ptr, counts_ptr, NP, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ids = tl.load(ids_ptr + i, mask=i < NP, other=-1)
    tl.atomic_add(counts_ptr + tl.where(ids >= 0, ids, 0), 1, mask=ids >= 0)


@triton.jit
def _offsets(counts_ptr, seg_ptr, total_ptr, E, BM: tl.constexpr, E_PAD: tl.constexpr):
    e = tl.arange(0, E_PAD)
    cnt = tl.load(counts_ptr + e, mask=e < E, other=0)
    padded = (cnt + BM - 1) // BM * BM
    seg_end = tl.cumsum(padded, axis=0)
    tl.store(seg_ptr + e, seg_end - padded)            # segment starts
    tl.store(seg_ptr + E_PAD + e, seg_end)             # segment ends
    tl.store(total_ptr, tl.sum(padded, axis=0))


@triton.jit
def _block_experts(seg_ptr, total_ptr, eid_ptr, n_blocks, E,
                   BM: tl.constexpr, E_PAD: tl.constexpr, BB: tl.constexpr):
    e = tl.arange(0, E_PAD)
    seg_end = tl.load(seg_ptr + E_PAD + e)
    total = tl.load(total_ptr)
    blk = tl.program_id(0) * BB + tl.arange(0, BB)
    owner = tl.sum(((seg_end[None, :] <= blk[:, None] * BM) & (e[None, :] < E)).to(tl.int32), axis=1)
    tl.store(eid_ptr + blk, tl.where(blk * BM < total, owner, -1), mask=blk < n_blocks)


@triton.jit
def _assign(ids_ptr, start_ptr, cursor_ptr, sorted_ptr, NP, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ids = tl.load(ids_ptr + i, mask=i < NP, other=-1)
    ok = ids >= 0
    ec = tl.where(ok, ids, 0)
    rank = tl.atomic_add(cursor_ptr + ec, 1, mask=ok)
    start = tl.load(start_ptr + ec, mask=ok, other=0)
    tl.store(sorted_ptr + start + rank, i, mask=ok)


@triton.jit
def _block_of(pid, n_blocks, n_tiles, GROUP: tl.constexpr):
    per_group = GROUP * n_tiles
    first = (pid // per_group) * GROUP
    rows_here = tl.minimum(n_blocks - first, GROUP)
    return first + (pid % per_group) % rows_here, (pid % per_group) // rows_here


@triton.jit
def _moe_gemm1_silu(x_ptr, w1_ptr, act_ptr, sorted_ptr, eid_ptr, total_ptr, NP, I, H, n_blocks,
                    s_xt, s_we, s_wn, s_ak, TOPK: tl.constexpr,
                    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr):
    pm, pn = _block_of(tl.program_id(0), n_blocks, tl.cdiv(I, BN), GROUP)
    if pm * BM >= tl.load(total_ptr):
        return
    e = tl.load(eid_ptr + pm).to(tl.int64)
    slot = tl.load(sorted_ptr + pm * BM + tl.arange(0, BM))
    valid = slot < NP
    tok = tl.where(valid, slot // TOPK, 0).to(tl.int64)       # pad rows read token 0, never stored
    rn = pn * BN + tl.arange(0, BN)
    wn = (rn % I).to(tl.int64)
    rk = tl.arange(0, BK)
    x_ptrs = x_ptr + tok[:, None] * s_xt + rk[None, :]
    g_ptrs = w1_ptr + e * s_we + wn[None, :] * s_wn + rk[:, None]
    u_ptrs = g_ptrs + I * s_wn
    acc_g = tl.zeros((BM, BN), dtype=tl.float32)
    acc_u = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, H, BK):
        km = (k0 + rk) < H
        a = tl.load(x_ptrs, mask=km[None, :], other=0.0)
        acc_g = tl.dot(a, tl.load(g_ptrs, mask=km[:, None], other=0.0), acc_g)
        acc_u = tl.dot(a, tl.load(u_ptrs, mask=km[:, None], other=0.0), acc_u)
        x_ptrs += BK
        g_ptrs += BK
        u_ptrs += BK
    g = acc_g.to(act_ptr.dtype.element_ty).to(tl.float32)
    u = acc_u.to(act_ptr.dtype.element_ty).to(tl.float32)
    h = g / (1.0 + tl.exp(-g)) * u
    rows = (pm * BM + tl.arange(0, BM)).to(tl.int64)
    tl.store(act_ptr + rows[:, None] * s_ak + rn[None, :], h.to(act_ptr.dtype.element_ty),
             mask=valid[:, None] & (rn[None, :] < I))


@triton.jit
def _moe_gemm2_combine(act_ptr, w2_ptr, out32_ptr, sorted_ptr, eid_ptr, total_ptr, tw_ptr, NP, I, H,
                       n_blocks, s_ak, s_we, s_wn, s_ot, TOPK: tl.constexpr,
                       BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr):
    pm, pn = _block_of(tl.program_id(0), n_blocks, tl.cdiv(H, BN), GROUP)
    if pm * BM >= tl.load(total_ptr):
        return
    e = tl.load(eid_ptr + pm).to(tl.int64)
    slot = tl.load(sorted_ptr + pm * BM + tl.arange(0, BM))
    valid = slot < NP
    rows = (pm * BM + tl.arange(0, BM)).to(tl.int64)
    rn = pn * BN + tl.arange(0, BN)
    wn = (rn % H).to(tl.int64)
    rk = tl.arange(0, BK)
    a_ptrs = act_ptr + rows[:, None] * s_ak + rk[None, :]
    b_ptrs = w2_ptr + e * s_we + wn[None, :] * s_wn + rk[:, None]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, I, BK):
        km = (k0 + rk) < I
        a = tl.load(a_ptrs, mask=valid[:, None] & km[None, :], other=0.0)   # pad rows hold garbage
        b = tl.load(b_ptrs, mask=km[:, None], other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BK
        b_ptrs += BK
    w = tl.load(tw_ptr + slot, mask=valid, other=0.0)
    y = acc.to(act_ptr.dtype.element_ty).to(tl.float32) * w[:, None]
    tok = tl.where(valid, slot // TOPK, 0).to(tl.int64)
    tl.atomic_add(out32_ptr + tok[:, None] * s_ot + rn[None, :], y,
                  mask=valid[:, None] & (rn[None, :] < H), sem="relaxed")


@triton.jit
def _cast(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(dst_ptr + i, tl.load(src_ptr + i, mask=m, other=0.0).to(dst_ptr.dtype.element_ty), mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, hidden, w1, w2, topk_weights, topk_ids):
        T, H = hidden.shape
        E, two_i, _ = w1.shape
        I = two_i // 2
        topk = topk_ids.shape[1]
        NP = T * topk
        p = AKA_PARAMS
        bm, bn, bk, group, warps = p["BM"], p["BN"], p["BK"], p["GROUP"], p["num_warps"]
        dev = hidden.device
        ids = topk_ids.contiguous().view(-1)
        tw = topk_weights.contiguous().view(-1)

        # alignment
        n_blocks = NP // bm + min(E, NP)
        counts = torch.zeros((E,), dtype=torch.int32, device=dev)
        cursor = torch.zeros((E,), dtype=torch.int32, device=dev)
        e_pad = max(2, triton.next_power_of_2(E))
        seg = torch.empty((2, e_pad), dtype=torch.int32, device=dev)
        total = torch.empty((1,), dtype=torch.int32, device=dev)
        expert_ids = torch.empty((n_blocks,), dtype=torch.int32, device=dev)
        sorted_ids = torch.full((n_blocks * bm,), NP, dtype=torch.int32, device=dev)
        grid_p = (triton.cdiv(NP, PAIRS_PER_PROG),)
        _count[grid_p](ids, counts, NP, BLOCK=PAIRS_PER_PROG, num_warps=4)
        _offsets[(1,)](counts, seg, total, E, BM=bm, E_PAD=e_pad, num_warps=4)
        _block_experts[(triton.cdiv(n_blocks, 64),)](seg, total, expert_ids, n_blocks, E, BM=bm,
                                                    E_PAD=e_pad, BB=64, num_warps=4)
        _assign[grid_p](ids, seg, cursor, sorted_ids, NP, BLOCK=PAIRS_PER_PROG, num_warps=4)

        # GEMM1 + SiLU-and-mul, in sorted row order
        act = torch.empty((n_blocks * bm, I), dtype=hidden.dtype, device=dev)
        st1 = max(1, min(p["num_stages"], _SMEM_BUDGET // ((bm + 2 * bn) * bk * hidden.element_size())))
        _moe_gemm1_silu[(n_blocks * triton.cdiv(I, bn),)](
            hidden, w1, act, sorted_ids, expert_ids, total, NP, I, H, n_blocks,
            hidden.stride(0), w1.stride(0), w1.stride(1), act.stride(0), TOPK=topk,
            BM=bm, BN=bn, BK=bk, GROUP=group, num_warps=warps, num_stages=st1)

        # GEMM2 + routing weight + atomic combine into fp32
        out32 = torch.zeros((T, H), dtype=torch.float32, device=dev)
        st2 = max(1, min(p["num_stages"], _SMEM_BUDGET // ((bm + bn) * bk * hidden.element_size())))
        _moe_gemm2_combine[(n_blocks * triton.cdiv(H, bn),)](
            act, w2, out32, sorted_ids, expert_ids, total, tw, NP, I, H, n_blocks,
            act.stride(0), w2.stride(0), w2.stride(1), out32.stride(0), TOPK=topk,
            BM=bm, BN=bn, BK=bk, GROUP=group, num_warps=warps, num_stages=st2)

        out = torch.empty((T, H), dtype=hidden.dtype, device=dev)
        _cast[(triton.cdiv(T * H, 2048),)](out32, out, T * H, BLOCK=2048, num_warps=4)
        return out
