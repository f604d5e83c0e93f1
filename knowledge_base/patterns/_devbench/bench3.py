# Temporary measurement script #3: dependent-load latency (removed after the run).
import os, json, time
import torch, triton, triton.language as tl
dev = "cuda"
R = {}

@triton.jit
def chase_k(nxt, out, start, steps, CG: tl.constexpr):
    i = start.to(tl.int64)
    for s in range(steps):
        if CG:
            i = tl.load(nxt + i, cache_modifier=".cg")
        else:
            i = tl.load(nxt + i)
    tl.store(out, i)

def make_cycle(n):
    p = torch.randperm(n, device=dev)
    nxt = torch.empty(n, dtype=torch.int64, device=dev)
    nxt[p] = torch.roll(p, -1)
    return nxt

out = torch.zeros(1, dtype=torch.int64, device=dev)
flush = torch.empty(512 << 20, dtype=torch.int8, device=dev)
steps = 20000
for name, nbytes, cg, warm in [("l1_32KiB", 32 << 10, 0, True), ("l2_8MiB_cg", 8 << 20, 1, True), ("l2_32MiB_cg", 32 << 20, 1, True),
                               ("dram_512MiB_cg", 512 << 20, 1, False), ("dram_4GiB_cg", 4 << 30, 1, False)]:
    n = nbytes // 8
    nxt = make_cycle(n)
    chase_k[(1,)](nxt, out, 0, 10, CG=cg, num_warps=1)  # compile
    res = []
    for rep in range(3):
        start = (rep + 1) * (n // 4)
        if warm:
            nxt.sum()  # bring the array into L2 (and L1 is per-SM, the chase warms it itself)
            chase_k[(1,)](nxt, out, start, steps, CG=cg, num_warps=1)
        else:
            flush.zero_()
        torch.cuda.synchronize(); t0 = time.perf_counter()
        chase_k[(1,)](nxt, out, start, steps, CG=cg, num_warps=1)
        torch.cuda.synchronize(); res.append((time.perf_counter() - t0) / steps * 1e9)
    R[name + "_ns"] = [round(v, 1) for v in res]
    del nxt
print(json.dumps(R, indent=1))
