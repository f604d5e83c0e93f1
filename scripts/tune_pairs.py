"""Pairs of tuner records that differ in one config key only, timed in the same run: how much that key
alone moved each shape (e.g. TMA 0/1: pointer loads against tensor descriptors).

    python scripts/tune_pairs.py results/h200/tune-2026-12-03/gemm_tune.json --key TMA [--min-m 1024] [--op fp8_block_scaled_gemm]

Reads the records of `scripts/gpu_tune_gemm.py` / the attention and MoE tuners ({"records": [...]},
each with "shape", "config", "us", "correct"; "M" where the op has one). Prints one row per pair:
shape, M x N x K, the other keys, the time at each value of --key, and their ratio (first value / second).
"""
from __future__ import annotations

import argparse
import json
from collections import defaultdict


def pairs(records: list[dict], key: str, min_m: int = 0, op: str | None = None) -> list[dict]:
    """Correct records grouped by (shape, every config key but `key`); groups timed at two values of it."""
    groups: dict = defaultdict(dict)
    for r in records:
        cfg = dict(r.get("config") or {})
        if not r.get("correct") or key not in cfg or (r.get("M") or 0) < min_m or (op and r.get("op") != op):
            continue
        v = cfg.pop(key)
        mnk = "x".join(str(r[d]) for d in ("M", "N", "K") if d in r) or None
        groups[(str(r["shape"]), mnk, json.dumps(cfg, sort_keys=True))][v] = float(r["us"])
    out = []
    for (shape, m, rest), times in groups.items():
        if len(times) >= 2:
            (v0, t0), (v1, t1) = sorted(times.items())[:2]
            out.append({"shape": shape, "MxNxK": m, "config": json.loads(rest), "values": [v0, v1], "us": [t0, t1],
                        "ratio": t0 / t1})
    return sorted(out, key=lambda p: (int(p["shape"]) if p["shape"].isdigit() else 0, p["shape"]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tune_json")
    ap.add_argument("--key", required=True, help="the config key the pairs differ in (e.g. TMA)")
    ap.add_argument("--min-m", type=int, default=0, help="only records with M at least this")
    ap.add_argument("--op", help="only this op's records (a tuner's file may hold several)")
    a = ap.parse_args(argv)
    data = json.load(open(a.tune_json))
    rows = pairs(data["records"] if isinstance(data, dict) else data, a.key, a.min_m, a.op)
    if not rows:
        print(f"no pairs differing only in {a.key}")
        return 1
    print(f"| shape | MxNxK | config | {a.key}={rows[0]['values'][0]} us | {a.key}={rows[0]['values'][1]} us | ratio |")
    print("|---|---|---|---|---|---|")
    for p in rows:
        cfg = ", ".join(f"{k} {v}" for k, v in p["config"].items() if k in ("BM", "BN", "BK", "num_warps", "num_stages", "SPLIT_K"))
        print(f"| {p['shape']} | {p['MxNxK']} | {cfg} | {p['us'][0]:.1f} | {p['us'][1]:.1f} | {p['ratio']:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
