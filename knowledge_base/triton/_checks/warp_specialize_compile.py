"""Offline compile (no GPU) of one matmul loop with and without tl.range(warp_specialize=True) for
sm_90 and sm_100, with pointer loads and with tensor descriptors: is the loop partitioned (a
`ttg.warp_specialize` op in the TTGIR, `setmaxnreg` in the PTX), how many warps result, and does
it compile at all. Run: python knowledge_base/triton/_checks/warp_specialize_compile.py
Findings are in knowledge_base/triton/warp-specialization.md."""
import re, triton, triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

@triton.jit
def mm(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, WS: tl.constexpr):
    pm = tl.program_id(0); pn = tl.program_id(1)
    rm = pm * BM + tl.arange(0, BM); rn = pn * BN + tl.arange(0, BN); rk = tl.arange(0, BK)
    acc = tl.zeros([BM, BN], tl.float32)
    for k in tl.range(0, K, BK, warp_specialize=WS):
        x = tl.load(a + rm[:, None] * K + (k + rk)[None, :])
        y = tl.load(b + (k + rk)[:, None] * N + rn[None, :])
        acc = tl.dot(x, y, acc)
    tl.store(c + rm[:, None] * N + rn[None, :], acc.to(tl.bfloat16))

@triton.jit
def mm_desc(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, WS: tl.constexpr):
    pm = tl.program_id(0); pn = tl.program_id(1)
    da = tl.make_tensor_descriptor(a, [M, K], [K, 1], [BM, BK])
    db = tl.make_tensor_descriptor(b, [N, K], [K, 1], [BN, BK])
    acc = tl.zeros([BM, BN], tl.float32)
    for k in tl.range(0, K, BK, warp_specialize=WS):
        x = da.load([pm * BM, k]); y = db.load([pn * BN, k])
        acc = tl.dot(x, y.T, acc)
    rm = pm * BM + tl.arange(0, BM); rn = pn * BN + tl.arange(0, BN)
    tl.store(c + rm[:, None] * N + rn[None, :], acc.to(tl.bfloat16))

for fn in (mm, mm_desc):
  for cap in (90, 100):
    for ws in (False, True):
        sig = {"a": "*bf16", "b": "*bf16", "c": "*bf16", "M": "i32", "N": "i32", "K": "i32", "BM": "constexpr", "BN": "constexpr", "BK": "constexpr", "WS": "constexpr"}
        src = ASTSource(fn, sig, constexprs={"BM": 128, "BN": 128, "BK": 64, "WS": ws})
        try:
            k = triton.compile(src, target=GPUTarget("cuda", cap, 32), options={"num_warps": 4, "num_stages": 3})
            ttgir = k.asm["ttgir"]; ptx = k.asm["ptx"]
            print(f"{fn.__name__} sm_{cap} warp_specialize={ws}: partitioned={'ttg.warp_specialize' in ttgir} "
                  f"setmaxnreg={'setmaxnreg' in ptx} wgmma={'wgmma' in ptx} tcgen05.mma={'tcgen05.mma' in ptx} "
                  f"num_warps={k.metadata.num_warps} shared={k.metadata.shared} "
                  f"partitions={len(re.findall(r'partition[0-9]+', ttgir))}")
        except Exception as e:
            print(f"{fn.__name__} sm_{cap} warp_specialize={ws}: compile failed: {str(e).splitlines()[0][:200]}")
