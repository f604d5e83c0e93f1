"""
---
id: kernels/gumbel_max_sample/packed_atomic
op: gumbel_max_sample
category: Random
dtypes: [float32]
techniques: [gumbel-max, index-packing, order-preserving-float-keys, atomic-max, split-reduction, argmax-first-index, deterministic-reduction, int64-indexing, masking]
params:
  CHUNK: [1024, 4096, 8192, 16384]
  BLOCK: [512, 1024, 2048]
  num_warps: [4, 8]
summary: Each score becomes an order-preserving int32 key packed with its reversed index into one int64, so argmax with the lowest-index tie rule is a single integer max; (row, chunk) programs reduce per-lane packed maxima and tl.atomic_max them into one int64 per row (order-independent, hence deterministic); a tiny launch unpacks the token id.
---
What it does: Gumbel-max sampling, token = argmax_v(logits / T - log(E)), as one integer max.
Each score's fp32 bits become an order-preserving int32 key (negative floats have their 31
magnitude bits flipped, so signed-integer order equals float order), and the key is packed
with the index into one int64: (key << 32) | (V - 1 - v). The largest packed value is the
largest score, and among equal scores the lowest index (torch.argmax's rule) - so the whole
argmax, ties included, is tl.max over int64. Programs (row, chunk) keep per-lane packed maxima
over BLOCK-wide pieces of their CHUNK, reduce them and tl.atomic_max the result into the
row's int64 slot (initialised to INT64_MIN); a tiny second launch unpacks the index. The packed
values are distinct, so the atomic's arrival order cannot change the result: deterministic.
Which dtypes tl.atomic_max accepts (int64 yes, bf16 no) and why integer atomics are exact and
order-independent: (triton/atomics).

When to use it: `split_argmax` carries a (max, first index) pair per
lane - two reductions and a tie-break compare per step - and merges chunk winners in a second
launch that reads per-chunk partials. Here each step is one 64-bit max, the chunk merge is an
atomic on one word per row (no partials buffer), and the finishing launch reads B words.
64-bit integer max costs two 32-bit operations on the GPU, so the inner loop may not be
cheaper; what it saves is the partials traffic and the tie logic. The chunk count per row is
chosen like `split_argmax` (rows alone fill the GPU: one chunk). Whether it beats
`split_argmax` is for the H200 verify to say; CPU timing under the interpreter is meaningless.

Parameters: CHUNK: vocabulary entries per program (halved while B * chunks < 264 programs);
BLOCK: lanes per piece; num_warps as launched.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"CHUNK": 8192, "BLOCK": 1024, "num_warps": 8}

TARGET_PROGRAMS = 264  # 2 programs per SM on the 132-SM H200
INT64_MIN = -(2 ** 63)


@triton.jit
def _packed_chunk_max(x_ptr, t_ptr, e_ptr, best_ptr, V, stride_x, stride_e, CHUNK: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    c0 = tl.program_id(1) * CHUNK
    inv_t = 1.0 / tl.load(t_ptr + row).to(tl.float32)
    offs = tl.arange(0, BLOCK)
    best = tl.full((BLOCK,), -9223372036854775807 - 1, dtype=tl.int64)
    for v0 in range(c0, tl.minimum(c0 + CHUNK, V), BLOCK):
        cols = v0 + offs
        m = cols < tl.minimum(c0 + CHUNK, V)
        x = tl.load(x_ptr + row * stride_x + cols, mask=m, other=0.0).to(tl.float32)
        e = tl.load(e_ptr + row * stride_e + cols, mask=m, other=1.0).to(tl.float32)
        s = x * inv_t - tl.log(e)
        bits = s.to(tl.int32, bitcast=True)
        key = tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits).to(tl.int64)
        packed = (key << 32) | (V - 1 - cols).to(tl.int64)
        best = tl.maximum(best, tl.where(m, packed, -9223372036854775807 - 1))
    tl.atomic_max(best_ptr + row, tl.max(best, axis=0))


@triton.jit
def _unpack(best_ptr, out_ptr, V, B):
    b = tl.program_id(0)
    if b < B:
        tl.store(out_ptr + b, V - 1 - (tl.load(best_ptr + b) & 0xFFFFFFFF))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits, temperature, exp_noise):
        B, V = logits.shape
        p = AKA_PARAMS
        block = min(p["BLOCK"], triton.next_power_of_2(V))
        chunk = max(block, min(p["CHUNK"], triton.next_power_of_2(V)))
        while chunk > block and B * triton.cdiv(V, chunk) < TARGET_PROGRAMS:
            chunk //= 2
        best = torch.full((B,), INT64_MIN, dtype=torch.int64, device=logits.device)
        out = torch.empty((B,), dtype=torch.int64, device=logits.device)
        if B:
            _packed_chunk_max[(B, triton.cdiv(V, chunk))](logits, temperature, exp_noise, best, V, logits.stride(0),
                                                          exp_noise.stride(0), CHUNK=chunk, BLOCK=block,
                                                          num_warps=p["num_warps"])
            _unpack[(B,)](best, out, V, B, num_warps=1)
        return out
