"""
---
id: kernels/softmax/dispatch
op: softmax
category: Activation
dtypes: [bfloat16, float32]
techniques: [per-shape-dispatch, row-in-registers, split-reduction, two-stage-reduction, log-sum-exp-combine, one-pass-reduction, max-subtraction, fp32-accumulation, int64-indexing]
params:
  MIN_ROWS_PER_SM: [1, 2, 4, 8]
  CHUNK: [2048, 4096, 8192]
  num_warps: [4, 8, 16]
  tile_warps: [8, 16, 32]
summary: Picks per shape between the two softmax designs that each lose where the other wins on the H200 - the whole row in one program's registers (one read, one write) when the row fits and there are enough rows to fill every SM, else each row split over (row, chunk) programs in two launches.
---
Why two paths. On the H200 (aka kb verify, 2026-11-30, against torch.compile of the reference):
- split_row (one program per 4096-wide chunk, partial max and sum, then a second launch that
  merges the row's partials and writes its chunk) is 1.35-2.30x compile on every vocab-sized
  shape (batch 1-256, vocab 128k-152k), but 0.92x at 1024 x 32768 fp32 and 0.98x at 4096 x 32768
  bf16: there the second launch re-reads x from DRAM (the logits no longer fit in the L2).
- row_in_registers (one program per row, next_pow2(V) <= 32768 held whole) is 1.35x and 1.15x
  compile on those two shapes (73 and 254 us against split_row's 107 and 299 us), but 0.19-0.77x
  on few long rows: 1-64 programs on 132 SMs.
So: the tile path when the padded row fits (<= MAX_TILE elements) and there are at least
MIN_ROWS_PER_SM rows per SM; the split path otherwise. The measured points bracket the rule
(64 rows of 32000: split_row 7.4 us, tile 8.5 us; 1024 rows of 32768: tile), but the crossover
between 64 and 1024 rows was not measured: MIN_ROWS_PER_SM 2 (264 rows) is a guess.

Tile path: x loaded once into registers (masked lanes -inf, so exp gives 0), fp32 max, exp of the
max-subtracted difference (exp, not exp2 of a log2e-scaled input: the op's rtol is 1e-4), one
reciprocal, one fp32 store. Split path: grid (rows, ceil(V / CHUNK)); launch 1 stores each chunk's
(max, sum of exp) to an fp32 workspace, launch 2 merges the row's partials in every chunk program
(M = max m_c, L = sum s_c exp(m_c - M)) and writes its chunk. Output fp32 whatever the input dtype;
int64 row offsets (4096 x 32768 outputs). The SM count is the device's (4 under the CPU
interpreter, so the small CPU shapes take both paths).
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"MIN_ROWS_PER_SM": 2, "MAX_TILE": 32768, "tile_warps": 16, "CHUNK": 4096, "num_warps": 8}


@triton.jit
def _softmax_tile(x_ptr, y_ptr, n, stride_x, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + row * stride_x + offs, mask=m, other=float("-inf")).to(tl.float32)
    p = tl.exp(x - tl.max(x, axis=0))
    inv = 1.0 / tl.sum(p, axis=0)
    tl.store(y_ptr + row * stride_y + offs, p * inv, mask=m)


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


def _sm_count(device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4  # the CPU interpreter: small shapes still reach both paths


def use_tile(n_rows: int, n: int, sms: int, params=AKA_PARAMS) -> bool:
    """The one-program-per-row path: the padded row fits and the rows fill every SM."""
    return triton.next_power_of_2(n) <= params["MAX_TILE"] and n_rows >= params["MIN_ROWS_PER_SM"] * sms


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits):
        x = logits.reshape(-1, logits.shape[-1])
        n_rows, n = x.shape
        y = torch.empty((n_rows, n), dtype=torch.float32, device=x.device)
        if use_tile(n_rows, n, _sm_count(x.device)):
            block = triton.next_power_of_2(n)
            warps = min(AKA_PARAMS["tile_warps"], max(4, block // 1024))
            _softmax_tile[(n_rows,)](x, y, n, x.stride(0), y.stride(0), BLOCK=block, num_warps=warps)
            return y.view(logits.shape)
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
