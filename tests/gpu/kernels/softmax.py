"""Vocabulary softmax, one program per row: an online pass for (max, sum) in fp32, then a write
pass (rows up to 152k x 4 B; across 132 SMs the re-read mostly hits the 60 MiB L2)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _softmax_row(x_ptr, y_ptr, n, stride_x, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    m = tl.full((BLOCK,), -1e30, tl.float32)  # finite: lanes past the row end must not make exp(-inf + inf)
    s = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n, BLOCK):
        idx = start + offs
        x = tl.load(x_ptr + row * stride_x + idx, mask=idx < n, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        s = s * tl.exp(m - m_new) + tl.exp(x - m_new)
        m = m_new
    row_max = tl.max(m, axis=0)
    total = tl.sum(s * tl.exp(m - row_max), axis=0)
    inv = 1.0 / total
    for start in range(0, n, BLOCK):
        idx = start + offs
        x = tl.load(x_ptr + row * stride_x + idx, mask=idx < n, other=float("-inf")).to(tl.float32)
        tl.store(y_ptr + row * stride_y + idx, tl.exp(x - row_max) * inv, mask=idx < n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits):
        x = logits.reshape(-1, logits.shape[-1])
        y = torch.empty(x.shape, dtype=torch.float32, device=x.device)
        _softmax_row[(x.shape[0],)](x, y, x.shape[1], x.stride(0), y.stride(0), BLOCK=4096, num_warps=8)
        return y.view(logits.shape)
