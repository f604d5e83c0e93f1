"""Deliberately slow: one program, one element at a time (known answer: sol_fraction far below 1)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _copy_one_lane(x_ptr, y_ptr, n):
    for i in range(0, n):
        tl.store(y_ptr + i, tl.load(x_ptr + i))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.empty_like(x)
        _copy_one_lane[(1,)](x, y, x.numel(), num_warps=1)
        return y
