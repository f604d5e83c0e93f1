# what the judge's warm-up does, in the open: does Triton's driver module land in TRITON_CACHE_DIR?
import os, sys, tempfile, threading, traceback, glob, pathlib
d = tempfile.mkdtemp(); os.environ["TRITON_CACHE_DIR"] = d
import torch
def init():
    import torch
    torch.cuda.init(); torch.empty(1, device="cuda"); torch.cuda.current_blas_handle()
    import torch._dynamo, torch.utils.flop_counter
    try:
        import triton
        u = triton.runtime.driver.active.utils
        print("utils", type(u), getattr(u, "__module__", None))
    except Exception:
        traceback.print_exc()
t = threading.Thread(target=init); t.start(); t.join(120)
print("cache after warm-up:", sorted(str(pathlib.Path(p).relative_to(d)) for p in glob.glob(d + "/**", recursive=True))[:20])
import triton
print("knobs cache dir:", getattr(getattr(triton, "knobs", None), "cache", None) and triton.knobs.cache.dir)
import triton.runtime.build as b; print("build module:", b.__file__)
print([n for n in dir(b) if "cache" in n.lower() or "compile" in n.lower()])
