import json
import os
import time

import pytest
import torch

HERE = os.path.dirname(__file__)


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/gpu/" in str(item.fspath):
            item.add_marker(pytest.mark.gpu)
            if not torch.cuda.is_available():
                item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU"))


@pytest.fixture
def record():
    """Append one JSON line per measured figure to $AKA_GPU_RESULTS (committed as tables)."""
    path = os.environ.get("AKA_GPU_RESULTS")

    def _record(kind: str, **data):
        if path:
            with open(path, "a") as f:
                f.write(json.dumps({"kind": kind, "t": time.time(), **data}, default=str) + "\n")
    return _record


# Operators whose kernels live in the knowledge base (one copy: the GPU tests measure those files).
KB_KERNELS = {"rms_norm": "rms_norm/rowwise", "silu_and_mul": "silu_and_mul/grid2d",
              "softmax": "softmax/online_two_pass"}


def kernel(name: str) -> str:
    if name in KB_KERNELS:
        return os.path.join(HERE, "..", "..", "knowledge_base", "kernels", KB_KERNELS[name] + ".py")
    return os.path.join(HERE, "kernels", name + ".py")


def problem(name: str) -> str:
    return os.path.join(HERE, "problems", name)
