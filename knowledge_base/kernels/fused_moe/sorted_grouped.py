"""
---
id: kernels/fused_moe/sorted_grouped
op: fused_moe
category: Fusion
dtypes: [bfloat16]
techniques: [moe-align, token-sorting, padding-to-block, grouped-gemm, gather-rows, epilogue-fusion, kernel-fusion, grouped-ordering, deterministic-reduction, two-stage-reduction, fp32-accumulation, int64-offsets]
params:
  BM: [16, 32, 64, 128]
  BN: [32, 64, 128]
  BK: [32, 64, 128]
  GROUP: [1, 8]
  num_warps: [4, 8]
  num_stages: [2, 3, 4]
summary: vLLM-style fused MoE without atomics. Deterministic Triton alignment (per-chunk one-hot histograms, one scan program, stable scatter), grouped GEMM1 with SiLU-and-mul in the epilogue, grouped GEMM2 writing per-slot bf16 rows, and a fixed-order moe_sum that applies the routing weights in fp32.
---
out[t] = sum_j w[t, j] * W2[e] (silu(W1g[e] x_t) * W1u[e] x_t), e = topk_ids[t, j] (-1: skip).

Pipeline (seven launches, no host sync, no torch compute):
1. `_chunk_hist`: per chunk of up to 1024 (token, slot) pairs, per-expert counts from
   [128, E_PAD] one-hot tiles (ids of -1 match no expert).
2. `_align_scan` (one program, 64 chunks per step: two steps at 16k tokens x top-8): per-expert
   exclusive prefix over chunks, segment sizes padded to BM, segment starts/ends, padded total.
3. `_block_experts`: the expert of every BM-row block (-1 past the total; those blocks' GEMM
   programs exit first).
4. `_chunk_scatter`: stable rank from a cumsum of each one-hot tile; the pair lands at
   segment_start[e] + chunk_base[chunk, e] + rank: the same order as a stable argsort, and
   bit-reproducible (no atomics anywhere).
5. `_moe_gemm1_silu`: one program per (BM-row block, BN columns of I); gathers x rows by token,
   accumulates gate (rows n) and up (rows I + n) of w1 in two fp32 accumulators, rounds both to
   bf16 (the reference's GEMM1 output rounding), applies silu(g) * u in fp32, stores bf16 `act`
   in sorted order (GEMM2 then reads contiguous rows).
6. `_moe_gemm2`: act @ w2[e]^T per (block, BN columns of H), rounded to bf16 (the reference's
   GEMM2 output rounding) and stored as one row per (token, slot) (vLLM's intermediate_cache3
   layout).
7. `_moe_sum`: per token, sum_j w[t, j] * y[t, j] in fp32 in slot order, skipping ids of -1; one
   bf16 rounding. The weight is applied here, not in the GEMM2 epilogue: storing bf16(w * y)
   adds a rounding of each weighted term, and with the harness's x50 outliers one slot's y
   reached 460 (bf16 ulp 2) while the token's output was O(1), so that rounding alone moved
   outputs by 0.5 (seen under the interpreter, shape s0). bf16(y) is exactly what the reference sums, so this combine reproduces it
   up to fp32 summation order.
The grid of both GEMMs is the upper bound T*k // BM + min(E, T*k) blocks times the column tiles,
flattened and ordered so GROUP consecutive blocks (the same expert's rows) share a weight tile in
L2; blocks past the padded total return at once. Per-slot rows of -1 ids are never written and
never read. int64 offsets for expert weights (E * 2I * H reaches 4.4e8) and activations.
The deterministic path: two runs on the same input give bit-identical outputs, where the fp32
atomic_add combine of kernels/fused_moe/atomic_combine adds a token's k expert rows in arbitrary
order and can differ in the last bits. The price is a write and a read of the [T*k, H] per-slot
rows (ops/fused_moe, Choosing the combine).
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"BM": 64, "BN": 64, "BK": 64, "GROUP": 8, "num_warps": 4, "num_stages": 3}

SUB = 128                    # pairs per one-hot tile [SUB, E_PAD] (16K int32 at 128 experts)
MAX_SUBS = 8                 # tiles per alignment chunk: 1024 pairs, so 128 chunks at 16k x top-8
SCAN_ROWS = 64               # chunks per step of the one-program scan
_SMEM_BUDGET = 200 * 1024


@triton.jit
def _chunk_hist(ids_ptr, hist_ptr, NP, E_PAD: tl.constexpr, SUB: tl.constexpr, NSUB: tl.constexpr):
    c = tl.program_id(0)
    e = tl.arange(0, E_PAD)
    cnt = tl.zeros((E_PAD,), dtype=tl.int32)
    for s in tl.static_range(NSUB):
        i = (c * NSUB + s) * SUB + tl.arange(0, SUB)
        ids = tl.load(ids_ptr + i, mask=i < NP, other=-1)
        cnt += tl.sum((ids[:, None] == e[None, :]).to(tl.int32), axis=0)
    tl.store(hist_ptr + c * E_PAD + e, cnt)


@triton.jit
def _align_scan(hist_ptr, base_ptr, seg_ptr, total_ptr, n_chunks,
                BM: tl.constexpr, E_PAD: tl.constexpr, ROWS: tl.constexpr):
    e = tl.arange(0, E_PAD)
    r = tl.arange(0, ROWS)
    run = tl.zeros((E_PAD,), dtype=tl.int32)
    for c0 in range(0, n_chunks, ROWS):
        rows = c0 + r
        offs = rows[:, None] * E_PAD + e[None, :]
        h = tl.load(hist_ptr + offs, mask=rows[:, None] < n_chunks, other=0)
        tl.store(base_ptr + offs, tl.cumsum(h, axis=0) - h + run[None, :], mask=rows[:, None] < n_chunks)
        run += tl.sum(h, axis=0)
    padded = (run + BM - 1) // BM * BM
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
def _chunk_scatter(ids_ptr, base_ptr, seg_ptr, sorted_ptr, NP,
                   E_PAD: tl.constexpr, SUB: tl.constexpr, NSUB: tl.constexpr):
    c = tl.program_id(0)
    e = tl.arange(0, E_PAD)
    nxt = tl.load(seg_ptr + e) + tl.load(base_ptr + c * E_PAD + e)     # next free row per expert
    for s in tl.static_range(NSUB):
        i = (c * NSUB + s) * SUB + tl.arange(0, SUB)
        ids = tl.load(ids_ptr + i, mask=i < NP, other=-1)
        onehot = (ids[:, None] == e[None, :]).to(tl.int32)
        dest = tl.sum((tl.cumsum(onehot, axis=0) - onehot + nxt[None, :]) * onehot, axis=1)
        tl.store(sorted_ptr + dest, i, mask=ids >= 0)
        nxt += tl.sum(onehot, axis=0)


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
def _moe_gemm2(act_ptr, w2_ptr, slot_out_ptr, sorted_ptr, eid_ptr, total_ptr, NP, I, H,
               n_blocks, s_ak, s_we, s_wn, s_ot,
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
    tl.store(slot_out_ptr + slot.to(tl.int64)[:, None] * s_ot + rn[None, :],
             acc.to(slot_out_ptr.dtype.element_ty), mask=valid[:, None] & (rn[None, :] < H))


@triton.jit
def _moe_sum(slot_ptr, ids_ptr, tw_ptr, out_ptr, H, s_ot, s_out, TOPK: tl.constexpr, BH: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1) * BH + tl.arange(0, BH)
    hm = h < H
    acc = tl.zeros((BH,), dtype=tl.float32)
    for j in tl.static_range(TOPK):
        e = tl.load(ids_ptr + t * TOPK + j)
        w = tl.load(tw_ptr + t * TOPK + j)
        y = tl.load(slot_ptr + (t * TOPK + j) * s_ot + h, mask=hm & (e >= 0), other=0.0).to(tl.float32)
        acc += y * w
    tl.store(out_ptr + t * s_out + h, acc.to(out_ptr.dtype.element_ty), mask=hm)


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
        e_pad = max(2, triton.next_power_of_2(E))
        nsub = min(MAX_SUBS, triton.cdiv(NP, SUB))
        n_chunks = triton.cdiv(NP, SUB * nsub)
        n_blocks = NP // bm + min(E, NP)
        hist = torch.empty((n_chunks, e_pad), dtype=torch.int32, device=dev)
        base = torch.empty((n_chunks, e_pad), dtype=torch.int32, device=dev)
        seg = torch.empty((2, e_pad), dtype=torch.int32, device=dev)
        total = torch.empty((1,), dtype=torch.int32, device=dev)
        expert_ids = torch.empty((n_blocks,), dtype=torch.int32, device=dev)
        sorted_ids = torch.full((n_blocks * bm,), NP, dtype=torch.int32, device=dev)
        _chunk_hist[(n_chunks,)](ids, hist, NP, E_PAD=e_pad, SUB=SUB, NSUB=nsub, num_warps=4)
        _align_scan[(1,)](hist, base, seg, total, n_chunks, BM=bm, E_PAD=e_pad, ROWS=SCAN_ROWS, num_warps=4)
        _block_experts[(triton.cdiv(n_blocks, 64),)](seg, total, expert_ids, n_blocks, E, BM=bm,
                                                    E_PAD=e_pad, BB=64, num_warps=4)
        _chunk_scatter[(n_chunks,)](ids, base, seg, sorted_ids, NP, E_PAD=e_pad, SUB=SUB, NSUB=nsub,
                                    num_warps=4)

        # GEMM1 + SiLU-and-mul, in sorted row order
        act = torch.empty((n_blocks * bm, I), dtype=hidden.dtype, device=dev)
        st1 = max(1, min(p["num_stages"], _SMEM_BUDGET // ((bm + 2 * bn) * bk * hidden.element_size())))
        _moe_gemm1_silu[(n_blocks * triton.cdiv(I, bn),)](
            hidden, w1, act, sorted_ids, expert_ids, total, NP, I, H, n_blocks,
            hidden.stride(0), w1.stride(0), w1.stride(1), act.stride(0), TOPK=topk,
            BM=bm, BN=bn, BK=bk, GROUP=group, num_warps=warps, num_stages=st1)

        # GEMM2, one bf16 row per (token, slot)
        slot_out = torch.empty((NP, H), dtype=hidden.dtype, device=dev)
        st2 = max(1, min(p["num_stages"], _SMEM_BUDGET // ((bm + bn) * bk * hidden.element_size())))
        _moe_gemm2[(n_blocks * triton.cdiv(H, bn),)](
            act, w2, slot_out, sorted_ids, expert_ids, total, NP, I, H, n_blocks,
            act.stride(0), w2.stride(0), w2.stride(1), slot_out.stride(0),
            BM=bm, BN=bn, BK=bk, GROUP=group, num_warps=warps, num_stages=st2)

        out = torch.empty((T, H), dtype=hidden.dtype, device=dev)
        bh = min(1024, triton.next_power_of_2(H))
        _moe_sum[(T, triton.cdiv(H, bh))](slot_out, ids, tw, out, H, slot_out.stride(0), out.stride(0),
                                          TOPK=topk, BH=bh, num_warps=4)
        return out
