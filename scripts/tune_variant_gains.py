"""What one configuration choice was worth in a tuning run: per shape, the best correct config with
it against the best without it, or each config against its twin that differs only by it.

    python scripts/tune_variant_gains.py TUNE.json --keys TMA_ACT,GATHER_X [--pairs] [--out TABLE.md]

TUNE.json is what scripts/gpu_tune_moe.py (`moe_tune.json`), gpu_tune_attn.py (`tune_attn.json`) or
gpu_tune_gemm.py (`tune.json`) wrote; all timings come from that one process, so the comparison
shares its machine and method. A config "has" the choice when any of --keys is set to a true value.
Without --pairs: one row per shape, best with / best without / gain. With --pairs: for every config
without the choice whose twin (the same config plus it) was also measured, the two times, and a
count of how often the twin was faster.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path


def measurements(doc: dict) -> list[tuple[str, dict, float]]:
    """(shape id, config, time in us) of every correct measurement, whichever tuner wrote `doc`."""
    out = []
    for rec in doc.get("shapes") or []:                       # gpu_tune_moe.py
        for row in rec.get("configs") or []:
            if row.get("ok") and row.get("time_us"):
                out.append((str(rec["id"]), dict(row["config"]), float(row["time_us"])))
    for row in doc.get("records") or []:                      # gpu_tune_attn.py, gpu_tune_gemm.py
        if row.get("correct") and row.get("us"):
            out.append((str(row["shape"]), dict(row["config"]), float(row["us"])))
    return out


def has(cfg: dict, keys: list[str]) -> bool:
    return any(cfg.get(k) for k in keys)


def best_split(rows, keys) -> list[dict]:
    by: dict[str, dict[bool, tuple[float, dict]]] = {}
    for sid, cfg, us in rows:
        side = by.setdefault(sid, {})
        h = has(cfg, keys)
        if h not in side or us < side[h][0]:
            side[h] = (us, cfg)
    out = []
    for sid, side in by.items():
        if True in side and False in side:
            out.append({"shape": sid, "without_us": side[False][0], "with_us": side[True][0],
                        "gain": side[False][0] / side[True][0], "with": side[True][1]})
    return out


def twins(rows, keys) -> list[dict]:
    plain = {(sid, json.dumps(cfg, sort_keys=True)): us for sid, cfg, us in rows if not has(cfg, keys)}
    out = []
    for sid, cfg, us in rows:
        if not has(cfg, keys):
            continue
        base = json.dumps({k: v for k, v in cfg.items() if k not in keys}, sort_keys=True)
        if (sid, base) in plain:
            out.append({"shape": sid, "config": base, "without_us": plain[(sid, base)], "with_us": us,
                        "ratio": us / plain[(sid, base)]})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tune_json")
    ap.add_argument("--keys", required=True, help="comma list of config keys that make up the choice")
    ap.add_argument("--pairs", action="store_true", help="twin configs instead of the best of each side")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    doc = json.loads(Path(a.tune_json).read_text())
    keys = [k for k in a.keys.split(",") if k]
    rows = measurements(doc)
    prov = doc.get("provenance") or doc.get("env") or {}
    lines = [f"`python scripts/tune_variant_gains.py {a.tune_json} --keys {a.keys}{' --pairs' if a.pairs else ''}`; "
             f"{prov.get('gpu', '?')}, torch {prov.get('torch', '?')}, triton {prov.get('triton', '?')}, "
             f"{prov.get('date', '?')}", ""]
    if a.pairs:
        got = sorted(twins(rows, keys), key=lambda r: (r["shape"], r["without_us"]))
        lines += ["| shape | config | without us | with us | with / without |", "|---|---|---|---|---|"]
        lines += [f"| {r['shape']} | `{r['config']}` | {r['without_us']:.1f} | {r['with_us']:.1f} | {r['ratio']:.3f} |"
                  for r in got]
        faster = sum(1 for r in got if r["ratio"] < 1.0)
        lines += ["", f"{len(got)} twin pairs; with the choice faster in {faster}, slower in "
                      f"{sum(1 for r in got if r['ratio'] > 1.0)}, ratio {min((r['ratio'] for r in got), default=0):.3f}"
                      f"-{max((r['ratio'] for r in got), default=0):.3f}"]
    else:
        got = best_split(rows, keys)
        lines += ["| shape | best without us | best with us | gain | best with |", "|---|---|---|---|---|"]
        lines += [f"| {r['shape']} | {r['without_us']:.1f} | {r['with_us']:.1f} | {r['gain']:.3f} "
                  f"| {', '.join(k for k in keys if r['with'].get(k))} |" for r in got]
        if got:
            gains = sorted(r["gain"] for r in got)
            lines += ["", f"{len(got)} shapes; gain {gains[0]:.3f}-{gains[-1]:.3f}, median {gains[len(gains) // 2]:.3f}"]
    text = "\n".join(lines) + "\n"
    if a.out:
        Path(a.out).write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
