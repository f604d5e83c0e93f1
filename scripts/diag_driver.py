"""What the judge's warm-up does (aka/evaluate/judge.py, _warm_up), in the open, on the device: on a
thread of a fresh interpreter, does Triton's driver module (cuda_utils) land in TRITON_CACHE_DIR?
H200, 2026-12-03 (results/h200/harness/judge-2026-12-03/call6/driver_diag.txt): it does.

    python3 scripts/diag_driver.py
"""
import glob
import os
import tempfile
import threading
import traceback

cache = tempfile.mkdtemp()
os.environ["TRITON_CACHE_DIR"] = cache


def warm_up() -> None:
    import torch
    torch.cuda.init()
    torch.empty(1, device="cuda")
    torch.cuda.current_blas_handle()
    import torch._dynamo  # noqa: F401 - as the judge's warm-up imports them
    import torch.utils.flop_counter  # noqa: F401
    try:
        import triton
        utils = triton.runtime.driver.active.utils
        print("utils", type(utils), getattr(utils, "__module__", None))
    except Exception:  # noqa: BLE001 - the point is to see it
        traceback.print_exc()


t = threading.Thread(target=warm_up)
t.start()
t.join(120)
print("cache after warm-up:", sorted(os.path.relpath(p, cache) for p in glob.glob(cache + "/**", recursive=True))[:20])
import triton  # noqa: E402
print("knobs cache dir:", triton.knobs.cache.dir)
