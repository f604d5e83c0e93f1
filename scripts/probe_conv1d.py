"""What holds causal_conv1d at half the copy ceiling? One process, one kernel body with switches.

Every kernel of causal_conv1d and torch.compile sit at 0.46-0.50 of the measured copy ceiling on
every large H200 shape (results/kb/kernels/causal_conv1d/*.results.json), and the vector-load
variant was slower still, so neither the scalar loads alone nor DRAM explains it. This probe
times variants of knowledge_base/kernels/causal_conv1d/time_loop.py's body that each remove one
suspect, on the same grid and tile:

    copy      y = x through the same tiles and grid (the tiling's own ceiling)
    base      time_loop's body (the op)
    nosilu    base without the SiLU (not the op: timed only)
    aligned   all four taps read x[t], the aligned tap (not the op: timed only)
    prefetch  knowledge_base/kernels/causal_conv1d/prefetch_span.py at its defaults (the same tile,
              span and warps): base with the next chunk's four tap tiles loaded before the
              current one is computed (the op: checked against the reference)

    python scripts/probe_conv1d.py OUTDIR [--shapes 11,3] [--device cuda|cpu]

Timing: triton.testing.do_bench (median of repeated calls; every bench shape here is 80 MB to
1 GB, beyond the 60 MB L2). These are probe figures, not verdicts. Writes OUTDIR/conv1d_probe.json
and prints GB/s per variant and shape.
"""
from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from aka.evaluate.loader import import_file  # noqa: E402

VARIANTS = ("copy", "base", "nosilu", "aligned", "prefetch")
CHECKED = ("base", "prefetch")


@triton.jit
def _tap_tiles(xbase, xoff, tc, L, cm, BL: tl.constexpr, ALIGNED: tl.constexpr):
    t = tc + tl.arange(0, BL)
    s0 = t if ALIGNED else t - 3
    s1 = t if ALIGNED else t - 2
    s2 = t if ALIGNED else t - 1
    x0 = tl.load(xbase + (xoff + s0[None, :]), mask=cm[:, None] & ((s0 >= 0) & (s0 < L))[None, :], other=0.0)
    x1 = tl.load(xbase + (xoff + s1[None, :]), mask=cm[:, None] & ((s1 >= 0) & (s1 < L))[None, :], other=0.0)
    x2 = tl.load(xbase + (xoff + s2[None, :]), mask=cm[:, None] & ((s2 >= 0) & (s2 < L))[None, :], other=0.0)
    x3 = tl.load(xbase + (xoff + t[None, :]), mask=cm[:, None] & (t < L)[None, :], other=0.0)
    return x0, x1, x2, x3


@triton.jit
def _probe(x_ptr, w_ptr, b_ptr, y_ptr, C, L, n_cb, n_sb, sxb, sxc, syb, syc, swc,
           BC: tl.constexpr, BL: tl.constexpr, CHUNKS: tl.constexpr, MODE: tl.constexpr):
    # MODE: 0 copy, 1 base, 2 nosilu, 3 aligned (prefetch is the knowledge-base kernel itself)
    pid = tl.program_id(0)
    sb = pid % n_sb
    cb = (pid // n_sb) % n_cb
    b = pid // (n_sb * n_cb)
    cl = tl.arange(0, BC)
    c = cb * BC + cl
    cm = c < C
    xbase = x_ptr + (b.to(tl.int64) * sxb + (cb * BC).to(tl.int64) * sxc)
    ybase = y_ptr + (b.to(tl.int64) * syb + (cb * BC).to(tl.int64) * syc)
    xoff = cl[:, None] * sxc
    yoff = cl[:, None] * syc
    bias = tl.load(b_ptr + c, mask=cm, other=0.0).to(tl.float32)[:, None]
    w0 = tl.load(w_ptr + c * swc + 0, mask=cm, other=0.0).to(tl.float32)[:, None]
    w1 = tl.load(w_ptr + c * swc + 1, mask=cm, other=0.0).to(tl.float32)[:, None]
    w2 = tl.load(w_ptr + c * swc + 2, mask=cm, other=0.0).to(tl.float32)[:, None]
    w3 = tl.load(w_ptr + c * swc + 3, mask=cm, other=0.0).to(tl.float32)[:, None]
    t0 = sb * (BL * CHUNKS)
    for i in range(CHUNKS):
        tc = t0 + i * BL
        if tc < L:
            t = tc + tl.arange(0, BL)
            if MODE == 0:
                out = tl.load(xbase + (xoff + t[None, :]), mask=cm[:, None] & (t < L)[None, :], other=0.0)
            else:
                x0, x1, x2, x3 = _tap_tiles(xbase, xoff, tc, L, cm, BL, MODE == 3)
                acc = bias + w0 * x0.to(tl.float32)
                acc = acc + w1 * x1.to(tl.float32)
                acc = acc + w2 * x2.to(tl.float32)
                acc = acc + w3 * x3.to(tl.float32)
                out = acc if MODE == 2 else acc / (1.0 + tl.exp(-acc))
            tl.store(ybase + (yoff + t[None, :]), out.to(y_ptr.dtype.element_ty),
                     mask=cm[:, None] & (t < L)[None, :])


def run_variant(mode: str, x, w, bias, bc=32, bl=128, chunks=4, num_warps=8):
    if mode == "prefetch":  # same tile, span and warps by its AKA_PARAMS
        return _prefetch_span()(x, w, bias)
    B, C, L = x.shape
    y = torch.empty_like(x)
    n_cb, n_sb = triton.cdiv(C, bc), triton.cdiv(L, bl * chunks)
    _probe[(B * n_cb * n_sb,)](x, w, bias, y, C, L, n_cb, n_sb, x.stride(0), x.stride(1), y.stride(0), y.stride(1),
                               w.stride(0), BC=bc, BL=bl, CHUNKS=chunks, MODE=VARIANTS.index(mode), num_warps=num_warps)
    return y


@functools.cache
def _prefetch_span():
    """prefetch_span.py's ModelNew, imported once: run_variant runs inside the timed loop."""
    mod = import_file(ROOT / "knowledge_base" / "kernels" / "causal_conv1d" / "prefetch_span.py", "conv_prefetch_span")
    return mod.ModelNew()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--shapes", default="11,3")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args(argv)
    op_dir = ROOT / "bench" / "ops" / "causal_conv1d"
    shapes = json.loads((op_dir / "shapes.json").read_text())
    small = json.loads((op_dir / "meta.json").read_text())["small_shapes"]
    ref = import_file(op_dir / "reference.py", "conv_ref").Model()
    make = import_file(op_dir / "input.py", "conv_input")._make_inputs
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for sid in args.shapes.split(","):
        kw = (shapes.get(sid) or small[sid])["input_kwargs"]
        inp = make(**kw, device=args.device)
        expect = ref(**inp)
        nbytes = 2 * inp["x"].numel() * inp["x"].element_size()
        for mode in VARIANTS:
            y = run_variant(mode, inp["x"], inp["weight"], inp["bias"])
            ok = None
            if mode in CHECKED:
                ok = bool(torch.allclose(y.float(), expect.float(), atol=2e-2, rtol=2e-2))
            elif mode == "copy":
                ok = bool(torch.equal(y, inp["x"]))
            if args.device == "cuda":
                ms = triton.testing.do_bench(lambda: run_variant(mode, inp["x"], inp["weight"], inp["bias"]),
                                             return_mode="median")
            else:
                ms = float("nan")
            row = {"shape": sid, "variant": mode, "correct": ok, "us": ms * 1e3, "gb_s": nbytes / (ms * 1e-3) / 1e9}
            rows.append(row)
            print(f"shape {sid} {mode:9s} correct={ok} {row['us']:9.1f} us {row['gb_s']:8.0f} GB/s", flush=True)
            (out_dir / "conv1d_probe.json").write_text(json.dumps(
                {"device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
                 "torch": torch.__version__, "triton": triton.__version__, "rows": rows}, indent=1))
    bad = [r for r in rows if r["correct"] is False]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
