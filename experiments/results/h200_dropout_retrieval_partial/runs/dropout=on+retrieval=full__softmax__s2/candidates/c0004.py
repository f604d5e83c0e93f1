"""
---
id: kernels/softmax/split_row
op: softmax
category: Activation
dtypes: [bfloat16, float32]
techniques: [split-reduction, two-stage-reduction, log-sum-exp-combine, row-in-registers, max-subtraction, fp32-accumulation, int64-indexing]
params:
  CHUNK: [2048, 4096, 8192, 16384]
  num_warps: [4, 8, 16]
summary: Each row is split into ceil(V / CHUNK) chunks, one program per (row, chunk) in two launches - partial (max, sum of exp) per chunk held in registers, then every chunk program merges its row's partials and writes its own chunk - so decode batches of 1-16 rows still fill all SMs.
---
Design. With one program per row, batch 1-16 at vocab 128k-152k puts 1-16 programs on a
132-SM machine. Here the grid is (rows, S) with S = ceil(V / CHUNK) (32-75 chunks per row at
CHUNK 4096 on the benchmark vocabularies, axis 1 far under its 65535 limit).
Launch 1: program (r, c) loads its chunk once into registers, writes m_c = max and
s_c = sum(exp(x - m_c)) to an fp32 workspace [rows, S].
Launch 2: program (r, c) loads the row's S partials ([next_pow2(S)] lanes, masked with -inf/0),
merges them (M = max m_c, L = sum s_c exp(m_c - M)), re-reads its chunk and writes
exp(x - M) / L in fp32. The re-read is 2 (bf16) or 4 (fp32) bytes per element; up to batch
~64 the whole logits tensor (at most 20 MB of bf16 here) is still in the 60 MiB L2 between the
two launches, so it costs L2 bandwidth, not DRAM. At large batch (4096 x 32768) the re-read goes to DRAM: there
the row-in-registers family is the better candidate. Merging partials in every chunk program
(instead of a third launch) costs S loads per program and keeps the op at two launches.
exp of the max-subtracted fp32 difference, as the reference; fp32 output; int64 offsets.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {'CHUNK': 4096, 'num_warps': 8}  # set by the offline proposer


@triton.jit
def _softmax_partials(x_ptr, m_ptr, s_ptr, n, n_chunks, stride_x, CHUNK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1)
    idx = c * CHUNK + tl.arange(0, CHUNK)
    x = tl.load(x_ptr + row * stride_x + idx, mask=idx < n, other=float("-inf")).to(tl.float32)
    m = tl.max(x, axis=0)  # finite: every chunk holds at least one element of the row
    s = tl.sum(tl.exp(x - m), axis=0)
    tl.store(m_ptr + row * n_chunks + c, m)
    tl.store(s_ptr + row * n_chunks + c, s)


@triton.jit
def _softmax_finish(x_ptr, y_ptr, m_ptr, s_ptr, n, n_chunks, stride_x, stride_y,
                    CHUNK: tl.constexpr, S_BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1)
    parts = tl.arange(0, S_BLOCK)
    pm = parts < n_chunks
    m_parts = tl.load(m_ptr + row * n_chunks + parts, mask=pm, other=float("-inf"))
    s_parts = tl.load(s_ptr + row * n_chunks + parts, mask=pm, other=0.0)
    row_max = tl.max(m_parts, axis=0)
    inv = 1.0 / tl.sum(s_parts * tl.exp(m_parts - row_max), axis=0)
    idx = c * CHUNK + tl.arange(0, CHUNK)
    x = tl.load(x_ptr + row * stride_x + idx, mask=idx < n, other=float("-inf")).to(tl.float32)
    tl.store(y_ptr + row * stride_y + idx, tl.exp(x - row_max) * inv, mask=idx < n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits):
        x = logits.reshape(-1, logits.shape[-1])
        n_rows, n = x.shape
        y = torch.empty((n_rows, n), dtype=torch.float32, device=x.device)
        chunk = min(AKA_PARAMS["CHUNK"], triton.next_power_of_2(n))
        n_chunks = triton.cdiv(n, chunk)
        m_ws = torch.empty((n_rows, n_chunks), dtype=torch.float32, device=x.device)
        s_ws = torch.empty((n_rows, n_chunks), dtype=torch.float32, device=x.device)
        warps = min(AKA_PARAMS["num_warps"], max(1, chunk // 256))
        grid = (n_rows, n_chunks)
        _softmax_partials[grid](x, m_ws, s_ws, n, n_chunks, x.stride(0), CHUNK=chunk, num_warps=warps)
        _softmax_finish[grid](x, y, m_ws, s_ws, n, n_chunks, x.stride(0), y.stride(0), CHUNK=chunk,
                              S_BLOCK=triton.next_power_of_2(n_chunks), num_warps=warps)
        return y.view(logits.shape)
