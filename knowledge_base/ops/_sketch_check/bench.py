"""Time a few sketches on the GPU at realistic shapes; print and save JSON."""
import json, os, sys
import torch, triton
import harness

OUT = os.environ.get("OUT", "/tmp")
dev = "cuda"
res = []

def run(op, name, fn, nbytes=None, flops=None):
    try:
        fn()
        torch.cuda.synchronize()
        t = triton.testing.do_bench(fn, warmup=25, rep=100)
        try:
            tg = triton.testing.do_bench_cudagraph(fn, rep=100)
        except Exception as e:
            tg = None
        r = {"op": op, "case": name, "us": t * 1e3, "us_graph": None if tg is None else tg * 1e3}
        if nbytes:
            r["TBps_graph"] = nbytes / ((tg or t) * 1e-3) / 1e12
        if flops:
            r["TFLOPs_graph"] = flops / ((tg or t) * 1e-3) / 1e12
        print(r, flush=True)
        res.append(r)
    except Exception as e:
        print("BENCH FAIL", op, name, repr(e)[:300], flush=True)

bf = torch.bfloat16
m = harness.load("rms_norm")
for T in (32, 4096, 16384):
    x = torch.randn(T, 4096, device=dev, dtype=bf); w = torch.ones(4096, device=dev, dtype=bf)
    run("rms_norm", f"{T}x4096", lambda: m.rms_norm(x, w), 2 * T * 4096 * 2)
m = harness.load("fused_add_rms_norm")
for T in (4096, 16384):
    x = torch.randn(T, 4096, device=dev, dtype=bf); r = torch.randn_like(x); w = torch.ones(4096, device=dev, dtype=bf)
    run("fused_add_rms_norm", f"{T}x4096", lambda: m.fused_add_rms_norm(x, r, w), 4 * T * 4096 * 2)
m = harness.load("silu_and_mul")
for T in (32, 4096):
    x = torch.randn(T, 28672, device=dev, dtype=bf)
    run("silu_and_mul", f"{T}x14336", lambda: m.silu_and_mul(x), 6 * T * 14336)
m = harness.load("gelu_and_mul")
x = torch.randn(4096, 28672, device=dev, dtype=bf)
run("gelu_and_mul", "4096x14336", lambda: m.gelu_and_mul(x), 6 * 4096 * 14336)
m = harness.load("softmax")
for R, N in ((4096, 32768), (32768, 4096)):
    x = torch.randn(R, N, device=dev, dtype=bf)
    run("softmax", f"{R}x{N}", lambda: m.softmax(x), 2 * R * N * 2)
m = harness.load("fp8_per_token_quant")
x = torch.randn(4096, 4096, device=dev, dtype=bf)
run("fp8_per_token_quant", "4096x4096", lambda: m.fp8_per_token_quant(x), 3 * 4096 * 4096)
m = harness.load("rope_neox")
q = torch.randn(4096, 32, 128, device=dev, dtype=bf); k = torch.randn(4096, 8, 128, device=dev, dtype=bf)
pos = torch.arange(4096, device=dev); cs = torch.randn(8192, 128, device=dev)
run("rope_neox", "4096 tok 32/8x128", lambda: m.rope_neox(q, k, pos, cs), 2 * 4096 * 40 * 128 * 2 + 4096 * 512)
m = harness.load("gemm_bf16")
for M in (32, 4096):
    a = torch.randn(M, 4096, device=dev, dtype=bf); wt = torch.randn(28672, 4096, device=dev, dtype=bf)
    run("gemm_bf16", f"{M}x28672x4096", lambda: m.gemm(a, wt), 2 * (M * 4096 + 28672 * 4096 + M * 28672), 2 * M * 28672 * 4096)
m = harness.load("prefill_attention")
q = torch.randn(4096, 32, 128, device=dev, dtype=bf); kk = torch.randn(4096, 8, 128, device=dev, dtype=bf); vv = torch.randn_like(kk)
cu = torch.tensor([0, 4096], dtype=torch.int32, device=dev)
run("prefill_attention", "S4096 32/8x128", lambda: m.prefill_attention(q, kk, vv, cu, 4096), None, 4 * 4096 * 4096 * 128 * 32 / 2)
m = harness.load("paged_decode_attention")
import tests
B, L = 64, 4096
kc, vc, bt = tests._paged_setup(dev, B, 8, 128, 16, [L] * B, bf)
qd = torch.randn(B, 32, 128, device=dev, dtype=bf); sl = torch.full((B,), L, dtype=torch.int32, device=dev)
run("paged_decode_attention", "B64 ctx4096 32/8x128", lambda: m.paged_decode(qd, kc, vc, bt, sl, L), 2 * B * L * 8 * 128 * 2)
json.dump(res, open(f"{OUT}/sketch_bench.json", "w"), indent=1)
