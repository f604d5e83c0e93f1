"""The experiment's long-format table: one row per candidate of every run, read back from the run
stores alone (so a table can always be rebuilt from runs/).

Columns: arm, operator, category, seed, round, candidate, status, compiled, correct, objective
(this candidate's: pass rate on CPU, weighted geomean sol_fraction on a GPU), best_so_far (the
incumbent's after this candidate's decision; 0 before anything passes), speedup_eager (geomean
over shapes, GPU only), tokens, cost_usd (cumulative LLM spend up to and including this
candidate), wall_s (the run's own seconds from its start to this candidate's verdict: a run cut
off by a deadline and resumed in a later call does not count the hours between), accepted,
objective_kind, run_id.
"""
from __future__ import annotations

import csv
import datetime as dt
import math
from pathlib import Path

COLUMNS = ["arm", "operator", "category", "seed", "round", "candidate", "status", "compiled", "correct",
           "objective", "best_so_far", "speedup_eager", "tokens", "cost_usd", "wall_s", "accepted",
           "objective_kind", "run_id"]
NOT_COMPILED = ("invalid", "compile_error", "rejected")   # rejected: the static check refused it unrun
CORRECT = ("pass", "fallback")                            # fallback: correct, but ATen did the work


def _t(ev: dict) -> float:
    return dt.datetime.fromisoformat(ev["t"]).timestamp()


def _geo(xs) -> float | None:
    xs = [x for x in xs if x is not None and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def active_clock(events: list[dict]) -> list[float]:
    """Each event's time since the run's start, less the downtime before every `resume` event (the
    gap between a cut-off and the call that resumed it is not the run's time)."""
    out, now, prev = [], 0.0, None
    for ev in events:
        t = _t(ev)
        if prev is not None and ev.get("type") != "resume":
            now += max(0.0, t - prev)
        out.append(now)
        prev = t
    return out


def run_rows(root: Path, arm: str, operator: str, category: str, seed: int) -> list[dict]:
    from aka.agent.store import RunStore
    store = RunStore(root)
    events = store.events()
    if not events:
        return []
    clock = active_clock(events)
    verdict_t: dict[str, float] = {}
    for ev, t in zip(events, clock):
        if ev.get("candidate") and ev["type"] in ("rejected", "accepted", "invalid_proposal", "llm_error"):
            verdict_t[ev["candidate"]] = t
    rows, best, tokens, cost = [], 0.0, 0, 0.0
    for c in store.candidates():
        tokens += int(c.meta.get("input_tokens") or 0) + int(c.meta.get("output_tokens") or 0)
        cost += float(c.meta.get("cost_usd") or 0.0)
        obj = c.score.value if c.score and c.score.value is not None else None
        if c.accepted and obj is not None:
            best = max(best, obj)
        speed = _geo(s.speedup_eager for s in c.result.shapes) if c.result else None
        rows.append({"arm": arm, "operator": operator, "category": category, "seed": seed, "round": c.round,
                     "candidate": c.id, "status": c.status, "compiled": c.status not in NOT_COMPILED,
                     "correct": c.status in CORRECT, "objective": obj, "best_so_far": best,
                     "speedup_eager": speed, "tokens": tokens, "cost_usd": round(cost, 6),
                     "wall_s": round(verdict_t.get(c.id, clock[-1]), 1), "accepted": bool(c.accepted),
                     "objective_kind": c.score.kind if c.score else None, "run_id": root.name})
    return rows


def write_table(rows: list[dict], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if r.get(k) is None else r[k]) for k in COLUMNS})
    tmp.replace(path)
    return path


def read_table(path: Path) -> list[dict]:
    ints, floats, bools = ("seed", "round", "tokens"), ("objective", "best_so_far", "speedup_eager", "cost_usd",
                                                         "wall_s"), ("compiled", "correct", "accepted")
    out = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            for k in ints:
                r[k] = int(r[k])
            for k in floats:
                r[k] = float(r[k]) if r[k] != "" else None
            for k in bools:
                r[k] = r[k] == "True"
            out.append(r)
    return out
