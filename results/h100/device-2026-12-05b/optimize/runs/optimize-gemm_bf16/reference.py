import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Linear without bias: y = x @ w.T.

    x [M, K], w [N, K] -> y [M, N] in x's dtype. Products are summed in fp32 (what cuBLAS and
    the Triton matmul do for bf16 operands) and the result is rounded once to the activation
    dtype. F.linear on bf16 tensors already accumulates in fp32 on CUDA and CPU, and upcasting
    would make the 16384-token shapes run fp32 GEMMs (about 10x slower than bf16 tensor cores),
    so the operands stay in their dtype here.
    """

    def __init__(self):
        super().__init__()

    def forward(self, x, w):
        return F.linear(x, w)
