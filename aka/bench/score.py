"""Scores of a benchmark run.

Per op: its objective (aka/objective.py: the shape-weighted geometric mean of sol_fraction), or 0
when any shape failed (a kernel that is wrong anywhere, or falls back, must not score) or was not
timed.
Suite: Σ_op importance_op × op score; plus fast_p (KernelBench's fraction of (op, shape) cases that
are correct and faster than a baseline by more than p) at p = 0, 1, 1.5, 2 over eager and over
compile, and the pass and fallback rates.
"""
from __future__ import annotations

from collections import defaultdict

from aka.objective import objective

FAST_P = (0.0, 1.0, 1.5, 2.0)


def op_scores(rows: list[dict]) -> dict[str, dict]:
    by_op: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_op[r["op"]].append(r)
    out = {}
    for op, rs in by_op.items():
        untimed = [r for r in rs if r.get("status") == "untimed"]  # a baseline the GPU could not time
        bad = [r for r in rs if (not r.get("correct") or r.get("impossible")) and r not in untimed]
        g = objective([r.get("sol_fraction") for r in rs], [r.get("shape_weight", 1.0) for r in rs])
        if bad or g is None:
            timed = [r for r in rs if r.get("sol_fraction")]
            why = (f"{len(bad)} of {len(rs)} shapes failed" if bad else
                   f"{len(rs) - len(timed)} of {len(rs)} shapes untimed"
                   + (f": {untimed[0].get('reason', '')[:60]}" if untimed else ""))
            out[op] = {"score": 0.0, "shapes": len(rs), "why": why, "weight": rs[0].get("op_weight", 0.0),
                       "category": rs[0].get("category")}
            continue
        out[op] = {"score": g, "shapes": len(rs), "why": "", "weight": rs[0].get("op_weight", 0.0),
                   "category": rs[0].get("category")}
    return out


def suite_score(rows: list[dict]) -> dict:
    ops = op_scores(rows)
    total_w = sum(o["weight"] for o in ops.values()) or 1.0
    n = len(rows) or 1
    fast = {}
    for base in ("eager", "compile"):
        for p in FAST_P:
            hits = sum(1 for r in rows if r.get("correct") and not r.get("impossible")
                       and (r.get(f"speedup_{base}") or 0.0) > p)
            fast[f"fast_{p:g}_{base}"] = hits / n
    return {
        "score": sum(o["weight"] * o["score"] for o in ops.values()) / total_w,
        "ops": len(ops), "cases": len(rows),
        "pass_rate": sum(1 for r in rows if r.get("correct")) / n,
        "fallback_rate": sum(1 for r in rows if r.get("status") == "fallback") / n,
        **fast,
        "per_op": ops,
    }


def by_impl(rows: list[dict]) -> dict[str, dict]:
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        groups[r["impl"]].append(r)
    return {impl: suite_score(rs) for impl, rs in groups.items()}
