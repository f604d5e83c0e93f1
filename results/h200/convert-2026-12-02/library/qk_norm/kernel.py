"""
---
id: kernels/qk_norm/flat_rows
op: qk_norm
category: Normalization
dtypes: [bfloat16]
techniques: [multi-row-per-program, 2d-tiling, one-pass-reduction, row-in-registers, kernel-fusion, fp32-accumulation, int64-indexing]
params:
  TILE: [2048, 4096, 8192]
  max_warps: [2, 4, 8]
summary: q and k viewed as [T*H, D] rows; one launch whose first program blocks take ROWS q rows each and the rest ROWS k rows; [ROWS, BLOCK_D] tiles reduced along D.
---
Design. Each head vector is an independent row of D (128) elements, far too little for a
program, so q is viewed as [T*Hq, D] and k as [T*Hkv, D] (contiguous heads) and each program
normalises ROWS = TILE // BLOCK_D consecutive rows: 4-16 KB of bf16 per program at the default.
Rows of a token are contiguous, so tiles cross token boundaries freely and no lanes are wasted
on head counts that are not multiples of a head block (40 q heads, 1 kv head). A single launch
covers both tensors: program ids below the number of q blocks take q (with q_weight), the rest
take k (with k_weight); the branch is per program, uniform. The weight (D elements) is loaded
once per program and broadcast across rows. Row offsets are int64 (T*Hq*D reaches 2**27 here and
grows with context). D need not be a power of two (small shape uses 80): masked, divide by D.
Few rows (decode): ROWS halves until the launch has at least 4 programs per SM, as l2_norm and
gated_rms_norm's row tiles now do. l2_norm/row_tile is this tiling on the same 128-wide head rows,
and at 32 rows per program it lost to torch.compile at decode on the H200 (timing v4, session 6):
1.23 us against 1.00 at 1 token x 16 heads, 2.48 against 1.96 at 256 x 16 heads (128 programs).
Before this, 32 rows per program gave 2 programs at 1 token (40 heads), 40 at 32 tokens and 320 at
256 tokens; now 40, 640 and 640 (1, 2 and 16 rows). Prefill is unchanged (from 512 tokens: 640 or
more programs of 32 rows). num_warps follows the shrunken tile. On CPU (the interpreter) the
machine is taken as one SM. Prediction (unmeasured): decode shapes move toward compile's time;
large shapes unchanged.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {'TILE': 4096, 'max_warps': 4}  # set by the offline proposer


@triton.jit
def _norm_rows(x_ptr, w_ptr, y_ptr, row0, n_rows, n_cols, stride_x, stride_y, eps,
               ROWS: tl.constexpr, BLOCK: tl.constexpr):
    rows = row0 + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    cmask = cols < n_cols
    mask = (rows < n_rows)[:, None] & cmask[None, :]
    r64 = rows.to(tl.int64)[:, None]
    x = tl.load(x_ptr + r64 * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=1) / n_cols + eps)
    tl.store(y_ptr + r64 * stride_y + cols[None, :], (x * rstd[:, None] * w[None, :]).to(y_ptr.dtype.element_ty),
             mask=mask)


@triton.jit
def _qk_norm_flat(q_ptr, k_ptr, qw_ptr, kw_ptr, qo_ptr, ko_ptr, n_q_rows, n_k_rows, n_q_blocks, head_dim,
                  stride_q, stride_k, stride_qo, stride_ko, eps, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    if pid < n_q_blocks:
        _norm_rows(q_ptr, qw_ptr, qo_ptr, pid * ROWS, n_q_rows, head_dim, stride_q, stride_qo, eps, ROWS, BLOCK)
    else:
        _norm_rows(k_ptr, kw_ptr, ko_ptr, (pid - n_q_blocks) * ROWS, n_k_rows, head_dim, stride_k, stride_ko, eps,
                   ROWS, BLOCK)


class ModelNew(nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, q, k, q_weight, k_weight):
        d = q.shape[-1]
        q2 = q.reshape(-1, d)
        k2 = k.reshape(-1, d)
        qo = torch.empty(q2.shape, dtype=q.dtype, device=q.device)
        ko = torch.empty(k2.shape, dtype=k.dtype, device=k.device)
        block = triton.next_power_of_2(d)
        rows = max(1, AKA_PARAMS["TILE"] // block)
        n_q, n_k = q2.shape[0], k2.shape[0]
        sms = torch.cuda.get_device_properties(q.device).multi_processor_count if q.is_cuda else 1
        while rows > 1 and triton.cdiv(n_q, rows) + triton.cdiv(n_k, rows) < 4 * sms:
            rows //= 2
        warps = min(AKA_PARAMS["max_warps"], max(1, rows * block // 512))
        nqb = triton.cdiv(q2.shape[0], rows)
        nkb = triton.cdiv(k2.shape[0], rows)
        _qk_norm_flat[(nqb + nkb,)](q2, k2, q_weight, k_weight, qo, ko, q2.shape[0], k2.shape[0], nqb, d,
                                    q2.stride(0), k2.stride(0), qo.stride(0), ko.stride(0), self.eps,
                                    ROWS=rows, BLOCK=block, num_warps=warps)
        return qo.view(q.shape), ko.view(k.shape)
