"""Where Triton 3.6 waits for a block-scaled fp8 GEMM's fresh dot, read from SASS (offline sm_90a).

    python scripts/probe_fp8_wgmma_waits.py [BM BN WARPS STAGES]     (default 128 128 8 3)

Block-scaled fp8 (DeepSeek-V3's recipe) starts every 128-wide K step's dot from zero and adds it,
scaled per row and per weight block, to an fp32 accumulator. Whether the scaling FMAs of one step can
overlap the next step's MMAs decides how close such a kernel gets to the fp8 MMA peak. This compiles
three forms of the K loop of a minimal TMA kernel (no GPU needed) and prints, per form, registers,
spills, the QGMMA count and what follows each group of QGMMAs in the loop:
  fresh   acc += tl.dot(a, b.T) * (sa[:, None] * sb)          (kernels/fp8_block_scaled_gemm/dispatch)
  carried the dot of step k issued before step k-1's result is scaled in (software pipelined by hand)
  paired  two K steps per trip: both dots issued, then both scaled in
For each group of QGMMAs it finds the `WARPGROUP.DEPBAR.LE gsb0, N` that waits for it: N 0 means
nothing stays in flight; the instructions between the group and its wait (and how many of them are
the FP32 multiplies of the scaling) are the only work that overlaps that group's MMAs in its
warpgroup.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource


@triton.jit
def _k_loop(a_ptr, b_ptr, y_ptr, sa_ptr, sb_ptr, M, N, K,
            BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, FORM: tl.constexpr):
    pm = tl.program_id(0)
    pn = tl.program_id(1)
    a_d = tl.make_tensor_descriptor(a_ptr, [M, K], [K, 1], [BM, BK])
    b_d = tl.make_tensor_descriptor(b_ptr, [N, K], [K, 1], [BN, BK])
    rm = pm * BM + tl.arange(0, BM)
    nk = K // BK
    acc = tl.zeros((BM, BN), tl.float32)
    if FORM == 0:      # fresh
        for kt in range(0, nk):
            a = a_d.load([pm * BM, kt * BK])
            b = b_d.load([pn * BN, kt * BK])
            sa = tl.load(sa_ptr + rm * nk + kt)
            sb = tl.load(sb_ptr + pn * nk + kt)
            acc += tl.dot(a, b.T) * (sa[:, None] * sb)
    elif FORM == 1:    # carried
        d = tl.dot(a_d.load([pm * BM, 0]), b_d.load([pn * BN, 0]).T)
        sa = tl.load(sa_ptr + rm * nk)
        sb = tl.load(sb_ptr + pn * nk)
        for kt in range(1, nk):
            d_next = tl.dot(a_d.load([pm * BM, kt * BK]), b_d.load([pn * BN, kt * BK]).T)
            acc += d * (sa[:, None] * sb)
            sa = tl.load(sa_ptr + rm * nk + kt)
            sb = tl.load(sb_ptr + pn * nk + kt)
            d = d_next
        acc += d * (sa[:, None] * sb)
    else:              # paired
        for kt in range(0, nk, 2):
            d0 = tl.dot(a_d.load([pm * BM, kt * BK]), b_d.load([pn * BN, kt * BK]).T)
            d1 = tl.dot(a_d.load([pm * BM, kt * BK + BK]), b_d.load([pn * BN, kt * BK + BK]).T)
            acc += d0 * (tl.load(sa_ptr + rm * nk + kt)[:, None] * tl.load(sb_ptr + pn * nk + kt))
            acc += d1 * (tl.load(sa_ptr + rm * nk + kt + 1)[:, None] * tl.load(sb_ptr + pn * nk + kt + 1))
    rn = pn * BN + tl.arange(0, BN)
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.bfloat16))


def probe(form: int, bm: int, bn: int, warps: int, stages: int) -> dict:
    sig = {"a_ptr": "*fp8e4nv", "b_ptr": "*fp8e4nv", "y_ptr": "*bf16", "sa_ptr": "*fp32", "sb_ptr": "*fp32",
           "M": "i32", "N": "i32", "K": "i32", "BM": "constexpr", "BN": "constexpr", "BK": "constexpr",
           "FORM": "constexpr"}
    k = triton.compile(ASTSource(fn=_k_loop, signature=sig, constexprs={"BM": bm, "BN": bn, "BK": 128, "FORM": form},
                                 attrs={}), target=GPUTarget("cuda", 90, 32),
                       options={"num_warps": warps, "num_stages": stages})
    tools = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    with tempfile.TemporaryDirectory() as tmp:
        cubin, ptx = os.path.join(tmp, "k.cubin"), os.path.join(tmp, "k.ptx")
        with open(cubin, "wb") as f:
            f.write(k.asm["cubin"])
        with open(ptx, "w") as f:
            f.write(k.asm["ptx"])
        sass = subprocess.run([os.path.join(tools, "nvdisasm"), "-c", cubin], capture_output=True, text=True).stdout
        info = subprocess.run([os.path.join(tools, "ptxas"), "-arch=sm_90a", "-v", ptx, "-o", "/dev/null"],
                              capture_output=True, text=True).stderr
    ins = [re.sub(r"/\*[0-9a-f]+\*/", "", s).strip() for s in sass.splitlines() if re.search(r"/\*[0-9a-f]+\*/", s)]
    waits = []   # per MMA group: (the wait that follows it, instructions before it, FP32 multiplies among them)
    for i, s in enumerate(ins):
        if "GMMA" in s and "gsb0" in s:
            j = next((j for j in range(i + 1, len(ins)) if "WARPGROUP.DEPBAR" in ins[j]), None)
            if j is not None:
                between = ins[i + 1:j]
                waits.append((ins[j].split("gsb0,")[-1].strip(" ;"), len(between),
                              sum(bool(re.match(r"(@\S+ )?(FFMA|FMUL)\b", b)) for b in between)))
    return {"registers": int(re.search(r"Used (\d+) registers", info).group(1)),
            "spill": int((re.search(r"(\d+) bytes spill stores", info) or [0, 0])[1]),
            "qgmma": sum("QGMMA" in s for s in ins), "waits": waits}


def main(argv: list[str]) -> int:
    bm, bn, warps, stages = (int(x) for x in (argv or ["128", "128", "8", "3"]))
    print(f"sm_90a, triton {triton.__version__}, {bm}x{bn}x128 tile, {warps} warps, {stages} stages")
    for form, name in enumerate(("fresh", "carried", "paired")):
        r = probe(form, bm, bn, warps, stages)
        print(f"{name:8s} registers {r['registers']}, spill {r['spill']} B, {r['qgmma']} QGMMA; each group's wait "
              "(DEPBAR count, instructions before it, FFMA/FMUL among them): "
              + ", ".join(f"({w}, {n}, {f})" for w, n, f in r["waits"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
