import torch
import torch.nn as nn


class Model(nn.Module):
    """Identity that materialises a new tensor: the memory-roofline known answer."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x.clone()
