"""
---
id: kernels/softmax/last_chunk
op: softmax
category: Activation
dtypes: [bfloat16, float32]
techniques: [split-reduction, last-block-finalize, log-sum-exp-combine, max-subtraction, fp32-accumulation, int64-indexing]
params:
  CHUNK: [2048, 4096, 8192]
  WBLOCK: [2048, 4096, 8192]
  num_warps: [4, 8, 16]
  MIN_ROWS: [32, 64, 128]
summary: Rows split into chunks, one program per (row, chunk) computing the chunk's (max, sum of exp); from MIN_ROWS rows up, the last chunk program of a row to finish (an atomic counter per row) merges the row's partials and writes the whole row while it is still in the L2, in the same launch; below MIN_ROWS, a second launch in which every chunk program writes its own chunk.
---
Why. `split_row` re-reads its chunk in a second launch. Up to ~20 MB of logits that re-read hits
the L2, but at batch 256 x 152k (78 MB of bf16, 155 MB of fp32) the first launch has evicted
most of the tensor before the second starts. Its traffic is then read + read + write against the
roofline's read + write: 0.67 of the ceiling at fp32 in/out, 0.75 at bf16 in, fp32 out. The H200
measured 0.59-0.63 at every large shape (KERNELS_H200.md, session 7).

Design (MIN_ROWS rows or more). Program (r, c) loads its chunk once, computes m_c = max and
s_c = sum(exp(x - m_c)) in fp32, and publishes their bits with atomic exchanges. It then adds 1 to
row r's counter with an acq_rel atomic. The program that sees S - 1 is the row's last; every other
chunk's partials are visible to it. It reads the S partials with atomics (from the L2, the
coherence point), merges them (M = max m_c, L = sum s_c exp(m_c - M)), resets the counter to 0
for the next call, and writes exp(x - M) / L over the whole row in WBLOCK pieces. It re-reads the
row, but the row's chunks were read moments before by its sibling programs, and one row (at most
608 KB here) against the 60 MiB L2 is a hit. So DRAM sees one read and one write. A row's write is
one program's work; at 64+ rows, the other programs keep streaming later rows meanwhile.

No program waits for another: the last one to arrive does the work. So the kernel is
deadlock-free in any launch order, including the interpreter's one program at a time. The
counters live in a per-module buffer zeroed once. The last program of each row zeroes its own
counter, so every call leaves the buffer as it found it.

Below MIN_ROWS rows (decode batches 1-16), one program per row would leave most SMs idle while it
writes, so the first launch only publishes partials. A second launch, of the same (row, chunk)
grid, merges them per program and writes each chunk: the tensor is small enough (< 20 MB) that
its re-read hits the L2.

Predicted, not measured at the time of writing (session 7, no device time left): ~0.85 of the
measured ceiling at 256 x 152k against split_row's 0.59-0.61. The last rows' single-program
writes are the tail.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {'CHUNK': 4096, 'WBLOCK': 8192, 'num_warps': 8, 'MIN_ROWS': 64}  # set by the offline proposer


@triton.jit
def _softmax_chunks(x_ptr, y_ptr, m_ptr, s_ptr, cnt_ptr, n, n_chunks, stride_x, stride_y,
                    CHUNK: tl.constexpr, S_BLOCK: tl.constexpr, WBLOCK: tl.constexpr,
                    LAST_WRITES: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1)
    idx = c * CHUNK + tl.arange(0, CHUNK)
    x = tl.load(x_ptr + row * stride_x + idx, mask=idx < n, other=float("-inf")).to(tl.float32)
    m = tl.max(x, axis=0)  # finite: every chunk holds at least one element of the row
    s = tl.sum(tl.exp(x - m), axis=0)
    if LAST_WRITES:
        # m_ptr, s_ptr: int32 workspaces holding the fp32 bits (integer atomics everywhere,
        # which the interpreter also runs)
        tl.atomic_xchg(m_ptr + row * n_chunks + c, m.to(tl.int32, bitcast=True))
        tl.atomic_xchg(s_ptr + row * n_chunks + c, s.to(tl.int32, bitcast=True))
        arrived = tl.atomic_add(cnt_ptr + row, 1)  # acq_rel: our partials before the count
        if arrived == n_chunks - 1:
            parts = tl.arange(0, S_BLOCK)
            pm = parts < n_chunks
            # atomic reads: served by the L2, where the other programs' exchanges landed
            m_bits = tl.atomic_add(m_ptr + row * n_chunks + parts, 0, mask=pm)
            s_bits = tl.atomic_add(s_ptr + row * n_chunks + parts, 0, mask=pm)
            m_parts = tl.where(pm, m_bits.to(tl.float32, bitcast=True), float("-inf"))
            s_parts = tl.where(pm, s_bits.to(tl.float32, bitcast=True), 0.0)
            row_max = tl.max(m_parts, axis=0)
            inv = 1.0 / tl.sum(s_parts * tl.exp(m_parts - row_max), axis=0)
            tl.atomic_xchg(cnt_ptr + row, 0)  # left as found, for the next call
            for start in range(0, n, WBLOCK):
                w = start + tl.arange(0, WBLOCK)
                xw = tl.load(x_ptr + row * stride_x + w, mask=w < n, other=float("-inf")).to(tl.float32)
                tl.store(y_ptr + row * stride_y + w, tl.exp(xw - row_max) * inv, mask=w < n)
    else:
        tl.store(m_ptr + row * n_chunks + c, m)
        tl.store(s_ptr + row * n_chunks + c, s)


@triton.jit
def _softmax_write_chunk(x_ptr, y_ptr, m_ptr, s_ptr, n, n_chunks, stride_x, stride_y,
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
        self._counts = None  # int32 per row, zero between calls (each call's last programs re-zero it)

    def _row_counters(self, n_rows: int, device) -> torch.Tensor:
        if self._counts is None or self._counts.numel() < n_rows or self._counts.device != device:
            self._counts = torch.zeros(max(n_rows, 1), dtype=torch.int32, device=device)
        return self._counts

    def forward(self, logits):
        x = logits.reshape(-1, logits.shape[-1])
        if x.stride(-1) != 1:
            x = x.contiguous()
        n_rows, n = x.shape
        y = torch.empty((n_rows, n), dtype=torch.float32, device=x.device)
        chunk = min(AKA_PARAMS["CHUNK"], triton.next_power_of_2(n))
        n_chunks = triton.cdiv(n, chunk)
        s_block = triton.next_power_of_2(n_chunks)
        last_writes = n_rows >= AKA_PARAMS["MIN_ROWS"]
        ws_dtype = torch.int32 if last_writes else torch.float32  # int32: fp32 bits, for the atomics
        m_ws = torch.empty((n_rows, n_chunks), dtype=ws_dtype, device=x.device)
        s_ws = torch.empty((n_rows, n_chunks), dtype=ws_dtype, device=x.device)
        warps = min(AKA_PARAMS["num_warps"], max(1, chunk // 256))
        grid = (n_rows, n_chunks)
        counts = self._row_counters(n_rows, x.device) if last_writes else m_ws  # unused below MIN_ROWS
        _softmax_chunks[grid](x, y, m_ws, s_ws, counts, n, n_chunks, x.stride(0), y.stride(0),
                              CHUNK=chunk, S_BLOCK=s_block, WBLOCK=AKA_PARAMS["WBLOCK"],
                              LAST_WRITES=last_writes, num_warps=warps)
        if not last_writes:
            _softmax_write_chunk[grid](x, y, m_ws, s_ws, n, n_chunks, x.stride(0), y.stride(0),
                                       CHUNK=chunk, S_BLOCK=s_block, num_warps=warps)
        return y.view(logits.shape)
