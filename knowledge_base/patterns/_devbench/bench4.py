# Temporary: GPU validation of KB sketches + pipelining / split-K measurements (removed after the run).
import os, re, sys, json, time, importlib.util, traceback
import torch, triton, triton.language as tl
KB = os.path.join(os.path.dirname(__file__), "..", "..")
TMP = "/tmp/kbmods"; os.makedirs(TMP, exist_ok=True)
R = {}
def load_note(rel):
    src = open(os.path.join(KB, rel)).read()
    code = "import torch, triton\nimport triton.language as tl\n" + "\n\n".join(re.findall(r"```python\n(.*?)```", src, re.S))
    name = re.sub(r"\W", "_", rel)
    p = os.path.join(TMP, name + ".py"); open(p, "w").write(code)
    spec = importlib.util.spec_from_file_location(name, p); m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
    return m
def bench(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
def run(name, f):
    try:
        R[name] = f()
    except Exception as e:
        R[name] = "ERR " + repr(e)[:300]
dev = "cuda"

def v_fp8():
    m = load_note("patterns/fp8-scaling.md")
    T, H, G = 512, 7168, 128
    x = torch.randn(T, H, device=dev, dtype=torch.bfloat16); x.view(-1)[torch.randperm(T * H, device=dev)[: T * H // 1000]] *= 50
    q = torch.empty(T, H, device=dev, dtype=torch.float8_e4m3fn); s = torch.empty(T, H // G, device=dev)
    m.quant_fp8_group[(T,)](x, q, s, H, 1e-10, GROUP=G, NG=64, num_warps=8)
    xs = x.float().view(T, H // G, G); rs = xs.abs().amax(-1).clamp_min(1e-10) / 448.0
    rq = (xs / rs[..., None]).clamp(-448, 448).to(torch.float8_e4m3fn).view(T, H)
    return {"scale_equal": bool(torch.equal(s, rs)), "q_bits_equal_frac": float((q.view(torch.uint8) == rq.view(torch.uint8)).float().mean()),
            "TBps": round((T * H * 3 + T * H // G * 4) / (bench(lambda: m.quant_fp8_group[(T,)](x, q, s, H, 1e-10, GROUP=G, NG=64, num_warps=8)) * 1e-3) / 1e12, 3)}
run("fp8_group_quant", v_fp8)

def v_epq():
    m = load_note("patterns/epilogue-quantization.md")
    T, H = 4096, 4096
    x = torch.randn(T, H, device=dev, dtype=torch.bfloat16); w = torch.rand(H, device=dev, dtype=torch.bfloat16) + 0.5
    q = torch.empty(T, H, device=dev, dtype=torch.float8_e4m3fn); s = torch.empty(T, device=dev)
    f = lambda: m.rmsnorm_quant_fp8[(T,)](x, w, q, s, H, H, 1e-6, 1e-10, BLOCK=H, ROUND_BF16=True, num_warps=8)
    f()
    xf = x.float(); y = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).bfloat16().float()
    rs = y.abs().amax(-1).clamp_min(1e-10) / 448.0; rq = (y / rs[:, None]).clamp(-448, 448).to(torch.float8_e4m3fn)
    return {"scale_rel_err": float(((s - rs).abs() / rs).max()), "q_bits_equal_frac": float((q.view(torch.uint8) == rq.view(torch.uint8)).float().mean()),
            "TBps": round((T * H * 3 + H * 2 + T * 4) / (bench(f) * 1e-3) / 1e12, 3)}
run("rmsnorm_fp8_quant", v_epq)

def v_flash():
    m = load_note("patterns/flash-attention-tiling.md")
    S, NH, NKV, D = 4096, 32, 8, 128
    q = torch.randn(S, NH, D, device=dev, dtype=torch.bfloat16); k = torch.randn(S, NKV, D, device=dev, dtype=torch.bfloat16); v = torch.randn_like(k)
    o = torch.empty_like(q)
    f = lambda: m.flash_attn_fwd[(triton.cdiv(S, 128), NH)](q, k, v, o, S, NH, NKV, D ** -0.5, HEAD_DIM=D, BLOCK_M=128, BLOCK_N=64, CAUSAL=True, num_warps=8, num_stages=3)
    f()
    ref = torch.nn.functional.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), is_causal=True, enable_gqa=True).transpose(0, 1)
    err = float((o.float() - ref.float()).norm() / ref.float().norm())
    ms = bench(f); flops = 4 * S * S * D * NH / 2
    ms_ref = bench(lambda: torch.nn.functional.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), is_causal=True, enable_gqa=True))
    return {"rel_err": err, "TFLOPs": round(flops / (ms * 1e-3) / 1e12, 1), "sdpa_TFLOPs": round(flops / (ms_ref * 1e-3) / 1e12, 1)}
run("flash_attn_causal_4096", v_flash)

def v_decode():
    m = load_note("patterns/split-kv-decode.md")
    B, NH, NKV, D, BS, L = 8, 32, 8, 128, 16, 8192
    nblk = B * L // BS
    kc = torch.randn(nblk, BS, NKV, D, device=dev, dtype=torch.bfloat16); vc = torch.randn_like(kc)
    bt = torch.randperm(nblk, device=dev).int().view(B, L // BS); lens = torch.full((B,), L, device=dev, dtype=torch.int32)
    q = torch.randn(B, NH, D, device=dev, dtype=torch.bfloat16); o = torch.empty_like(q)
    out = {}
    for SPL in (1, 4, 8):
        bps = triton.cdiv(L // BS, SPL)
        po = torch.empty(B * NH * SPL, D, device=dev); pm = torch.empty(B * NH * SPL, device=dev); pl = torch.empty_like(pm)
        def f():
            m.decode_partial[(B, NKV, SPL)](q, kc, vc, bt, lens, po, pm, pl, D ** -0.5, NH, NKV, L // BS, bps, D=D, BS=BS, GROUP=NH // NKV, GP=16, SPLITS=SPL, num_warps=4)
            m.decode_combine[(B * NH,)](po, pm, pl, o, D=D, SPLITS=SPL)
        f()
        if SPL == 4:
            kk = kc[bt.long()].reshape(B, L, NKV, D).float().repeat_interleave(NH // NKV, 2); vv = vc[bt.long()].reshape(B, L, NKV, D).float().repeat_interleave(NH // NKV, 2)
            att = torch.softmax(torch.einsum("bhd,bthd->bht", q.float(), kk) * D ** -0.5, -1); ref = torch.einsum("bht,bthd->bhd", att, vv)
            out["rel_err"] = float((o.float() - ref).norm() / ref.norm())
        out[f"split{SPL}_TBps"] = round(2 * B * L * NKV * D * 2 / (bench(f) * 1e-3) / 1e12, 3)
    return out
run("decode_split_kv", v_decode)

def v_moe():
    m = load_note("patterns/moe-align-grouped-gemm.md")
    T, TOPK, E, BM, K, N = 64, 8, 64, 16, 2048, 1024
    topk = torch.stack([torch.randperm(E, device=dev)[:TOPK] for _ in range(T)]).int().view(-1)
    ns = T * TOPK; ml = ns + E * (BM - 1)
    sid = torch.full((ml,), ns, device=dev, dtype=torch.int32); eid = torch.full((triton.cdiv(ml, BM),), -1, device=dev, dtype=torch.int32); tot = torch.empty(1, device=dev, dtype=torch.int32)
    m.moe_align_small[(1,)](topk, sid, eid, tot, ns, E=E, BLOCK_M=BM, NS=512)
    a = torch.randn(T, K, device=dev, dtype=torch.bfloat16); w = torch.randn(E, N, K, device=dev, dtype=torch.bfloat16) / 30
    c = torch.empty(ns, N, device=dev, dtype=torch.bfloat16)
    m.moe_gemm[(eid.numel(), triton.cdiv(N, 64))](a, w, c, sid, eid, tot, N, K, ns, TOPK, BM=BM, BN=64, BK=64)
    ref = torch.einsum("sk,snk->sn", a.float().repeat_interleave(TOPK, 0), w.float()[topk.long()])
    return {"rel_err": float((c.float() - ref).norm() / ref.norm()), "total": int(tot.item())}
run("moe_align_gemm", v_moe)

def v_misc():
    out = {}
    m = load_note("patterns/gather-scatter-indices.md")
    T, NB, BS, NH, D = 256, 512, 16, 8, 128
    k = torch.randn(T, NH * D, device=dev, dtype=torch.bfloat16); v = torch.randn_like(k)
    kc = torch.zeros(NB, BS, NH, D, device=dev, dtype=torch.bfloat16); vc = torch.zeros_like(kc)
    slots = torch.randperm(NB * BS, device=dev)[:T].long(); slots[::7] = -1
    m.kv_cache_write[(T,)](k, v, kc, vc, slots, k.stride(0), BS, kc.stride(0), kc.stride(1), ROW=NH * D)
    kr = torch.zeros(NB * BS, NH * D, device=dev, dtype=torch.bfloat16); ok = slots >= 0; kr[slots[ok]] = k[ok]
    out["kv_cache_write_ok"] = bool(torch.equal(kc.view(NB * BS, -1), kr))
    m2 = load_note("patterns/rope-rotation.md")
    T, NQ, NKV, D = 1024, 32, 8, 128
    qkv = torch.randn(T, (NQ + 2 * NKV) * D, device=dev, dtype=torch.bfloat16); pos = torch.randint(0, 4096, (T,), device=dev)
    inv = 10000.0 ** (-torch.arange(0, D // 2, device=dev).float() * 2 / D); ang = torch.arange(4096, device=dev).float()[:, None] * inv
    cache = torch.cat([ang.cos(), ang.sin()], -1)
    orig = qkv.clone()
    m2.rope_neox_qk[(T,)](qkv, pos, cache, qkv.stride(0), NQ, NKV, HEAD_DIM=D, HALF=D // 2, HP=64, num_warps=4)
    x = orig.view(T, -1, D).float(); c, s = cache[pos, : D // 2][:, None], cache[pos, D // 2 :][:, None]
    rot = torch.cat([x[..., : D // 2] * c - x[..., D // 2 :] * s, x[..., D // 2 :] * c + x[..., : D // 2] * s], -1)
    out["rope_max_err"] = float((qkv.view(T, -1, D)[:, : NQ + NKV].float() - rot[:, : NQ + NKV]).abs().max())
    out["rope_v_untouched"] = bool(torch.equal(qkv.view(T, -1, D)[:, NQ + NKV :], orig.view(T, -1, D)[:, NQ + NKV :]))
    m3 = load_note("patterns/topk-in-triton.md")
    T, NE, K = 1024, 256, 8
    lg = torch.randn(T, NE, device=dev); w = torch.empty(T, K, device=dev); idx = torch.empty(T, K, device=dev, dtype=torch.int32)
    m3.router_topk_softmax[(T,)](lg, w, idx, NE, E=NE, K=K, RENORM=True)
    ref = torch.topk(torch.softmax(lg, -1), K)
    out["router_idx_equal"] = bool(torch.equal(idx.long(), ref.indices))
    m4 = load_note("patterns/recurrent-state-updates.md")
    BH, DK, DV = 64 * 16, 128, 128
    qq = torch.randn(BH, DK, device=dev); kk = torch.nn.functional.normalize(torch.randn(BH, DK, device=dev), dim=-1); vv = torch.randn(BH, DV, device=dev)
    g = -torch.rand(BH, device=dev); beta = torch.rand(BH, device=dev); h = torch.randn(BH, DK, DV, device=dev); o = torch.empty(BH, DV, device=dev)
    h0 = h.clone()
    f = lambda: m4.gdr_decode_step[(BH, DV // 32)](qq, kk, vv, g, beta, h, o, DK ** -0.5, DK=DK, DV=DV, BV=32, num_warps=4)
    f()
    hh = h0 * torch.exp(g)[:, None, None]; u = beta[:, None] * (vv - torch.einsum("bk,bkv->bv", kk, hh)); hh = hh + kk[:, :, None] * u[:, None, :]
    out["gdr_state_err"] = float((h - hh).abs().max())
    out["gdr_TBps"] = round(BH * DK * DV * 4 * 2 / (bench(f) * 1e-3) / 1e12, 3)
    return out
run("misc_sketches", v_misc)

# pipelining: GEMM num_stages sweep and tl.range in a streaming loop
@triton.jit
def mm_k(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    npm = tl.cdiv(M, BM); npn = tl.cdiv(N, BN)
    width = GROUP_M * npn; g = pid // width; first = g * GROUP_M
    gsz = min(npm - first, GROUP_M)
    pm = first + (pid % width) % gsz; pn = (pid % width) // gsz
    rm = pm * BM + tl.arange(0, BM); rn = pn * BN + tl.arange(0, BN); rk = tl.arange(0, BK)
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    for k in range(0, K, BK):
        acc = tl.dot(tl.load(a + rm[:, None] * K + (k + rk)[None, :]), tl.load(b + (k + rk)[:, None] * N + rn[None, :]), acc)
    tl.store(c + rm[:, None] * N + rn[None, :], acc.to(tl.bfloat16))

@triton.jit
def rowsum_loop(x, out, n_cols, BLOCK: tl.constexpr, STAGES: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    acc = tl.zeros([BLOCK], tl.float32)
    for s in tl.range(0, n_cols, BLOCK, num_stages=STAGES):
        cols = s + tl.arange(0, BLOCK)
        acc += tl.load(x + row * n_cols + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    tl.store(out + row, tl.sum(acc, axis=0))

def v_pipe():
    out = {}
    M = N = K = 8192
    a = torch.randn(M, K, device=dev, dtype=torch.bfloat16); b = torch.randn(K, N, device=dev, dtype=torch.bfloat16); c = torch.empty(M, N, device=dev, dtype=torch.bfloat16)
    for (BM, BN, BK, nw, stages) in [(128, 256, 64, 8, [1, 2, 3, 4]), (128, 128, 64, 4, [2, 4, 5])]:
        for s in stages:
            try:
                f = lambda: mm_k[(triton.cdiv(M, BM) * triton.cdiv(N, BN),)](a, b, c, M, N, K, BM=BM, BN=BN, BK=BK, GROUP_M=8, num_warps=nw, num_stages=s)
                f(); out[f"{BM}x{BN}x{BK}_w{nw}_s{s}"] = round(2 * M * N * K / (bench(f) * 1e-3) / 1e12, 1)
            except Exception as e:
                out[f"{BM}x{BN}x{BK}_w{nw}_s{s}"] = "ERR " + type(e).__name__ + " " + str(e)[:120]
    rows, cols = 1024, 131072
    x = torch.randn(rows, cols, device=dev, dtype=torch.bfloat16); o = torch.empty(rows, device=dev)
    for st in (1, 3):
        f = lambda: rowsum_loop[(rows,)](x, o, cols, BLOCK=2048, STAGES=st, num_warps=4)
        f(); out[f"rowsum_loop_tlrange_stages{st}_TBps"] = round(rows * cols * 2 / (bench(f) * 1e-3) / 1e12, 3)
    return out
run("pipelining", v_pipe)

def v_splitk():
    m = load_note("patterns/split-reduction-split-k.md")
    out = {}
    for (N, K) in [(4096, 14336)]:
        x = torch.randn(K, device=dev, dtype=torch.bfloat16); w = torch.randn(N, K, device=dev, dtype=torch.bfloat16); y = torch.empty(N, device=dev, dtype=torch.bfloat16)
        for SPL in (1, 4, 8):
            BN, BK = 32, 256
            kps = triton.cdiv(triton.cdiv(K, SPL), BK) * BK
            part = torch.empty(SPL, N, device=dev)
            def f():
                m.gemv_splitk_partial[(triton.cdiv(N, BN), SPL)](x, w, part, N, K, kps, BLOCK_N=BN, BLOCK_K=BK, num_warps=4)
                m.splitk_finish[(triton.cdiv(N, 256),)](part, y, N, SPLIT=SPL, BLOCK_N=256)
            f()
            if SPL == 4:
                out[f"N{N}_K{K}_rel_err"] = float(((y.float() - w.float() @ x.float()).norm() / (w.float() @ x.float()).norm()))
            out[f"N{N}_K{K}_split{SPL}_us"] = round(bench(f) * 1e3, 2)
            out[f"N{N}_K{K}_split{SPL}_TBps"] = round(N * K * 2 / (bench(f) * 1e-3) / 1e12, 3)
    return out
run("gemv_splitk", v_splitk)

print(json.dumps(R, indent=1))
o = os.environ.get("OUT")
if o:
    json.dump(R, open(os.path.join(o, "kb_bench4.json"), "w"), indent=1)
