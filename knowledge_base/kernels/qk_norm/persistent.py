"""
---
id: kernels/qk_norm/persistent
op: qk_norm
category: Normalization
dtypes: [bfloat16]
techniques: [persistent-kernel, grid-stride-loop, weight-resident, multi-row-per-program, 2d-tiling, one-pass-reduction, kernel-fusion, fp32-accumulation, int64-indexing]
params:
  PROGS_PER_SM: [2, 4, 8]
  ROWS: [4, 8, 16, 32]
  max_warps: [2, 4, 8]
summary: min(blocks, PROGS_PER_SM x SMs) programs stride over one index space of ROWS-row blocks - the q head rows' blocks, then the k head rows' blocks; both weights are converted to fp32 once per program and stay in registers.
---
What it does: q and k viewed as [T*Hq, D] and [T*Hkv, D] rows; block b < nq covers q rows
[b*ROWS, (b+1)*ROWS), the others k rows. Program p handles blocks p, p + P, ... of that joint
space, each an [ROWS, BLOCK_D] tile reduced along D in fp32, so a single launch normalises both
tensors with a fixed number of programs however many tokens there are. q_weight and k_weight are
loaded once per program (not once per block), and the branch per block picks which one applies.

When to use it: `flat_rows` launches one program per block (thousands
at prefill: 16384 tokens x 40 heads = 655k rows); `token_heads` one per (token, head block). At
prefill this kernel pays each program's prologue a few hundred times instead of thousands; at
decode (one token, 40 rows) the grid is the block count and it behaves like `flat_rows`. Which
wins where is for the H200 (`aka kb verify --device cuda`); CPU timing is meaningless. On the
CPU interpreter the machine has 2 "SMs", so small shapes take several grid-stride trips.

Parameters: PROGS_PER_SM: programs per SM; ROWS: head rows per block (a power of two);
max_warps caps num_warps = ROWS * BLOCK_D / 512.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"PROGS_PER_SM": 4, "ROWS": 16, "max_warps": 4}


def _num_sms(device):
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 2


@triton.jit
def _qk_norm_persistent(q_ptr, k_ptr, qw_ptr, kw_ptr, qo_ptr, ko_ptr, n_q_rows, n_k_rows, n_q_blocks, n_blocks,
                        head_dim, eps, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    cmask = cols < head_dim
    qw = tl.load(qw_ptr + cols, mask=cmask, other=0.0).to(tl.float32)[None, :]
    kw = tl.load(kw_ptr + cols, mask=cmask, other=0.0).to(tl.float32)[None, :]
    for b in range(tl.program_id(0), n_blocks, tl.num_programs(0)):
        is_q = b < n_q_blocks
        row0 = tl.where(is_q, b, b - n_q_blocks) * ROWS
        rows = row0 + tl.arange(0, ROWS)
        n_rows = tl.where(is_q, n_q_rows, n_k_rows)
        mask = (rows < n_rows)[:, None] & cmask[None, :]
        offs = rows.to(tl.int64)[:, None] * head_dim + cols[None, :]
        if is_q:
            x = tl.load(q_ptr + offs, mask=mask, other=0.0).to(tl.float32)
            w = qw
        else:
            x = tl.load(k_ptr + offs, mask=mask, other=0.0).to(tl.float32)
            w = kw
        y = x * tl.rsqrt(tl.sum(x * x, axis=1) / head_dim + eps)[:, None] * w
        if is_q:
            tl.store(qo_ptr + offs, y.to(qo_ptr.dtype.element_ty), mask=mask)
        else:
            tl.store(ko_ptr + offs, y.to(ko_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, q, k, q_weight, k_weight):
        d = q.shape[-1]
        q2 = q.reshape(-1, d).contiguous()
        k2 = k.reshape(-1, d).contiguous()
        qo = torch.empty_like(q2)
        ko = torch.empty_like(k2)
        block = triton.next_power_of_2(d)
        rows = AKA_PARAMS["ROWS"]
        nqb, nkb = triton.cdiv(q2.shape[0], rows), triton.cdiv(k2.shape[0], rows)
        grid = (max(1, min(nqb + nkb, AKA_PARAMS["PROGS_PER_SM"] * _num_sms(q.device))),)
        warps = min(AKA_PARAMS["max_warps"], max(1, rows * block // 512))
        _qk_norm_persistent[grid](q2, k2, q_weight, k_weight, qo, ko, q2.shape[0], k2.shape[0], nqb, nqb + nkb, d,
                                  self.eps, ROWS=rows, BLOCK=block, num_warps=warps)
        return qo.view(q.shape), ko.view(k.shape)
