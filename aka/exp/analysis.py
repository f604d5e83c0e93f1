"""From the long table to the numbers of a report: per-run curves and finals, arm summaries, paired
tests, the variance decomposition, the detectable effect, and the iteration analysis.

Outcomes are the run's final best-so-far objective. On the log scale a run with no passing kernel
(objective 0) has no value, so it is set to FLOOR and counted: the report says how many.
"""
from __future__ import annotations

import itertools
from collections import defaultdict

import numpy as np

from aka.exp import stats

FLOOR = 1e-3             # objective of a run that found nothing, for log-scale statistics only
ASSUMED_SD = 0.3         # SD of paired log-differences when the data give none (n < 3 or all ties)


def runs(rows: list[dict]) -> dict[tuple, list[dict]]:
    """(arm, operator, seed) -> that run's rows in order."""
    out: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        out[(r["arm"], r["operator"], r["seed"])].append(r)
    for v in out.values():
        v.sort(key=lambda r: (r["round"], r["candidate"]))
    return dict(out)


def curve(run_rows: list[dict], rounds: int) -> np.ndarray:
    """Best-so-far after each round 1..rounds, carried forward past a run's last round."""
    out = np.zeros(rounds)
    best = 0.0
    by_round = {r["round"]: r["best_so_far"] for r in run_rows}
    for i in range(rounds):
        best = by_round.get(i + 1, best)
        out[i] = best
    return out


def finals(rs: dict[tuple, list[dict]]) -> dict[tuple, float]:
    return {k: v[-1]["best_so_far"] for k, v in rs.items()}


def arm_order(rows: list[dict]) -> list[str]:
    seen: list[str] = []
    for r in rows:
        if r["arm"] not in seen:
            seen.append(r["arm"])
    return seen


def summaries(fin: dict[tuple, float], arms: list[str], n_boot: int) -> dict[str, dict]:
    out = {}
    for i, arm in enumerate(arms):
        vals = np.array([v for (a, _, _), v in fin.items() if a == arm])
        floored = np.maximum(vals, FLOOR)
        d = {"runs": int(vals.size), "at_floor": int(np.sum(vals < FLOOR))}
        if vals.size >= 2:
            d["median"] = stats.bootstrap_ci(vals, "median", n_boot=n_boot, seed=i).to_json()
            d["geomean"] = stats.bootstrap_ci(floored, "geomean", n_boot=n_boot, seed=100 + i).to_json()
        elif vals.size == 1:
            d["median"] = d["geomean"] = {"value": float(floored[0]), "lo": None, "hi": None, "n": 1}
        out[arm] = d
    return out


def _holm_in_place(tests: list[dict]) -> None:
    """p_holm on every test that has a p-value, Holm-adjusted over those tests as one family."""
    adj = iter(stats.holm([t["p"] for t in tests if t.get("p") is not None]))
    for t in tests:
        if t.get("p") is not None:
            t["p_holm"] = next(adj)


def paired(fin: dict[tuple, float], arms: list[str], baseline: str | None = None) -> list[dict]:
    """Every pair of arms (or each against `baseline`) over the (operator, seed) cells both ran,
    with Holm-adjusted p-values over the whole family."""
    pairs = [(baseline, a) for a in arms if a != baseline] if baseline else list(itertools.combinations(arms, 2))
    tests = []
    for a, b in pairs:
        cells = sorted({(o, s) for (x, o, s) in fin if x == a} & {(o, s) for (x, o, s) in fin if x == b})
        if len(cells) < 2:
            tests.append({"a": a, "b": b, "n": len(cells), "p": None, "note": "fewer than 2 shared cells"})
            continue
        va = np.maximum([fin[(a, o, s)] for o, s in cells], FLOOR)
        vb = np.maximum([fin[(b, o, s)] for o, s in cells], FLOOR)
        t = stats.paired_permutation_test(vb, va)
        t.update(a=a, b=b, sd_log_diff=float(np.std(np.log(vb) - np.log(va), ddof=1)))
        tests.append(t)
    _holm_in_place(tests)
    return tests


def paired_by_operator(fin: dict[tuple, float], arms: list[str], baseline: str | None = None) -> dict:
    """The same comparisons with the operator as the unit: per operator the mean log-ratio over the
    seeds both arms ran, an exact sign-flip test over operators, Holm over the family.

    Seeds of one operator share its kernels, shapes and GPU; when a proposer's search barely depends
    on the seed (the offline proposer's is almost deterministic), the (operator, seed) cells are
    near-replicates and a test over cells counts each operator as several independent pairs. This
    test does not: with k operators no p-value can fall below 2 / 2**k. `seed_sd` (pooled SD of log
    final over the seeds of each (arm, operator)) against `cell_sd` (SD of the cell-level paired
    log-differences) says which reading fits: seeds that spread far less than pairs do are
    replicates, and this is the test to read."""
    pairs = [(baseline, a) for a in arms if a != baseline] if baseline else list(itertools.combinations(arms, 2))
    groups: dict[tuple, list[float]] = defaultdict(list)
    for (a, o, _), v in fin.items():
        groups[(a, o)].append(float(np.log(max(v, FLOOR))))
    within = [np.var(g, ddof=1) * (len(g) - 1) for g in groups.values() if len(g) > 1]
    dof = sum(len(g) - 1 for g in groups.values() if len(g) > 1)
    seed_sd = float(np.sqrt(sum(within) / dof)) if dof else None
    tests = []
    for a, b in pairs:
        ops = sorted({o for (x, o, _) in fin if x == a} & {o for (x, o, _) in fin if x == b})
        va, vb = [], []
        for o in ops:
            seeds = sorted({s for (x, oo, s) in fin if x == a and oo == o} & {s for (x, oo, s) in fin if x == b and oo == o})
            la = np.log(np.maximum([fin[(a, o, s)] for s in seeds], FLOOR))
            lb = np.log(np.maximum([fin[(b, o, s)] for s in seeds], FLOOR))
            va.append(float(np.exp(la.mean())))
            vb.append(float(np.exp(lb.mean())))
        if len(ops) < 2:
            tests.append({"a": a, "b": b, "n": len(ops), "p": None, "note": "fewer than 2 shared operators"})
            continue
        t = stats.paired_permutation_test(vb, va)
        t.update(a=a, b=b, per_operator={o: y / x for o, x, y in zip(ops, va, vb)}, min_p=2.0 / 2 ** len(ops))
        tests.append(t)
    _holm_in_place(tests)
    return {"tests": tests, "seed_sd": seed_sd}


def decomposition(fin: dict[tuple, float], category: dict[str, str]) -> dict | None:
    keys = list(fin)
    if len({a for a, _, _ in keys}) < 2:
        return None
    y = np.log(np.maximum([fin[k] for k in keys], FLOOR))
    return stats.variance_decomposition(y, [category[o] for _, o, _ in keys], [a for a, _, _ in keys])


def detectable(tests: list[dict], alpha: float = 0.05, power: float = 0.8) -> dict | None:
    """The design's minimum detectable effect: pairs per comparison, the pooled observed SD of
    paired log-differences (ASSUMED_SD when the data give none), Holm's family size."""
    done = [t for t in tests if t.get("p") is not None]
    if not done:
        return None
    n = min(t["n"] for t in done)
    sds = [t["sd_log_diff"] for t in done if t["n"] >= 3 and t["sd_log_diff"] > 0]
    sd, source = (float(np.sqrt(np.mean(np.square(sds)))), "observed, pooled over comparisons") if sds \
        else (ASSUMED_SD, "assumed: the data give no spread")
    m = stats.min_detectable_effect(n, sd, alpha=alpha, power=power, comparisons=len(done))
    m["sd_source"] = source
    return m


def iteration(rs: dict[tuple, list[dict]], arms: list[str], rounds: int) -> dict[str, dict]:
    """Per arm: compile and correctness rates per round over every candidate of that round, and
    the eager speedup of each run's first correct kernel, split by whether it was the run's first
    candidate (correct at first try) or came after failures (fixed later)."""
    out = {}
    for arm in arms:
        per_round = []
        for r in range(1, rounds + 1):
            cands = [x for (a, _, _), v in rs.items() if a == arm for x in v if x["round"] == r]
            if cands:
                per_round.append({"round": r, "n": len(cands),
                                  "compiled": sum(c["compiled"] for c in cands) / len(cands),
                                  "correct": sum(c["correct"] for c in cands) / len(cands)})
        first, later = [], []
        n_first = n_later = 0
        for (a, _, _), v in rs.items():
            if a != arm:
                continue
            i = next((j for j, x in enumerate(v) if x["correct"]), None)
            if i is None:
                continue
            sp = v[i]["speedup_eager"]
            if i == 0:
                n_first += 1
                if sp:
                    first.append(sp)
            else:
                n_later += 1
                if sp:
                    later.append(sp)
        out[arm] = {"per_round": per_round, "first_try_runs": n_first, "fixed_later_runs": n_later,
                    "first_try_speedup": stats.geomean(first) if first else None,
                    "fixed_later_speedup": stats.geomean(later) if later else None}
    return out


def mechanisms(run_events: dict[str, list[dict]], cells: dict[str, dict], arms: list[str]) -> dict[str, dict]:
    """Per arm, what its mechanisms did in the runs (from each run's events): runs in which a
    dropout fired, rounds whose prompt carried knowledge-base hits, proposals made. A dropout-on
    arm whose dropout never fired measured the dropout-off condition: the report says so."""
    out = {a: {"runs": 0, "runs_with_dropout": 0, "dropouts": 0, "rounds": 0, "rounds_with_hits": 0}
           for a in arms}
    for rid, evs in run_events.items():
        arm = (cells.get(rid) or {}).get("arm")
        if arm not in out:
            continue
        m = out[arm]
        m["runs"] += 1
        drops = sum(e["type"] == "dropout" for e in evs)
        m["dropouts"] += drops
        m["runs_with_dropout"] += drops > 0
        m["rounds"] += sum(e["type"] == "round_start" for e in evs)
        m["rounds_with_hits"] += sum(e["type"] == "retrieval" and bool(e.get("hits")) for e in evs)
    return out
