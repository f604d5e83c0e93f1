"""The common part of the peers that call a third-party library's Triton kernels (Liger, fla):
built from the reference module (its eps), and unavailable where that library cannot run here."""
from __future__ import annotations

import importlib

import torch.nn as nn


class LibraryPeer(nn.Module):
    module = ""            # the library module the forward calls into (imported to check it loads)
    cpu_reason = "this library's Triton kernels run on a GPU only"   # what a CPU is told
    default_eps = 1e-6

    def __init__(self, ref=None):
        super().__init__()
        self.eps = float(getattr(ref, "eps", self.default_eps))

    @classmethod
    def unavailable(cls, device: str) -> str | None:
        if not str(device).startswith("cuda"):
            return cls.cpu_reason
        try:
            importlib.import_module(cls.module)
        except Exception as e:  # noqa: BLE001 - an install that does not import is a reason, said
            return f"{cls.module} does not import: {type(e).__name__}: {str(e)[:160]}"
        return None

