"""The copy kernel launched over CHUNKS slices of the input, one launch each: the same GPU work as
copy.py (plus launch gaps), but a host path of a few milliseconds (hundreds of Triton launches), so
on a one-set shape it outruns the harness's fixed ~200 us head start. An honest host-bound
candidate: the harness should time its GPU work behind a spin sized to its host path and check it
by replaying a one-call graph (tests/gpu/test_measurement_gpu.py)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

CHUNKS = 200


@triton.jit
def _copy(x_ptr, y_ptr, start, end, BLOCK: tl.constexpr):
    offs = start + tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < end
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.empty_like(x)
        n = x.numel()
        step = triton.cdiv(triton.cdiv(n, CHUNKS), 8192) * 8192
        for start in range(0, n, step):
            end = min(n, start + step)
            _copy[(triton.cdiv(end - start, 8192),)](x, y, start, end, BLOCK=8192, num_warps=8)
        return y
