import math
import os
BENCH = os.environ.get('BENCH', '/work/main/bench/ops')
import torch
import torch.nn.functional as F

def close(a, b, atol=2e-2, rtol=2e-2, what=""):
    a = a.float().cpu(); b = b.float().cpu()
    if not torch.allclose(a, b, atol=atol, rtol=rtol, equal_nan=True):
        d = (a - b).abs()
        raise AssertionError(f"{what} max abs diff {d.max().item()} at {d.argmax().item()}")

def rmsref(x, w, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float())

def t_rms_norm(m, dev):
    for T, H in [(7, 96), (5, 300), (33, 128)]:
        x = torch.randn(T, H, device=dev, dtype=torch.bfloat16)
        w = (1 + 0.1 * torch.randn(H, device=dev)).to(torch.bfloat16)
        y = m.rms_norm(x, w, 1e-6)
        close(y, rmsref(x, w, 1e-6).to(torch.bfloat16), what=f"rms {T}x{H}")

def t_fused_add_rms_norm(m, dev):
    for T, H in [(7, 96), (4, 300)]:
        x = torch.randn(T, H, device=dev, dtype=torch.bfloat16)
        r = torch.randn(T, H, device=dev, dtype=torch.bfloat16)
        w = (1 + 0.1 * torch.randn(H, device=dev)).to(torch.bfloat16)
        y, rn = m.fused_add_rms_norm(x, r, w, 1e-6)
        s = (x.float() + r.float()).to(torch.bfloat16)
        if dev == "cuda":
            assert torch.equal(rn, s)
        else:  # interpreter truncates fp32->bf16 (seen with triton 3.6.0)
            close(rn, s, atol=0, rtol=2 ** -7, what="resid")
        close(y, rmsref(s, w, 1e-6).to(torch.bfloat16), what="add_rms")

def t_layer_norm(m, dev):
    for T, H, bias in [(7, 96, True), (3, 300, False)]:
        x = (torch.randn(T, H, device=dev) + 3).to(torch.bfloat16)
        w = (1 + 0.1 * torch.randn(H, device=dev)).to(torch.bfloat16)
        b = (0.1 * torch.randn(H, device=dev)).to(torch.bfloat16) if bias else None
        y = m.layer_norm(x, w, b, 1e-5)
        ref = F.layer_norm(x.float(), (H,), w.float(), None if b is None else b.float(), 1e-5)
        close(y, ref, what="ln")

def t_qk_norm(m, dev):
    T, HQ, HK, D = 5, 6, 3, 32
    qkv = torch.randn(T, (HQ + 2 * HK) * D, device=dev, dtype=torch.bfloat16)
    ref = qkv.clone()
    q = qkv[:, :HQ * D].view(T, HQ, D)
    k = qkv[:, HQ * D:(HQ + HK) * D].view(T, HK, D)
    wq = (1 + 0.1 * torch.randn(D, device=dev)).to(torch.bfloat16)
    wk = (1 + 0.1 * torch.randn(D, device=dev)).to(torch.bfloat16)
    qo, ko = m.qk_norm(q, k, wq, wk, 1e-6)
    rq = rmsref(ref[:, :HQ * D].view(T, HQ, D), wq, 1e-6)
    rk = rmsref(ref[:, HQ * D:(HQ + HK) * D].view(T, HK, D), wk, 1e-6)
    close(qo, rq, what="q"); close(ko, rk, what="k")
    assert torch.equal(qkv, ref)

def t_gated_rms_norm(m, dev):
    T, NG, G = 5, 6, 48
    H = NG * G
    x = torch.randn(T, H, device=dev, dtype=torch.bfloat16)
    z = torch.randn(T, H, device=dev, dtype=torch.bfloat16)
    for wlen, first in [(G, True), (H, False)]:
        w = (1 + 0.1 * torch.randn(wlen, device=dev)).to(torch.bfloat16)
        y = m.gated_rms_norm(x, z, w, G, 1e-6, norm_first=first)
        xf, zf = x.float().view(T, NG, G), z.float().view(T, NG, G)
        g = zf * torch.sigmoid(zf)
        if not first:
            xf = xf * g
        wf = w.float().view(-1, G) if wlen == H else w.float()
        r = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * wf
        if first:
            r = r * g
        close(y, r.view(T, H), what=f"gated {first}")

def t_l2_norm(m, dev):
    x = torch.randn(3, 5, 7, 40, device=dev, dtype=torch.bfloat16)
    x[0, 0, 0] = 0
    for clamp, eps in [(False, 1e-6), (True, 1e-12)]:
        y = m.l2_norm(x, eps, clamp)
        xf = x.float()
        if clamp:
            r = F.normalize(xf, dim=-1, eps=eps)
        else:
            r = xf * torch.rsqrt(xf.pow(2).sum(-1, keepdim=True) + eps)
        close(y, r, what="l2")

def t_silu_and_mul(m, dev):
    for T, I in [(3, 1000), (5, 96)]:
        x = torch.randn(T, 2 * I, device=dev, dtype=torch.bfloat16)
        y = m.silu_and_mul(x)
        r = F.silu(x[:, :I].float()) * x[:, I:].float()
        close(y, r, what="silu")

def t_gelu_and_mul(m, dev):
    for T, I in [(3, 1000), (5, 96)]:
        x = (3 * torch.randn(T, 2 * I, device=dev)).to(torch.bfloat16)
        x[0, 0] = 200.0; x[0, 1] = -200.0
        y = m.gelu_and_mul(x)
        r = F.gelu(x[:, :I].float(), approximate="tanh") * x[:, I:].float()
        close(y, r, what="gelu")

def t_softmax(m, dev):
    for R, N, dt in [(3, 300, torch.bfloat16), (2, 20000, torch.float32)]:
        x = (3 * torch.randn(R, N, device=dev)).to(dt)
        x[0, :5] = float("-inf")
        y = m.softmax(x)
        r = torch.softmax(x.float(), -1)
        close(y, r, atol=1e-3, rtol=2e-2, what=f"softmax {N}")

def fp8_close(q, ref, what=""):
    a = q.float().cpu(); b = ref.float().cpu()
    # one e4m3 ulp: 2^(floor(log2|b|) - 3), at least the subnormal step 2^-9
    ulp = torch.exp2(torch.floor(torch.log2(b.abs().clamp_min(2 ** -6))) - 3)
    bad = (a - b).abs() > ulp * 1.01
    if q.device.type == "cpu":  # interpreter drops the carry when rounding up to a power of two
        a_pow2 = torch.exp2(torch.round(torch.log2(a.abs().clamp_min(1e-30)))) == a.abs()
        bad &= ~(a_pow2 & ((2 * a - b).abs() <= ulp * 1.01))
    if bad.any():
        raise AssertionError(f"{what}: {bad.sum().item()} fp8 values off by more than one ulp")

def t_fused_rms_norm_fp8_quant(m, dev):
    T, H = 5, 300
    x = torch.randn(T, H, device=dev, dtype=torch.bfloat16)
    x[1] = 0
    w = (1 + 0.1 * torch.randn(H, device=dev)).to(torch.bfloat16)
    q, s = m.rms_norm_fp8_quant(x, w, 1e-6)
    y = rmsref(x, w, 1e-6)
    rs = torch.clamp(y.abs().amax(-1, keepdim=True) / 448, min=1 / (448 * 512))
    rq = torch.clamp(y / rs, -448, 448).to(torch.float8_e4m3fn)
    close(s, rs, atol=0, rtol=1e-5 if dev == "cuda" else 2 ** -7, what="scale")
    fp8_close(q, rq, "q")
    assert torch.isfinite(q.float()).all()

def t_fp8_per_token_quant(m, dev):
    for T, H in [(4, 300), (3, 9000)]:
        x = torch.randn(T, H, device=dev, dtype=torch.bfloat16)
        x[0] = 0
        q, s = m.fp8_per_token_quant(x)
        xf = x.float()
        rs = torch.clamp(xf.abs().amax(-1, keepdim=True) / 448, min=1 / (448 * 512))
        close(s, rs, atol=0, rtol=1e-6, what="scale")
        fp8_close(q, torch.clamp(xf / rs, -448, 448).to(torch.float8_e4m3fn), "q")

def t_fp8_per_token_group_quant(m, dev):
    T, H, G = 5, 384, 128
    x = torch.randn(T, H, device=dev, dtype=torch.bfloat16)
    x[1, :G] = 0
    for col, ue in [(False, False), (True, False), (False, True)]:
        q, s = m.fp8_group_quant(x, G, col_major=col, ue8m0=ue)
        xg = x.float().view(T, H // G, G)
        rs = (xg.abs().amax(-1) / 448).clamp_min(1 / (448 * 512))
        if ue:
            rs = torch.exp2(torch.ceil(torch.log2(rs)))
        close(s, rs, atol=0, rtol=1e-6, what=f"scale {col} {ue}")
        fp8_close(q, torch.clamp(xg / rs[..., None], -448, 448).view(T, H).to(torch.float8_e4m3fn), "q")

def t_silu_and_mul_fp8_quant(m, dev):
    T, I = 3, 384
    x = torch.randn(T, 2 * I, device=dev, dtype=torch.bfloat16)
    for group in (None, 128):
        q, s = m.silu_and_mul_fp8_quant(x, group, round_act=False)
        a = F.silu(x[:, :I].float()) * x[:, I:].float()
        gs = I if group is None else group
        ag = a.view(T, I // gs, gs)
        rs = torch.clamp(ag.abs().amax(-1) / 448, min=1 / (448 * 512))
        close(s, rs, atol=0, rtol=1e-5, what="scale")
        fp8_close(q, torch.clamp(ag / rs[..., None], -448, 448).view(T, I).to(torch.float8_e4m3fn), "q")

def _cs_cache(maxpos, R, dev, base=10000.0):
    inv = 1.0 / (base ** (torch.arange(0, R, 2, device=dev).float() / R))
    f = torch.arange(maxpos, device=dev).float()[:, None] * inv[None, :]
    return torch.cat([f.cos(), f.sin()], -1)

def _neox_ref(x, pos, cs, R):
    xf = x.float().clone()
    c, s = cs[pos][:, None, :R // 2], cs[pos][:, None, R // 2:]
    x1, x2 = xf[..., :R // 2].clone(), xf[..., R // 2:R].clone()
    xf[..., :R // 2] = x1 * c - x2 * s
    xf[..., R // 2:R] = x2 * c + x1 * s
    return xf

def t_rope_neox(m, dev):
    T, HQ, HK = 5, 6, 2
    for D, R in [(32, 32), (64, 16)]:
        q = torch.randn(T, HQ, D, device=dev, dtype=torch.bfloat16)
        k = torch.randn(T, HK, D, device=dev, dtype=torch.bfloat16)
        pos = torch.tensor([7, 0, 100, 3, 55], device=dev)
        cs = _cs_cache(128, R, dev)
        qo, ko = m.rope_neox(q, k, pos, cs, R)
        close(qo, _neox_ref(q, pos, cs, R), what="q"); close(ko, _neox_ref(k, pos, cs, R), what="k")

def t_rope_interleaved(m, dev):
    T, H, HK, DH, R = 5, 6, 2, 48, 16
    q = torch.randn(T, H, DH, device=dev, dtype=torch.bfloat16)
    k = torch.randn(T, HK, R, device=dev, dtype=torch.bfloat16)
    ref_q, ref_k = q.clone(), k.clone()
    pos = torch.tensor([7, 0, 100, 3, 55], device=dev)
    cs = _cs_cache(128, R, dev)
    qo, ko = m.rope_interleaved(q[..., DH - R:], k, pos, cs)
    def rot(x):
        x = x.float()
        c, s = cs[pos][:, None, :R // 2], cs[pos][:, None, R // 2:]
        xe, xo = x[..., 0::2], x[..., 1::2]
        return torch.stack([xe * c - xo * s, xo * c + xe * s], -1).flatten(-2)
    close(qo, rot(ref_q[..., DH - R:]), what="gptj q"); close(ko, rot(ref_k), what="gptj k")
    assert torch.equal(q, ref_q) and torch.equal(k, ref_k)

def t_fused_qkv_rope(m, dev):
    T, HQ, HK, D = 5, 6, 2, 32
    qkv = torch.randn(T, (HQ + 2 * HK) * D, device=dev, dtype=torch.bfloat16)
    pos = torch.tensor([7, 0, 100, 3, 55], device=dev)
    cs = _cs_cache(128, D, dev)
    q, k, v = m.fused_qkv_rope(qkv, pos, cs, HQ, HK, D)
    rq = _neox_ref(qkv[:, :HQ * D].view(T, HQ, D), pos, cs, D)
    rk = _neox_ref(qkv[:, HQ * D:(HQ + HK) * D].view(T, HK, D), pos, cs, D)
    close(q, rq, what="q"); close(k, rk, what="k")
    assert torch.equal(v, qkv[:, (HQ + HK) * D:].view(T, HK, D))

def t_reshape_and_cache(m, dev):
    T, Hkv, D, NB, BS = 6, 3, 16, 5, 4
    key = torch.randn(T, Hkv, D, device=dev, dtype=torch.bfloat16)
    val = torch.randn(T, Hkv, D, device=dev, dtype=torch.bfloat16)
    kc = torch.randn(NB, BS, Hkv, D, device=dev, dtype=torch.bfloat16)
    vc = torch.randn(NB, BS, Hkv, D, device=dev, dtype=torch.bfloat16)
    slots = torch.tensor([3, 17, -1, 0, 9, 19], device=dev)
    rk, rv = kc.clone(), vc.clone()
    for t, s in enumerate(slots.tolist()):
        if s >= 0:
            rk[s // BS, s % BS] = key[t]; rv[s // BS, s % BS] = val[t]
    m.reshape_and_cache_(key, val, kc, vc, slots)
    assert torch.equal(kc, rk) and torch.equal(vc, rv)

def t_embedding(m, dev):
    V, H = 50, 96
    table = torch.randn(V, H, device=dev, dtype=torch.bfloat16)
    ids = torch.tensor([3, 49, 0, 7, 3], device=dev)
    assert torch.equal(m.embedding(ids, table), table[ids])
    # vocab-parallel shard [20, 70): ids outside give zeros
    out = m.embedding(torch.tensor([25, 5, 69, 70], device=dev, dtype=torch.int32), table, 20)
    ref = torch.stack([table[5], torch.zeros(H, device=dev, dtype=table.dtype), table[49],
                       torch.zeros(H, device=dev, dtype=table.dtype)])
    assert torch.equal(out, ref)

def _bench_model(op, *args, **kw):
    import importlib.util
    spec = importlib.util.spec_from_file_location("ref_" + op, os.path.join(BENCH, op, "reference.py"))
    mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
    return mod.Model(*args, **kw)

def t_moe_topk_softmax(m, dev):
    # ties: logits on a coarse grid, compared with the benchmark reference (lower id wins)
    g = (torch.randint(-3, 4, (9, 64), device=dev).float() * 0.5).to(torch.bfloat16)
    w, ids = m.moe_topk_softmax(g, 8, True)
    rw, rid = _bench_model("moe_topk_softmax", 8, True)(g.cpu())
    assert torch.equal(ids.cpu(), rid), (ids, rid)
    close(w, rw, atol=1e-6, rtol=1e-5, what="w ties")
    for T, E, k, ren in [(7, 60, 4, True), (5, 8, 2, False), (3, 512, 10, True)]:
        g = torch.randn(T, E, device=dev, dtype=torch.float32)
        w, ids = m.moe_topk_softmax(g, k, ren)
        p = torch.softmax(g, -1)
        rw, rid = torch.topk(p, k, -1)
        if ren:
            rw = rw / rw.sum(-1, keepdim=True)
        assert torch.equal(ids.long().cpu(), rid.cpu()), (ids, rid)
        close(w, rw, atol=1e-6, rtol=1e-5, what="w")

def _align_ref(topk_ids, E, B):
    flat = topk_ids.flatten().long().cpu()
    numel = flat.numel()
    maxpad = numel + min(E, numel) * (B - 1)
    sorted_ids = torch.full((maxpad,), numel, dtype=torch.int32)
    eids = []
    pos = 0
    for e in range(E):
        idx = torch.nonzero(flat == e).flatten()
        n = idx.numel(); p = -(-n // B) * B
        sorted_ids[pos:pos + n] = idx.int()
        eids += [e] * (p // B)
        pos += p
    return sorted_ids, torch.tensor(eids, dtype=torch.int32), pos

def t_moe_align_block_size(m, dev):
    for T, k, E, B in [(7, 3, 5, 4), (40, 8, 24, 16), (3, 2, 8, 16), (1, 2, 64, 16)]:
        ids = torch.stack([torch.randperm(E)[:k] for _ in range(T)]).int().to(dev)
        s, eid, nt = m.moe_align_block_size(ids, E, B)
        rs, reid, rnt = _align_ref(ids, E, B)
        assert nt.item() == rnt
        assert torch.equal(s.cpu(), rs), (s, rs)
        assert torch.equal(eid.cpu()[:rnt // B], reid)
        assert (eid.cpu()[rnt // B:] == -1).all() and eid.numel() == -(-s.numel() // B)

def t_moe_sum(m, dev):
    for T, K, H, weighted in [(5, 10, 300, True), (3, 2, 96, False)]:
        y = torch.randn(T, K, H, device=dev, dtype=torch.bfloat16)
        w = torch.rand(T, K, device=dev) if weighted else None
        out = m.moe_sum(y, w, 2.5)
        r = (y.float() * (w[..., None] if weighted else 1)).sum(1) * 2.5
        close(out, r, what="moe_sum")

# interpreter: tl.dot on bf16 operands returns garbage (Triton 3.6.0); CPU runs use fp16
def mmdt(dev):
    return torch.bfloat16 if dev == "cuda" else torch.float16

def t_gemm_bf16(m, dev):
    for M, N, K in [(37, 50, 70), (5, 130, 64)]:
        a = torch.randn(M, K, device=dev, dtype=mmdt(dev))
        w = torch.randn(N, K, device=dev, dtype=mmdt(dev))
        kw = dict(BM=16, BN=32, BK=32, warps=4, stages=2) if dev == "cpu" else {}
        c = m.gemm(a, w, **kw)
        close(c, a.float() @ w.float().T, atol=0.1, rtol=2e-2, what="gemm")
    if dev == "cuda":
        a = torch.randn(1000, 4096, device=dev, dtype=torch.bfloat16)
        w = torch.randn(3000, 4096, device=dev, dtype=torch.bfloat16)
        close(m.gemm(a, w), a.float() @ w.float().T, atol=0.5, rtol=2e-2, what="gemm big")

def _q8(x, gs_rows, gs_cols):
    """blockwise e4m3 quantisation of x [R, C] with (gs_rows x gs_cols) blocks -> q, s"""
    R, C = x.shape
    xb = x.float().view(R // gs_rows, gs_rows, C // gs_cols, gs_cols)
    s = xb.abs().amax(dim=(1, 3)).clamp_min(1e-10) / 448
    q = (xb / s[:, None, :, None]).clamp(-448, 448).to(torch.float8_e4m3fn).view(R, C)
    return q, s

def t_fp8_block_scaled_gemm(m, dev):
    shapes = [(37, 256, 384)] if dev == "cpu" else [(37, 256, 384), (300, 384, 1024)]
    for M, N, K in shapes:
        a = torch.randn(M, K, device=dev)
        b = torch.randn(N, K, device=dev) * 0.05
        qa, sa = _q8(a, 1, 128)
        qb, sb = _q8(b, 128, 128)
        c = m.fp8_block_gemm(qa, sa, qb, sb, BM=16 if dev == "cpu" else 64, BN=128, warps=4, stages=3)
        deq_a = qa.float().view(M, K // 128, 128) * sa[..., None]
        deq_b = qb.float().view(N // 128, 128, K // 128, 128) * sb[:, None, :, None]
        ref = deq_a.view(M, K) @ deq_b.view(N, K).T
        close(c, ref, atol=0.05, rtol=2e-2, what="fp8gemm")

def t_fused_moe(m, dev):
    dt = mmdt(dev)
    T, H, E, I, k = 9, 64, 6, 48, 3
    x = torch.randn(T, H, device=dev, dtype=dt)
    w1 = (torch.randn(E, 2 * I, H, device=dev) * 0.1).to(dt)
    w2 = (torch.randn(E, H, I, device=dev) * 0.1).to(dt)
    logits = torch.randn(T, E, device=dev)
    tw, tid = torch.topk(torch.softmax(logits, -1), k)
    tw = (tw / tw.sum(-1, keepdim=True)).float()
    tid = tid.int()
    BM = 16
    srt, eids, nt = _align_ref(tid, E, BM)
    eid = torch.full((srt.numel() // BM + 1,), -1, dtype=torch.int32)
    eid[:eids.numel()] = eids
    out = m.fused_moe(x, w1, w2, tw, srt.to(dev), eid.to(dev),
                      torch.tensor([nt], dtype=torch.int32, device=dev), k, BM=BM, BN=32, BK=32)
    ref = torch.zeros(T, H, device=dev)
    for t in range(T):
        for j in range(k):
            e = tid[t, j].item()
            h = w1[e].float() @ x[t].float()
            a = F.silu(h[:I]) * h[I:]
            ref[t] += tw[t, j] * (w2[e].float() @ a)
    close(out, ref, atol=3e-2, rtol=3e-2, what="fused_moe")

def _attn_ref(q, k, v, causal=True, scale=None):
    B, S, HQ, D = q.shape
    HK = k.shape[2]
    rep = HQ // HK
    qf = q.float().transpose(1, 2)
    kf = k.float().repeat_interleave(rep, 2).transpose(1, 2)
    vf = v.float().repeat_interleave(rep, 2).transpose(1, 2)
    s = qf @ kf.transpose(-1, -2) * (scale or D ** -0.5)
    if causal:
        Sk = k.shape[1]
        mask = torch.ones(S, Sk, dtype=torch.bool, device=q.device).tril(Sk - S)
        s = s.masked_fill(~mask, float("-inf"))
    return (torch.softmax(s, -1) @ vf).transpose(1, 2)

def t_prefill_attention(m, dev):
    dt = mmdt(dev)
    cfgs = [([37, 5, 20], 4, 2, 32, dict(BM=16, BN=16, warps=4)), ([70], 6, 3, 16, dict(BM=16, BN=16, warps=4))]
    if dev == "cuda":
        cfgs = [(l, hq, hk, d, dict(BM=64, BN=32, warps=4)) for l, hq, hk, d, _ in cfgs]
        cfgs.append(([1000, 1, 513, 2048], 32, 8, 128, {}))
    for lens, HQ, HK, D, kw in cfgs:
        T = sum(lens)
        cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32, device=dev)
        q = torch.randn(T, HQ, D, device=dev, dtype=dt)
        k = torch.randn(T, HK, D, device=dev, dtype=dt)
        v = torch.randn(T, HK, D, device=dev, dtype=dt)
        o = m.prefill_attention(q, k, v, cu, max(lens), **kw)
        for i in range(len(lens)):
            a, b = cu[i].item(), cu[i + 1].item()
            r = _attn_ref(q[None, a:b], k[None, a:b], v[None, a:b])[0]
            close(o[a:b], r, atol=2e-2, rtol=2e-2, what=f"attn seq{i}")

def _paged_setup(dev, B, HK, D, P, lens, dt, NB=None):
    max_pages = max(-(-l // P) for l in lens)
    NB = NB or B * max_pages + 3
    kc = torch.randn(NB, P, HK, D, device=dev, dtype=dt)
    vc = torch.randn(NB, P, HK, D, device=dev, dtype=dt)
    perm = torch.randperm(NB)[:B * max_pages].view(B, max_pages)
    bt = perm.int().to(dev)
    return kc, vc, bt

def _paged_ref(q, kc, vc, bt, lens, scale):
    B, HQ, D = q.shape
    P, HK = kc.shape[1], kc.shape[2]
    out = torch.empty(B, HQ, D)
    for b in range(B):
        L = lens[b]
        idx = torch.arange(L)
        pages = bt[b].cpu()[idx // P].long()
        k = kc.cpu()[pages, idx % P].float()   # [L, HK, D]
        v = vc.cpu()[pages, idx % P].float()
        k = k.repeat_interleave(HQ // HK, 1); v = v.repeat_interleave(HQ // HK, 1)
        s = torch.einsum("hd,lhd->hl", q[b].float().cpu(), k) * scale
        out[b] = torch.einsum("hl,lhd->hd", torch.softmax(s, -1), v)
    return out

def t_paged_decode_attention(m, dev):
    dt = mmdt(dev)
    B, HQ, HK, D, P = 3, 8, 2, 32, 4
    lens = [5, 70, 17]
    kc, vc, bt = _paged_setup(dev, B, HK, D, P, lens, dt)
    q = torch.randn(B, HQ, D, device=dev, dtype=dt)
    sl = torch.tensor(lens, dtype=torch.int32, device=dev)
    for ns in (1, 3):
        o = m.paged_decode(q, kc, vc, bt, sl, max(lens), BN=16, nsplit=ns)
        close(o, _paged_ref(q, kc, vc, bt, lens, D ** -0.5), atol=2e-2, rtol=2e-2, what=f"paged ns={ns}")
    if dev == "cuda":
        B, HQ, HK, D, P = 4, 32, 8, 128, 16
        lens = [1, 4096, 1000, 333]
        kc, vc, bt = _paged_setup(dev, B, HK, D, P, lens, dt)
        q = torch.randn(B, HQ, D, device=dev, dtype=dt)
        o = m.paged_decode(q, kc, vc, bt, torch.tensor(lens, dtype=torch.int32, device=dev), 4096)
        close(o, _paged_ref(q, kc, vc, bt, lens, D ** -0.5), atol=2e-2, rtol=2e-2, what="paged big")

def t_mla_decode_attention(m, dev):
    dt = mmdt(dev)
    cfgs = [(3, 20, 32, 16, 4, [5, 70, 17], 16, 16, 4)]
    if dev == "cuda":
        cfgs.append((4, 128, 512, 64, 64, [1, 4096, 1000, 333], 16, 32, 4))
    for B, H, DC, DR, P, lens, BH, BN, warps in cfgs:
        max_pages = max(-(-l // P) for l in lens)
        NB = B * max_pages + 2
        kv = torch.randn(NB, P, DC + DR, device=dev, dtype=dt)
        bt = torch.randperm(NB)[:B * max_pages].view(B, max_pages).int().to(dev)
        q = torch.randn(B, H, DC + DR, device=dev, dtype=dt)
        scale = 0.1353
        o = m.mla_decode(q[..., :DC].contiguous(), q[..., DC:].contiguous(), kv, bt,
                         torch.tensor(lens, dtype=torch.int32, device=dev), scale, BH=BH, BN=BN, warps=warps)
        ref = torch.empty(B, H, DC)
        for b in range(B):
            idx = torch.arange(lens[b])
            rows = kv.cpu()[bt[b].cpu()[idx // P].long(), idx % P].float()
            s = q[b].float().cpu() @ rows.T * scale
            ref[b] = torch.softmax(s, -1) @ rows[:, :DC]
        close(o, ref, atol=2e-2, rtol=2e-2, what="mla")

def t_causal_conv1d(m, dev):
    B, DIM, L, W = 2, 70, 45, 4
    x = torch.randn(B, DIM, L, device=dev, dtype=torch.bfloat16)
    w = torch.randn(DIM, W, device=dev, dtype=torch.bfloat16)
    bias = torch.randn(DIM, device=dev, dtype=torch.bfloat16)
    y = m.causal_conv1d(x, w, bias, True, BC=32, BL=16)
    ref = F.conv1d(F.pad(x.float(), (W - 1, 0)), w.float()[:, None, :], bias.float(), groups=DIM)
    close(y, F.silu(ref), what="conv fwd")
    # decode: continue the sequence by one token
    state = x[:, :, L - (W - 1):].contiguous()
    xn = torch.randn(B, DIM, device=dev, dtype=torch.bfloat16)
    yn = m.causal_conv1d_update_(xn, state, w, bias, True, BC=32)
    full = torch.cat([x, xn[:, :, None]], -1)
    refn = F.conv1d(full[:, :, -W:].float(), w.float()[:, None, :], bias.float(), groups=DIM)[:, :, 0]
    close(yn, F.silu(refn), what="conv update")
    assert torch.equal(state, full[:, :, -(W - 1):])

def t_gated_delta_rule_decode(m, dev):
    B, HK, HV, DK, DV = 3, 2, 4, 32, 64
    q = torch.randn(B, HK, DK, device=dev, dtype=torch.bfloat16)
    k = torch.randn(B, HK, DK, device=dev, dtype=torch.bfloat16)
    v = torch.randn(B, HV, DV, device=dev, dtype=torch.bfloat16)
    g = -torch.rand(B, HV, device=dev)
    beta = torch.rand(B, HV, device=dev)
    S = torch.randn(B, HV, DK, DV, device=dev) * 0.1
    S0 = S.clone()
    res = m.gated_delta_rule_decode(q, k, v, g, beta, S, norm_qk=True, BV=16)
    o = res["out"]
    assert torch.equal(S, S0)
    S = res["final_state"]
    qf = F.normalize(q.float(), dim=-1, eps=1e-6).repeat_interleave(HV // HK, 1) * DK ** -0.5
    kf = F.normalize(k.float(), dim=-1, eps=1e-6).repeat_interleave(HV // HK, 1)
    Sd = S0 * g.exp()[..., None, None]
    u = beta[..., None] * (v.float() - torch.einsum("bhkv,bhk->bhv", Sd, kf))
    Sn = Sd + kf[..., :, None] * u[..., None, :]
    ro = torch.einsum("bhkv,bhk->bhv", Sn, qf)
    close(S, Sn, atol=1e-4, rtol=1e-4, what="state")
    close(o, ro, what="o")

def _topk_topp_ref(logits, k, p):
    """sort-based: mask below the k-th value, then mask ascending cumsum <= 1-p, keep the max."""
    out = logits.clone()
    B, V = logits.shape
    for b in range(B):
        x = out[b]
        kk = int(k[b])
        if kk < V:
            kth = torch.topk(x, kk).values[-1]
            x[x < kth] = float("-inf")
        pp = float(p[b])
        if pp < 1.0:
            srt, idx = torch.sort(x, descending=False)
            probs = torch.softmax(srt, -1)
            cs = torch.cumsum(probs, -1)
            drop = cs <= 1 - pp
            drop[-1] = False
            x[idx[drop]] = float("-inf")
    return out

def t_top_k_top_p_filter(m, dev):
    B, V = 5, 3000
    logits = torch.randn(B, V, device=dev) * 3
    logits[1, :50] = float("-inf")
    k = torch.tensor([10, V, 1, 300, V], dtype=torch.int32, device=dev)
    p = torch.tensor([1.0, 0.9, 0.5, 0.7, 1.0], dtype=torch.float32, device=dev)
    out = m.top_k_top_p_filter(logits, k, p, BLOCK=256, NP=8 if dev == "cpu" else 16)
    import importlib.util
    spec = importlib.util.spec_from_file_location("ref_tktp", os.path.join(BENCH, "top_k_top_p_filter", "reference.py"))
    refmod = importlib.util.module_from_spec(spec); spec.loader.exec_module(refmod)
    ref = refmod.Model()(logits.cpu(), k.cpu(), p.cpu())
    ref2 = _topk_topp_ref(logits.cpu(), k.cpu(), p.cpu())
    assert torch.equal(torch.isinf(ref), torch.isinf(ref2))
    o = out.cpu()
    assert torch.equal(torch.isinf(o), torch.isinf(ref)), (torch.isinf(o) != torch.isinf(ref)).sum(1)
    assert torch.equal(o[~torch.isinf(o)], ref[~torch.isinf(ref)])
