"""Drop-in module for the best kernel of aka run dropout=off+retrieval=off__rms_norm__s2 (rms_norm).

    from kernel_module import ModelNew          # the verified nn.Module
    op = register_custom_op(**init_kwargs)      # optional: torch.ops.aka.rms_norm(...)

Re-verify with: aka eval /work/main/bench/ops/rms_norm experiments/runs/h200_dropout_retrieval/runs/dropout=off+retrieval=off__rms_norm__s2/best.py --shapes 14 --device cuda
"""
import importlib.util
from pathlib import Path

import torch

_HERE = Path(__file__).resolve().parent


def _load(name, file):
    spec = importlib.util.spec_from_file_location(name, _HERE / file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ModelNew = _load("aka_best_dropout_off_retrieval_off__rms_norm__s2", "best.py").ModelNew


def register_custom_op(name="aka::rms_norm", **init_kwargs):
    """Register the kernel as the torch.library custom op `name` (one module instance built from
    init_kwargs). Its fake (meta) implementation runs the PyTorch reference on fake tensors, so
    torch.compile can trace through the op."""
    model = ModelNew(**init_kwargs)
    reference = _load("aka_reference_dropout_off_retrieval_off__rms_norm__s2", "reference.py").Model(**init_kwargs)

    @torch.library.custom_op(name, mutates_args=())
    def _op(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return model(x=x, weight=weight)

    @_op.register_fake
    def _fake(x, weight):
        return reference(x=x, weight=weight)

    return _op
