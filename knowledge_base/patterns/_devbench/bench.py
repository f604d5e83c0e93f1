# Temporary measurement script for the knowledge base (removed after the run).
import os, sys, json, time, math
import torch
import triton
import triton.language as tl

CPU = os.environ.get("TRITON_INTERPRET") == "1"
if CPU:  # numpy>=2.4 breaks the 3.6 interpreter's int() of scalars (triton issue #9171)
    import triton.runtime.interpreter as _interp
    _orig = _interp._patch_lang_tensor
    def _patched(tensor, scope):
        _orig(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))
    _interp._patch_lang_tensor = _patched
dev = "cpu" if CPU else "cuda"
R = {}

@triton.jit
def copy_k(x, y, n, BLOCK: tl.constexpr, I64: tl.constexpr):
    pid = tl.program_id(0)
    if I64:
        offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    else:
        offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y + offs, tl.load(x + offs, mask=m), mask=m)

@triton.jit
def rms_k(x, w, y, stride, N, eps, BLOCK: tl.constexpr, ROWS: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    cm = cols < N
    wv = tl.load(w + cols, mask=cm, other=0.0).to(tl.float32)
    for r in tl.static_range(ROWS):
        row = pid * ROWS + r
        xv = tl.load(x + row * stride + cols, mask=cm, other=0.0).to(tl.float32)
        rstd = tl.rsqrt(tl.sum(xv * xv, axis=0) / N + eps)
        tl.store(y + row * stride + cols, (xv * rstd * wv).to(y.dtype.element_ty), mask=cm)

@triton.jit
def rms_rows_k(x, w, y, n_rows, N, eps, BLOCK: tl.constexpr, ROWS: tl.constexpr):
    # 2-D tile: ROWS short rows per program
    pid = tl.program_id(0)
    rows = pid * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    m = (rows[:, None] < n_rows) & (cols[None, :] < N)
    offs = rows[:, None] * N + cols[None, :]
    xv = tl.load(x + offs, mask=m, other=0.0).to(tl.float32)
    wv = tl.load(w + cols, mask=cols < N, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(xv * xv, axis=1) / N + eps)
    tl.store(y + offs, (xv * rstd[:, None] * wv[None, :]).to(y.dtype.element_ty), mask=m)

@triton.jit
def sum_atomic_k(x, out, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x + offs, mask=offs < n, other=0.0)
    tl.atomic_add(out, tl.sum(v, axis=0))

@triton.jit
def sum_partial_k(x, part, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x + offs, mask=offs < n, other=0.0)
    tl.store(part + pid, tl.sum(v, axis=0))

@triton.jit
def sum_final_k(part, out, n, BLOCK: tl.constexpr):
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for s in range(0, n, BLOCK):
        offs = s + tl.arange(0, BLOCK)
        acc += tl.load(part + offs, mask=offs < n, other=0.0)
    tl.store(out, tl.sum(acc, axis=0))

@triton.jit
def softmax_row_k(x, y, N, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    v = tl.load(x + row * N + cols, mask=cols < N, other=-float("inf")).to(tl.float32)
    v = v - tl.max(v, axis=0)
    e = tl.exp(v)
    tl.store(y + row * N + cols, (e / tl.sum(e, axis=0)).to(y.dtype.element_ty), mask=cols < N)

@triton.jit
def softmax_online_k(x, y, N, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    m = tl.full([BLOCK], -float("inf"), tl.float32)
    s = tl.zeros([BLOCK], tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        v = tl.load(x + row * N + cols, mask=cols < N, other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m, v)
        s = s * tl.exp(m - m_new) + tl.exp(v - m_new)
        m = m_new
    mx = tl.max(m, axis=0)
    tot = tl.sum(s * tl.exp(m - mx), axis=0)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        v = tl.load(x + row * N + cols, mask=cols < N, other=-float("inf")).to(tl.float32)
        tl.store(y + row * N + cols, (tl.exp(v - mx) / tot).to(y.dtype.element_ty), mask=cols < N)

@triton.jit
def mm_k(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    npm = tl.cdiv(M, BM)
    npn = tl.cdiv(N, BN)
    width = GROUP_M * npn
    g = pid // width
    first = g * GROUP_M
    gsz = min(npm - first, GROUP_M)
    pm = first + (pid % width) % gsz
    pn = (pid % width) // gsz
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    for k in range(0, K, BK):
        av = tl.load(a + rm[:, None] * K + (k + rk)[None, :])
        bv = tl.load(b + (k + rk)[:, None] * N + rn[None, :])
        acc = tl.dot(av, bv, acc)
    tl.store(c + rm[:, None] * N + rn[None, :], acc.to(tl.bfloat16))

def bench(fn, graph=False):
    if CPU:
        fn(); return float("nan")
    if graph:
        return triton.testing.do_bench_cudagraph(fn, rep=50, return_mode="median")
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")

def tbps(nbytes, ms):
    return round(nbytes / (ms * 1e-3) / 1e12, 3)

def main():
    small = CPU
    if not CPU:
        p = torch.cuda.get_device_properties(0)
        R["props"] = {k: getattr(p, k) for k in dir(p) if not k.startswith("_") and isinstance(getattr(p, k), (int, str, float))}
        from triton.runtime import driver
        R["triton_props"] = driver.active.utils.get_device_properties(0)
    # E1 copy
    try:
        n = (1 << 12) if small else (1 << 28)
        x = torch.randn(n, device=dev, dtype=torch.bfloat16); y = torch.empty_like(x)
        e1 = {}
        for (B, nw, i64, nn) in [(1024, 4, 0, n), (4096, 4, 0, n), (4096, 8, 0, n), (8192, 8, 0, n), (4096, 8, 1, n), (4096, 8, 0, n - 1)]:
            f = lambda: copy_k[(triton.cdiv(nn, B),)](x, y, nn, BLOCK=B, I64=i64, num_warps=nw)
            f(); assert torch.equal(y[:nn], x[:nn])
            e1[f"B{B}_w{nw}_i64{i64}_n{'odd' if nn != n else 'pow2'}"] = tbps(4 * nn, bench(f))
        e1["torch_copy"] = tbps(4 * n, bench(lambda: y.copy_(x)))
        R["copy_TBps"] = e1
    except Exception as ex:
        R['err_0'] = repr(ex)[:500]
    # E2 rms one row per program
    try:
        e2 = {}
        shapes = [(16, 96)] if small else [(16384, 4096), (16384, 5120), (16384, 7168), (16384, 8192), (4096, 4096), (16384, 14336)]
        for (T, H) in shapes:
            x = torch.randn(T, H, device=dev, dtype=torch.bfloat16); w = torch.randn(H, device=dev, dtype=torch.bfloat16)
            y = torch.empty_like(x)
            ref = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(x.dtype)
            B = triton.next_power_of_2(H)
            for nw in ([4] if small else [4, 8, 16]):
                f = lambda: rms_k[(T,)](x, w, y, H, H, 1e-6, BLOCK=B, ROWS=1, num_warps=nw)
                f(); assert torch.allclose(y.float(), ref.float(), atol=2e-2, rtol=2e-2)
                e2[f"{T}x{H}_w{nw}"] = tbps(2 * (2 * T * H + H), bench(f))
        R["rms_row_TBps"] = e2
    except Exception as ex:
        R['err_1'] = repr(ex)[:500]
    # E3 many short rows (qk_norm-like, 128 wide)
    try:
        e3 = {}
        nr = 64 if small else 16384 * 32
        x = torch.randn(nr, 128, device=dev, dtype=torch.bfloat16); w = torch.randn(128, device=dev, dtype=torch.bfloat16); y = torch.empty_like(x)
        ref = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(x.dtype)
        for ROWS, nw in [(1, 1), (1, 4), (4, 4), (16, 4), (64, 4), (64, 8)]:
            f = lambda: rms_rows_k[(triton.cdiv(nr, ROWS),)](x, w, y, nr, 128, 1e-6, BLOCK=128, ROWS=ROWS, num_warps=nw)
            f(); assert torch.allclose(y.float(), ref.float(), atol=2e-2, rtol=2e-2)
            e3[f"rows{ROWS}_w{nw}"] = tbps(2 * 2 * nr * 128, bench(f))
        R["short_rows_TBps"] = e3
    except Exception as ex:
        R['err_2'] = repr(ex)[:500]
    # E4 launch-bound: 32 x 4096
    try:
        e4 = {}
        x = torch.randn(32, 4096, device=dev, dtype=torch.bfloat16); w = torch.randn(4096, device=dev, dtype=torch.bfloat16); y = torch.empty_like(x)
        f = lambda: rms_k[(32,)](x, w, y, 4096, 4096, 1e-6, BLOCK=4096, ROWS=1, num_warps=8)
        f()
        e4["do_bench_us"] = bench(f) * 1e3
        e4["cudagraph_us"] = bench(f, graph=True) * 1e3
        if not CPU:
            torch.cuda.synchronize(); t0 = time.perf_counter()
            for _ in range(2000): f()
            torch.cuda.synchronize(); e4["python_loop_us_per_launch"] = (time.perf_counter() - t0) / 2000 * 1e6
        R["launch"] = e4
    except Exception as ex:
        R['err_3'] = repr(ex)[:500]
    # E5 atomics vs two-stage
    try:
        e5 = {}
        n = 1 << 12 if small else 1 << 24
        x = torch.randn(n, device=dev, dtype=torch.float32)
        out = torch.zeros(1, device=dev, dtype=torch.float32)
        B = 1024
        part = torch.empty(triton.cdiv(n, B), device=dev, dtype=torch.float32)
        vals = set()
        for _ in range(20):
            out.zero_(); sum_atomic_k[(triton.cdiv(n, B),)](x, out, n, BLOCK=B); vals.add(out.item())
        e5["atomic_distinct_results_of_20"] = len(vals)
        vals2 = set()
        for _ in range(20):
            sum_partial_k[(triton.cdiv(n, B),)](x, part, n, BLOCK=B); sum_final_k[(1,)](part, out, part.numel(), BLOCK=1024); vals2.add(out.item())
        e5["two_stage_distinct_results_of_20"] = len(vals2)
        e5["ref_minus_atomic_example"] = float(x.double().sum().item() - list(vals)[0])
        e5["atomic_us"] = bench(lambda: (out.zero_(), sum_atomic_k[(triton.cdiv(n, B),)](x, out, n, BLOCK=B))) * 1e3
        e5["two_stage_us"] = bench(lambda: (sum_partial_k[(triton.cdiv(n, B),)](x, part, n, BLOCK=B), sum_final_k[(1,)](part, out, part.numel(), BLOCK=1024))) * 1e3
        R["atomics"] = e5
    except Exception as ex:
        R['err_4'] = repr(ex)[:500]
    # E6 softmax 4096 x 32768
    try:
        e6 = {}
        T, N = (4, 256) if small else (4096, 32768)
        x = torch.randn(T, N, device=dev, dtype=torch.bfloat16); y = torch.empty_like(x)
        ref = torch.softmax(x.float(), -1)
        for name, f in [("row_in_regs_w16", lambda: softmax_row_k[(T,)](x, y, N, BLOCK=triton.next_power_of_2(N), num_warps=16 if not small else 4)),
                        ("row_in_regs_w32", lambda: softmax_row_k[(T,)](x, y, N, BLOCK=triton.next_power_of_2(N), num_warps=32 if not small else 4)),
                        ("online_2pass_B4096_w8", lambda: softmax_online_k[(T,)](x, y, N, BLOCK=min(4096, N), num_warps=8)),
                        ("online_2pass_B8192_w16", lambda: softmax_online_k[(T,)](x, y, N, BLOCK=min(8192, N), num_warps=16))]:
            f(); assert torch.allclose(y.float(), ref, atol=1e-2, rtol=2e-2), name
            e6[name] = tbps(2 * 2 * T * N, bench(f))
        e6["torch_softmax"] = tbps(2 * 2 * T * N, bench(lambda: torch.softmax(x, -1)))
        R["softmax_TBps"] = e6
    except Exception as ex:
        R['err_5'] = repr(ex)[:500]
    # E7 registers / spills
    try:
        e7 = {}
        if not CPU:
            x = torch.randn(8, 16384, device=dev, dtype=torch.bfloat16); w = torch.randn(16384, device=dev, dtype=torch.bfloat16); y = torch.empty_like(x)
            for nw in [2, 4, 8, 16]:
                k = rms_k[(8,)](x, w, y, 16384, 16384, 1e-6, BLOCK=16384, ROWS=1, num_warps=nw)
                e7[f"rms16384_w{nw}"] = {"n_regs": k.n_regs, "n_spills": k.n_spills}
            x = torch.randn(8, 32768, device=dev, dtype=torch.bfloat16); y = torch.empty_like(x)
            for nw in [4, 8, 16, 32]:
                k = softmax_row_k[(8,)](x, y, 32768, BLOCK=32768, num_warps=nw)
                e7[f"softmax32768_w{nw}"] = {"n_regs": k.n_regs, "n_spills": k.n_spills}
        R["regs"] = e7
    except Exception as ex:
        R['err_6'] = repr(ex)[:500]
    # E8 matmul grouped vs not
    try:
        e8 = {}
        if not CPU:
            M = N = K = 8192
            a = torch.randn(M, K, device=dev, dtype=torch.bfloat16); b = torch.randn(K, N, device=dev, dtype=torch.bfloat16); c = torch.empty(M, N, device=dev, dtype=torch.bfloat16)
            for G in [1, 8]:
                for (BM, BN, BK, nw, ns) in [(128, 256, 64, 8, 3), (128, 128, 64, 4, 4)]:
                    f = lambda: mm_k[(triton.cdiv(M, BM) * triton.cdiv(N, BN),)](a, b, c, M, N, K, BM=BM, BN=BN, BK=BK, GROUP_M=G, num_warps=nw, num_stages=ns)
                    f()
                    if G == 1 and BN == 256:
                        ref = a @ b; e8["max_rel_err"] = float(((c.float() - ref.float()).norm() / ref.float().norm()).item())
                    ms = bench(f)
                    e8[f"G{G}_{BM}x{BN}x{BK}_w{nw}_s{ns}_TFLOPs"] = round(2 * M * N * K / (ms * 1e-3) / 1e12, 1)
            e8["torch_TFLOPs"] = round(2 * M * N * K / (bench(lambda: a @ b) * 1e-3) / 1e12, 1)
        R["matmul"] = e8
    except Exception as ex:
        R['err_7'] = repr(ex)[:500]
    print(json.dumps(R, indent=1, default=str))
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "kb_bench.json"), "w") as fh:
            json.dump(R, fh, indent=1, default=str)

main()
