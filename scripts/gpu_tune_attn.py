"""Tune the three attention dispatch kernels per bench shape, in one process, within a deadline.

    python scripts/gpu_tune_attn.py OUTDIR [--deadline 140] [--ops prefill_attention,...]
                                    [--shapes all|small|0,3,...] [--device cuda|cpu]
                                    [--kernels split_dispatch,column_split]

For every shape of prefill_attention, paged_decode_attention and mla_decode_attention it builds
fresh random inputs (bench/ops/<op>/input.py), computes the reference once, then runs a pruned
grid of configs of knowledge_base/kernels/<op>/<kernel>.py through the kernel's own
`attention(..., cfg)` entry point: each output is judged by aka's compare (the op's tolerances),
each correct one timed by CUDA graph replay (`triton.testing.do_bench_cudagraph`, median; warm
L2, as the peer anchors were). Beside it: SDPA one call per sequence (flash, enable_gqa) for
prefill, and for every op the roofline SOL from its meta cost with the copy bandwidth and bf16
matmul rate measured at start. `ratio` is peer_us / us for prefill and sol_us / us for decode.

--kernels picks which kernels of each op are tuned (default: the op's dispatch kernel, KERNELS;
`all` adds OTHER_KERNELS): the grids of several kernels of one op are interleaved rank by rank so
the deadline cuts them alike. Only the dispatch kernel's records go to `records` / `best` (what
bake_dispatch_attn.py bakes into that kernel's table); another kernel's go to `other_records` /
`other_best[op][kernel]` (its config keys are not the dispatch kernel's), each record naming its
`kernel`, and the table prints them beside the dispatch kernel's per shape.

OUTDIR/tune_attn.json is rewritten after every measurement (so a crash or the deadline leaves
everything measured so far); the table of the best config per shape is printed last.
--device cpu runs the Triton interpreter on the ops' small shapes (an end-to-end test: its
timings are interpreter wall clock and mean nothing; bake_dispatch_attn.py refuses them).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

KERNELS = {"prefill_attention": "flash_dispatch", "paged_decode_attention": "split_dispatch",
           "mla_decode_attention": "split_dispatch"}
# Kernels that may be tuned beside the dispatch kernel (--kernels), with their own grids; their
# winners are reported, never baked (bake_dispatch_attn.py writes KERNELS[op]'s table only).
OTHER_KERNELS = {"mla_decode_attention": ("column_split", "page_tile"), "paged_decode_attention": ("balanced_split",)}
BUDGET_SHARE = {"prefill_attention": 0.45, "paged_decode_attention": 0.25, "mla_decode_attention": 0.30}


def _cfgs(keys, rows):
    return [dict(zip(keys, r)) for r in rows]


def grid(op: str, kw: dict, kernel: str | None = None) -> list[dict]:
    """Configs to try for one shape, most promising first (the deadline cuts the tail). Pruned
    for ~1 s of compile per new config on the H200: few distinct compile-time tuples per op.
    `kernel`: the op's dispatch kernel (None) or one of OTHER_KERNELS[op]."""
    if kernel not in (None, KERNELS.get(op)):
        if (op, kernel) == ("mla_decode_attention", "column_split"):
            return _grid_mla_column_split(kw)
        if (op, kernel) == ("mla_decode_attention", "page_tile"):
            return _grid_mla_page_tile(kw)
        if (op, kernel) == ("paged_decode_attention", "balanced_split"):
            return _grid_paged_balanced_split(kw)
        raise ValueError(f"no grid for {op}/{kernel}")
    if op == "prefill_attention":
        keys = ("BM", "BN", "PACK", "TMA", "num_warps", "num_stages")
        # Offline sm_90a compiles (ptxas, triton 3.6): D 128 BM 128 BN 32 at 4 warps spills, D 256
        # BM 64 at 4 warps spills 8 B and BM 128 BN 64 sits at 255 registers, 196,624 B shared.
        if kw["head_dim"] > 128:   # a [BM, 256] fp32 accumulator: BN <= 64, 2-3 stages
            rows = [(128, 64, 0, 1, 8, 2), (128, 32, 0, 1, 8, 3), (64, 64, 0, 1, 8, 3),
                    (128, 64, 0, 0, 8, 2), (64, 32, 0, 1, 4, 3), (128, 32, 0, 1, 8, 2),
                    (128, 64, 1, 1, 8, 2), (64, 64, 0, 1, 8, 2)]
        else:
            rows = [(128, 64, 0, 1, 8, 3), (128, 128, 0, 1, 8, 2), (128, 64, 1, 1, 8, 3),
                    (128, 64, 0, 1, 8, 2), (64, 64, 0, 1, 4, 3), (128, 64, 0, 0, 8, 2),
                    (128, 128, 1, 1, 8, 2), (64, 128, 0, 1, 4, 2)]
        return _cfgs(keys, rows)
    keys_k = ("BN", "num_warps", "num_stages")
    if op == "paged_decode_attention":
        kern = [(64, 4, 2), (32, 4, 3), (128, 8, 2), (64, 8, 3)]
        splits = [(0, 2), (0, 1), (0, 4)]
        split = [{"SPLIT_TOKENS": s, "WAVES": w, **dict(zip(keys_k, k))} for s, w in splits for k in kern]
        # Tried and reverted (2026-12-06, fifteenth session): each split config beside a FUSED twin whose
        # last split to arrive merged the partials in place of the _combine launch (5.4 of 55.3 us GPU
        # time at shape 0 on the H100). The twins ran slower at 45 of 48 configs of shapes 0, 6, 5 and 1,
        # up to 2.3x, and faster at 3 by at most 0.4% (results/h100/device-2026-12-06g/paged_fused_twins.md).
        # split_dispatch also carries balanced_split's schedule (cfg "path": "balanced"): its grid
        # interleaved with the split grid, so the table takes whichever path wins per shape
        balanced = [{**c, "path": "balanced"} for c in _grid_paged_balanced_split(kw)]
        return _interleave([split, balanced])
    if op == "mla_decode_attention":
        # (BH, BN, warps, stages); offline sm_90a compiles: BH 64 BN 64 spills 304 B, BH 32 BN 64 at
        # 4 warps 340 B, so BN 64 is left out; BH 64 BN 32 at 8 warps: 226 registers, 147,456 B.
        kern = [(64, 32, 8, 2), (64, 16, 8, 2), (32, 32, 8, 2), (16, 32, 4, 2), (64, 32, 8, 3), (64, 16, 8, 3)]
        # A split's fp32 partial is H x 512 x 4 B, as large as 256 tokens of cache at H 128 (256 KB
        # vs 295 KB): power-of-two rounding of the auto split can double the bytes, so fixed
        # splits are tried too (runtime values: no extra compiles).
        mk = lambda k, s, w: {"BH": k[0], "BN": k[1], "SPLIT_TOKENS": s, "WAVES": w,
                              "num_warps": k[2], "num_stages": k[3]}
        out = [mk(k, 0, 1) for k in kern]
        out += [mk(k, s, 1) for s in (512, 1024, 2048) for k in kern[:2]]
        out += [mk(k, 0, 2) for k in kern]
        return out
    raise ValueError(op)


def _grid_mla_column_split(kw: dict) -> list[dict]:
    """column_split's grid (knowledge_base/kernels/mla_decode_attention/column_split.py), from
    offline sm_90a compiles (ptxas, triton 3.6, split / direct path; none spills):
      BH 64  BN 16 NS 2, 4 warps, 2 stages: 207 / 219 registers, 110,592 B shared: 2 CTAs per SM
      BH 64  BN 32 NS 2, 4 warps, 1 stage:  244 / 253 registers, 106,496 B: 2 CTAs (no cp.async)
      BH 64  BN 16 NS 2, 4 warps, 3 / 1:    216-235 registers, 110,720 / 90,112 B: 2 CTAs
      BH 128 BN 16 NS 2, 8 warps, 2 stages: 211 / 198 registers, 184,320 B: 1 CTA, no duplicated QK
      BH 128 BN 32 NS 2, 8 warps, 1 stage:  215 / 243 registers, 180,224 B: 1 CTA
      BH 64  BN 32 NS 2, 4 warps, 2 stages: 254 / 253 registers, 147,456 B: 1 CTA (larger QK N)
    Left out: BH 64 BN 64 NS 2 on 4 warps (248 B spilled), BH 64 NS 1 on 4 warps (2,704 B), BH 64
    on 8 or 16 warps (Triton's chained-dot layout [num_warps, 1] computes the score tile once per
    warpgroup: 2-4x the QK work). Below 64 heads (memory-bound) the mma.sync tiles
    BH 16 NS 1 (214 registers, 56 KB: 2 CTAs), BH 16 NS 2 (160: 3 CTAs), BH 32 NS 2 (191, 74 KB: 2)."""
    keys = ("BH", "BN", "NS", "num_warps", "num_stages")
    if kw["num_heads"] >= 64:
        kern = [(64, 16, 2, 4, 2), (64, 32, 2, 4, 1), (128, 16, 2, 8, 2), (64, 16, 2, 4, 3),
                (64, 16, 2, 4, 1), (128, 32, 2, 8, 1), (64, 32, 2, 4, 2)]
    else:
        kern = [(16, 32, 1, 4, 2), (16, 32, 2, 4, 2), (32, 32, 2, 4, 2)]
    # WAVES 2 fills two CTAs per SM once; split lengths are runtime values (no extra compiles)
    mk = lambda k, s, w: {**dict(zip(keys, k)), "SPLIT_TOKENS": s, "WAVES": w}
    out = [mk(k, 0, 2) for k in kern]
    out += [mk(k, 0, w) for w in (1, 4) for k in kern[:3]]
    out += [mk(k, s, 1) for s in (512, 1024) for k in kern[:2]]
    return out


def _grid_mla_page_tile(kw: dict) -> list[dict]:
    """page_tile's grid (knowledge_base/kernels/mla_decode_attention/page_tile.py), from offline
    sm_90a compiles of shape 4 (ptxas, triton 3.6; none spills):
      BH 64 BN 64 8 warps, 2 stages, TMA 1 / 0: 255 registers, 221,200 / 221,184 B shared, 1 CTA;
        score wgmma m64n32k16 (split_dispatch's BN 32: m64n16k16, twice the query re-reads)
      BH 64 BN 32 8 warps, 2 stages, TMA 1: 255 registers, 147,472 B
      BH 16 BN 64 4 warps, 3 stages, TMA 0 / 1 (shape 9): 182 / 255 registers, 94,208 / 165,896 B
      BH 16 BN 32 4 warps, 2 stages, TMA 0 / 1: 189 / 248 registers, 2 CTAs; BH 32 spills (7.9 KB)
    The first rows A/B the tile width and the loads (TMA or cp.async) at split_dispatch's split
    lengths; below 64 heads (memory-bound) 16-head tiles on 4 warps."""
    keys = ("BH", "BN", "TMA", "num_warps", "num_stages")
    if kw["num_heads"] >= 64:
        kern = [(64, 64, 1, 8, 2), (64, 64, 0, 8, 2), (64, 32, 1, 8, 2)]
        mk = lambda k, s, w: {**dict(zip(keys, k)), "SPLIT_TOKENS": s, "WAVES": w}
        out = [mk(k, 0, 1) for k in kern]
        out += [mk(k, s, 1) for s in (1024, 512, 2048) for k in kern[:2]]
        return out
    kern = [(16, 64, 0, 4, 3), (16, 32, 0, 4, 2), (16, 64, 1, 4, 3), (16, 32, 1, 4, 2)]
    return [{**dict(zip(keys, k)), "SPLIT_TOKENS": 0, "WAVES": w} for w in (2, 1) for k in kern]


def _grid_paged_balanced_split(kw: dict) -> list[dict]:
    """balanced_split's grid (knowledge_base/kernels/paged_decode_attention/balanced_split.py), from
    offline sm_90a compiles of every bench shape (ptxas, triton 3.6; FUSED 1 / 0 registers, shared
    bytes; CTAs per SM from both; tiles ahead = CTAs x (num_stages - 2) x 2 x BN x D x 2 B):
      D 128 BN 32  4 warps, 4 stages: 142-154 / 128-152 regs, 54,272 B: 3 CTAs, 96 KB ahead
      D 128 BN 64  4 warps, 4 stages: 206-254 / 164-212, 104,448 B: 2 CTAs, 128 KB ahead
      D 128 BN 64  4 warps, 3 stages: 206-240 / 164-212, 71,680 B: 2 CTAs, 64 KB
      D 128 BN 32  4 warps, 3 stages: 140-156 / 112-144, 37,888 B: 3 CTAs, 48 KB
      D 128 BN 128 8 warps, 3 stages: 208-214 / 170-212, 139,264 B: 1 CTA, 64 KB
      D 128 BN 64  8 warps, 4 stages: 151-190 (FUSED 1 only), 104,448 B: 1 CTA, 96 KB
      D 256 BN 32  4 warps, 4 / 3 stages: 204-228 regs, 107,520 / 74,752 B: 2 CTAs, 128 / 64 KB
      D 256 BN 64  8 warps, 4 / 3 stages: 162-212, 206,848 / 141,312 B: 1 CTA, 128 / 64 KB
    Left out (spills): BN 64 on 8 warps with FUSED 0 (ptxas holds 128 registers, 8 B spilled), BN 32
    on 8 warps (12-24 B), D 256 BN 64 on 4 warps (116-148 B), D 256 BN 128 (100-128 B, 274 KB).
    WAVES x 132 programs get equal shares of the work, so WAVES should not pass the CTAs that fit
    per SM (a second wave of equal programs doubles the time); one over-subscribed probe is kept."""
    keys = ("BN", "num_warps", "num_stages", "WAVES", "FUSED")
    if kw["head_dim"] > 128:
        rows = [(32, 4, 4, 2, 1), (32, 4, 4, 2, 0), (64, 8, 4, 1, 1), (32, 4, 3, 2, 1), (64, 8, 3, 1, 1),
                (32, 4, 4, 1, 1), (64, 8, 4, 1, 0), (32, 4, 4, 4, 1)]
    else:
        rows = [(32, 4, 4, 2, 1), (64, 4, 4, 2, 1), (32, 4, 4, 3, 1), (64, 4, 3, 2, 1), (32, 4, 4, 2, 0),
                (64, 4, 4, 2, 0), (128, 8, 4, 1, 1), (32, 4, 3, 3, 1), (64, 4, 4, 1, 1), (128, 8, 3, 1, 1),
                (32, 4, 4, 3, 0), (32, 4, 4, 1, 1), (128, 8, 3, 1, 0), (32, 4, 4, 6, 1)]
    return _cfgs(keys, rows)


def _interleave(lists: list[list]) -> list:
    """Rank 0 of every list, then rank 1, ... (several kernels' grids, cut alike by a deadline)."""
    out = []
    for i in range(max((len(x) for x in lists), default=0)):
        out += [x[i] for x in lists if i < len(x)]
    return out


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _provenance(torch, triton, device: str) -> dict:
    from aka.evaluate.api import git_sha      # AKA_GIT_SHA on the device (its .git is a stale copy)
    sha = git_sha() or "unknown"
    gpu = torch.cuda.get_device_name(0) if device == "cuda" else "cpu (Triton interpreter)"
    return {"device": device, "gpu": gpu, "torch": torch.__version__, "triton": triton.__version__,
            "git_sha": sha, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "timing": ("triton.testing.do_bench_cudagraph median (graph replay, warm L2)"
                       if device == "cuda" else "interpreter wall clock of one call (not a timing)")}


def _calibrate(torch, device: str) -> dict:
    """Copy bandwidth (bytes read + written) and bf16 matmul rate, CUDA-event medians."""
    if device != "cuda":
        return {"copy_tbps": None, "bf16_tflops": None}

    def med_ms(fn, n=10):
        fn()
        ts = []
        for _ in range(n):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(); fn(); b.record(); b.synchronize()
            ts.append(a.elapsed_time(b))
        return sorted(ts)[len(ts) // 2]

    src = torch.randn(2**28, device="cuda")   # 1 GiB fp32
    dst = torch.empty_like(src)
    copy = 2 * src.numel() * 4 / (med_ms(lambda: dst.copy_(src)) * 1e-3) / 1e12
    del src, dst
    x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    mm = 2 * 8192**3 / (med_ms(lambda: x @ y) * 1e-3) / 1e12
    return {"copy_tbps": copy, "bf16_tflops": mm}


def _time_us(fn, device: str) -> float:
    if device == "cuda":
        import triton.testing
        return float(triton.testing.do_bench_cudagraph(fn, rep=5, return_mode="median")) * 1e3
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1e6


def _sdpa_peer(torch, inputs: dict, scale: float):
    """SDPA one call per sequence, as the anchors measured it: flash when it takes the call."""
    import torch.nn.functional as F
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    bounds = inputs["cu_seqlens"].tolist()     # outside the timed region: no sync in the graph
    group = q.shape[1] // k.shape[1] > 1

    def run():
        out = torch.empty_like(q)
        for a, b in zip(bounds[:-1], bounds[1:]):
            o = F.scaled_dot_product_attention(q[a:b].transpose(0, 1)[None], k[a:b].transpose(0, 1)[None],
                                               v[a:b].transpose(0, 1)[None], is_causal=True, scale=scale,
                                               enable_gqa=group)
            out[a:b] = o[0].transpose(0, 1)
        return out
    backend = "default"
    if q.is_cuda:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        try:
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                run()
            backend = "flash"
        except Exception:
            pass
    if backend == "flash":
        def call():
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                return run()
        return call, backend
    return run, backend


class Tuner:
    def __init__(self, out_dir: Path, device: str, deadline_s: float, max_configs: int = 0,
                 kernels: dict[str, list[str]] | None = None):
        import torch
        import triton
        if device == "cpu":   # the interpreter's bf16 casts, dots and range() as the harness fixes them
            from aka.evaluate.interp_fix import install
            install()
        self.torch, self.device, self.max_configs = torch, device, max_configs
        self.kernels = kernels or {}
        self.t_end = time.monotonic() + deadline_s
        self.out_path = out_dir / "tune_attn.json"
        self.doc = {"provenance": _provenance(torch, triton, device), "calibration": {},
                    "records": [], "peers": [], "best": {}, "skipped": [], "errors": []}
        if any(k != KERNELS[op] for op, ks in self.kernels.items() for k in ks):
            self.doc.update(kernels=self.kernels, other_records=[], other_best={})
        try:
            self.doc["calibration"] = _calibrate(torch, device)
        except Exception as e:
            self.doc["errors"].append(f"calibration: {type(e).__name__}: {e}")
        self.save()

    def save(self):
        tmp = self.out_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.doc, default=str))
        os.replace(tmp, self.out_path)

    def sol_us(self, meta: dict, kw: dict) -> float | None:
        from aka.roofline import eval_expr
        cal = self.doc["calibration"]
        if not cal.get("copy_tbps"):
            return None
        cost = meta["cost"]
        mem = eval_expr(cost["bytes"], kw) / (cal["copy_tbps"] * 1e12) * 1e6
        flops = eval_expr(cost["flops"]["bf16"], kw)
        return max(mem, flops / (cal["bf16_tflops"] * 1e12) * 1e6)

    def run_op(self, op: str, shape_ids: list[str], shapes: dict, op_end: float):
        """Config-major: rank 0 of every shape's grid, then rank 1, ... so the deadline cuts the
        least promising configs of all shapes alike (compiles are front-loaded: ~1 s per new
        compile-time tuple, then every shape reuses it)."""
        torch = self.torch
        from aka.evaluate.compare import compare_outputs
        op_dir = ROOT / "bench" / "ops" / op
        meta = json.loads((op_dir / "meta.json").read_text())
        ref_mod = _load(op_dir / "reference.py", f"ref_{op}")
        inp_mod = _load(op_dir / "input.py", f"inp_{op}")
        names = self.kernels.get(op) or [KERNELS[op]]
        mods = {n: _load(ROOT / "knowledge_base" / "kernels" / op / f"{n}.py",
                         f"kern_{op}" if n == KERNELS[op] else f"kern_{op}_{n}") for n in names}
        kern = mods[names[0]]
        if KERNELS[op] in names:
            self.doc["best"].setdefault(op, {})
        cases = {}
        for n, sid in enumerate(shape_ids):
            if time.monotonic() > op_end:
                self.doc["skipped"].append({"op": op, "shape": sid, "configs": "all (deadline)"})
                continue
            init, kw = shapes[sid]["init_kwargs"], shapes[sid]["input_kwargs"]
            try:
                torch.manual_seed(1000 + n)
                inputs = inp_mod._make_inputs(**kw, device=self.device)
                with torch.no_grad():
                    ref = ref_mod.Model(**init)(**inputs)
                key = kern.shape_key(*[inputs[a] for a in _KEY_ARGS[op]])
            except Exception as e:
                self.doc["errors"].append(f"{op} {sid} setup: {type(e).__name__}: {e}")
                self.save()
                continue
            peer_us = None
            if op == "prefill_attention":
                try:
                    call, backend = _sdpa_peer(torch, inputs, init["scale"])
                    chk, _ = compare_outputs(call(), ref, meta)
                    peer_us = _time_us(call, self.device) if chk.ok else None
                    self.doc["peers"].append({"op": op, "shape": sid, "peer": f"sdpa-{backend}-per-seq",
                                              "us": peer_us, "correct": chk.ok, "rel_err": chk.rel_err})
                except Exception as e:
                    self.doc["errors"].append(f"{op} {sid} peer: {type(e).__name__}: {e}")
            cases[sid] = {"init": init, "kw": kw, "inputs": inputs, "ref": ref, "key": key,
                          "peer_us": peer_us, "sol": self.sol_us(meta, kw),
                          "cfgs": _interleave([[(n, cfg) for cfg in grid(op, kw, n)[:self.max_configs or None]]
                                               for n in names])}
        self.save()
        rank = 0
        while any(rank < len(c["cfgs"]) for c in cases.values()):
            for sid, c in cases.items():
                if rank >= len(c["cfgs"]):
                    continue
                if time.monotonic() > op_end:
                    self.doc["skipped"].append({"op": op, "shape": sid, "configs": [
                        cfg if n == KERNELS[op] else {"kernel": n, **cfg} for n, cfg in c["cfgs"][rank:]]})
                    continue
                name, cfg = c["cfgs"][rank]
                self._measure(op, sid, c, cfg, mods[name], meta, compare_outputs, name)
            rank += 1
        cases.clear()
        if self.device == "cuda":
            torch.cuda.empty_cache()

    def _measure(self, op, sid, c, cfg, kern, meta, compare_outputs, name=None):
        inputs, sol, peer_us = c["inputs"], c["sol"], c["peer_us"]
        name = name or KERNELS[op]
        rec = {"op": op, "kernel": name, "shape": sid, "key": c["key"], "input_kwargs": c["kw"], "config": cfg,
               "us": None, "correct": False, "ratio": None, "sol_us": sol, "peer_us": peer_us}
        try:
            def fn():
                return kern.attention(*[inputs[a] for a in _CALL_ARGS[op]], c["init"]["scale"], cfg)
            chk, _ = compare_outputs(fn(), c["ref"], meta)
            rec.update(correct=chk.ok, max_abs_err=chk.max_abs_err, rel_err=chk.rel_err, reason=chk.reason)
            if chk.ok:
                rec["us"] = _time_us(fn, self.device)
                base = peer_us if op == "prefill_attention" else sol
                if self.device == "cuda" and base:   # interpreter wall clock is no timing
                    rec["ratio"] = base / rec["us"]
        except Exception as e:
            rec["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        if name == KERNELS[op]:
            self.doc["records"].append(rec)
            best = self.doc["best"].setdefault(op, {})
        else:
            self.doc["other_records"].append(rec)
            best = self.doc["other_best"].setdefault(op, {}).setdefault(name, {})
        cur = best.get(sid)
        if rec["us"] and (cur is None or rec["us"] < cur["us"]):
            best[sid] = {"key": c["key"], "config": cfg, "us": rec["us"], "ratio": rec["ratio"],
                         "peer_us": peer_us, "sol_us": sol, "sol_fraction": sol / rec["us"] if sol else None}
        self.save()

    def table(self) -> str:
        lines = [f"{'op':24} {'shape':>5} {'us':>10} {'peer_us':>10} {'ratio':>7} {'sol':>6}  config"]
        tables = [(op, op, per) for op, per in self.doc["best"].items()]
        tables += [(op, f"{op}:{name}", per) for op, kb in self.doc.get("other_best", {}).items()
                   for name, per in kb.items()]
        for op, label, per in tables:
            for sid, b in sorted(per.items(), key=lambda x: int(x[0]) if x[0].isdigit() else x[0]):
                f = lambda v, p=1: "-" if v is None else f"{v:.{p}f}"
                lines.append(f"{label:24} {sid:>5} {f(b['us']):>10} {f(b['peer_us']):>10} {f(b['ratio'], 2):>7} "
                             f"{f(b['sol_fraction'], 2):>6}  {json.dumps(b['config'])}")
            ratios = [b["ratio"] for b in per.values() if b["ratio"]]
            if ratios:
                g = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
                lines.append(f"{label:24} geomean ratio {g:.3f}, min {min(ratios):.3f} over {len(ratios)} shapes")
            base = self.doc["best"].get(op, {})
            if label != op and base:   # another kernel: its time per shape against the dispatch kernel's
                pairs = [(sid, base[sid]["us"] / b["us"]) for sid, b in per.items() if sid in base]
                if pairs:
                    lines.append(f"{label:24} speedup over {KERNELS[op]}: " +
                                 ", ".join(f"{sid} {x:.2f}x" for sid, x in sorted(pairs, key=lambda p: (len(p[0]), p[0]))))
        return "\n".join(lines)


_KEY_ARGS = {"prefill_attention": ("q", "k", "cu_seqlens"),
             "paged_decode_attention": ("q", "key_cache", "block_tables"),
             "mla_decode_attention": ("q_nope", "kv_c_and_k_pe", "block_tables")}
_CALL_ARGS = {"prefill_attention": ("q", "k", "v", "cu_seqlens"),
              "paged_decode_attention": ("q", "key_cache", "value_cache", "block_tables", "seq_lens"),
              "mla_decode_attention": ("q_nope", "q_pe", "kv_c_and_k_pe", "block_tables", "seq_lens")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--deadline", type=float, default=135.0, help="wall-clock seconds for the whole run (the H200 budget is 150)")
    ap.add_argument("--ops", default=",".join(KERNELS))
    ap.add_argument("--shapes", default=None, help="all (GPU default), small (CPU default) or a comma list of shape ids")
    ap.add_argument("--device", default=None, choices=["cuda", "cpu"])
    ap.add_argument("--max-configs", type=int, default=0, help="only the first N configs per shape and kernel (0: all)")
    ap.add_argument("--kernels", default=None,
                    help="comma list of kernels to tune per op (default: each op's dispatch kernel; 'all': "
                         f"also {sorted({k for v in OTHER_KERNELS.values() for k in v})})")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    device = args.device or ("cuda" if _has_cuda() else "cpu")
    if device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"      # before triton is imported
    which = args.shapes or ("all" if device == "cuda" else "small")
    ops = [o for o in args.ops.split(",") if o]
    bad = [o for o in ops if o not in KERNELS]
    if bad:
        print(f"error: unknown op(s) {bad}; choose from {list(KERNELS)}", file=sys.stderr)
        return 2
    kernels = {}
    if args.kernels:
        want = [k for k in args.kernels.split(",") if k]
        for op in ops:
            known = [KERNELS[op], *OTHER_KERNELS.get(op, ())]
            kernels[op] = known if "all" in want else [k for k in known if k in want]
        unknown = [k for k in want if k != "all" and not any(k in [KERNELS[o], *OTHER_KERNELS.get(o, ())] for o in ops)]
        if unknown:
            print(f"error: unknown kernel(s) {unknown} for ops {ops}", file=sys.stderr)
            return 2
        ops = [o for o in ops if kernels[o]]
    out = Path(args.outdir)
    out.mkdir(parents=True, exist_ok=True)
    tuner = Tuner(out, device, args.deadline - (time.monotonic() - t0), args.max_configs, kernels)
    for j, op in enumerate(ops):
        op_dir = ROOT / "bench" / "ops" / op
        if which == "small":
            shapes = json.loads((op_dir / "meta.json").read_text())["small_shapes"]
        else:
            shapes = json.loads((op_dir / "shapes.json").read_text())
            if which != "all":     # a comma list of shape ids (of the bench shapes or the small ones)
                small = json.loads((op_dir / "meta.json").read_text())["small_shapes"]
                ids = [i for i in which.split(",") if i]
                shapes = {i: shapes[i] if i in shapes else small[i] for i in ids if i in shapes or i in small}
        share = BUDGET_SHARE[op] / sum(BUDGET_SHARE[o] for o in ops[j:])
        op_end = time.monotonic() + (tuner.t_end - time.monotonic()) * share
        print(f"[{time.monotonic() - t0:6.1f} s] {op}: {len(shapes)} shapes", flush=True)
        try:
            tuner.run_op(op, list(shapes), shapes, op_end)
        except Exception as e:
            tuner.doc["errors"].append(f"{op}: {type(e).__name__}: {e}")
        tuner.save()
    tuner.doc["wall_s"] = time.monotonic() - t0
    tuner.save()
    for e in tuner.doc["errors"]:
        print("error:", e)
    print(f"wrote {tuner.out_path} ({len(tuner.doc['records'])} records, {time.monotonic() - t0:.1f} s)")
    print(tuner.table())
    return 0


def _has_cuda() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except Exception:
        return False


if __name__ == "__main__":
    sys.exit(main())
