"""`aka kb best`: per operator, the knowledge base's best kernel on a GPU, from its recorded results.

Reads the `<kernel>.results.json` entries that `aka kb verify --device cuda` wrote (current ones
only: the kernel's source hash must match), and for every operator picks the kernel with the
highest objective (aka/objective.py: the importance-weighted geomean of sol_fraction over the op's
shapes, the agent's objective). Beside it:

  * torch.compile's and eager's objective over the same shapes (sol_us / their time), and the
    kernel's objective over compile's (> 1: faster than torch.compile on the weighted shape set);
  * the fraction of the *measured* ceiling (`sol_fraction_measured`: the roofline with `aka hw
    calibrate`'s copy bandwidth and matmul rates) on the op's large shapes, those whose roofline
    time is at least LARGE_SOL_US, where the ceiling and not launch latency is what limits;
  * `meets`: that median >= 0.85 and the kernel beats compile (the knowledge base's target);
  * at the large shapes whose record carries both 95% CIs (the kernel's `time_ci_us` and compile's
    `compile_ci_us`, recorded since 2026-12-05): how many the kernel is faster or slower on with the
    two intervals apart, and how many are ties (they overlap). A ratio of 0.97 at the copy ceiling is
    often a tie: this says which. The intervals are one run's; two runs differ by more (2-7% between
    device calls on the H200, results/h200/verify-2026-12-04), so "apart" is the least a real
    difference shows.
"""
from __future__ import annotations

import functools
import statistics
from dataclasses import dataclass
from pathlib import Path

from aka.objective import fraction, objective
from aka.roofline import LARGE_SOL_US  # shared with `aka bench report`
from aka.util import fmt

TARGET = 0.85


def summarize(shapes: list[dict], weights: dict[str, float]) -> dict:
    """Objectives and the large-shape ceiling fraction of one kernel's per-shape results."""
    w = [weights.get(str(s.get("id")), 1.0) for s in shapes]
    obj = objective([s.get("sol_fraction") for s in shapes], w)
    comp = objective([fraction(s.get("sol_us"), s.get("compile_us")) for s in shapes], w)
    eager = objective([fraction(s.get("sol_us"), s.get("eager_us")) for s in shapes], w)
    large = [s["sol_fraction_measured"] for s in shapes
             if (s.get("sol_us") or 0) >= LARGE_SOL_US and s.get("sol_fraction_measured")]
    med = statistics.median(large) if large else None
    vs = obj / comp if obj and comp else None
    # torch.compile's time over the kernel's at each large shape (by the datasheet roofline, so
    # results without a calibration count too): the knowledge base's "faster than compile at
    # large shapes" is its minimum
    big = [s["compile_us"] / s["time_us"] for s in shapes
           if (s.get("sol_us") or 0) >= LARGE_SOL_US and s.get("compile_us") and s.get("time_us")]
    return {"objective": obj, "compile": comp, "eager": eager, "vs_compile": vs,
            "large_vs_compile_ci": ci_verdicts([s for s in shapes if (s.get("sol_us") or 0) >= LARGE_SOL_US]),
            "large_vs_compile_min": min(big) if big else None, "large_timed": len(big), "large_shapes": len(large),
            "large_median": med, "large_min": min(large) if large else None,
            "meets": bool(med is not None and vs is not None and med >= TARGET and vs > 1.0)}


# One run's 95% CIs are narrower than what separates two runs: the same 23 kernels verified twice,
# back to back on one H100 (results/h100/device-2026-12-06h/repeat_noise.md), moved by 0.2% at the
# median at large shapes, yet the two runs' intervals were apart at 118 of 179 large shapes; torch.compile's
# time moved by up to 4.2% there (2.0% at the 90th percentile: each run compiles anew). So a shape counts
# as faster or slower only when the intervals are apart and the medians differ by more than this.
MIN_APART = 0.02


def ci_verdicts(shapes: list[dict]) -> dict | None:
    """{faster, tie, slower}: shapes where the kernel's 95% CI lies below compile's, the two overlap,
    or it lies above, a difference of medians within MIN_APART counting as a tie; over the shapes
    that carry both intervals (None when none does)."""
    out = {"faster": 0, "tie": 0, "slower": 0}
    for s in shapes:
        k, c = s.get("time_ci_us"), s.get("compile_ci_us")
        if not (k and c and len(k) == 2 and len(c) == 2):
            continue
        t, ct = s.get("time_us"), s.get("compile_us")
        if t and ct and abs(ct / t - 1) <= MIN_APART:
            out["tie"] += 1
            continue
        out["faster" if k[1] < c[0] else "slower" if k[0] > c[1] else "tie"] += 1
    return out if sum(out.values()) else None


def _ci_cell(v: dict | None) -> str:
    return "-" if not v else f"{v['faster']} / {v['tie']} / {v['slower']}"


def _passed(e: dict, gpu: str | None) -> bool:
    """A passing entry over shapes, recorded (when `gpu` is given) on a GPU whose name contains it (a
    record keeps each GPU model's verdict: aka.kb.verify.cuda_entry, so one GPU's table holds none of
    another's figures); current or not."""
    return ((not gpu or gpu.lower() in str(e.get("gpu") or "").lower())
            and e.get("status") == "pass" and bool(e.get("shapes")))


@dataclass(frozen=True)
class Verdict:
    """One kernel's `device` entry (on `gpu`, when given) and what the table makes of it: `counts`
    (passing and current: it ranks) and `stale` (passing, but its code, the op's shapes or the
    timing method changed since)."""
    path: Path
    op: str
    entry: dict
    counts: bool
    stale: bool


def scan(root: Path, device: str = "cuda", gpu: str | None = None) -> list[Verdict]:
    """Every kernel's verdict, each results file read and each currency checked once, for
    best_table, unverified and stale_leaders to share (`aka kb best` asks all three)."""
    from aka.kb.verify import device_entry, is_current, kernel_op, kernel_paths, read_results
    out = []
    for p in kernel_paths(root):
        e = device_entry(read_results(p), device, gpu)
        passed = _passed(e, gpu)
        current = passed and is_current(p, device, gpu=e.get("gpu") if gpu else None)
        out.append(Verdict(p, kernel_op(p), e, current, passed and not current))
    return out


@functools.cache
def _weights(op: str) -> dict[str, float]:
    from aka.problem import load_problem
    return {s.id: s.weight for s in load_problem(op).shapes.values()}


def best_table(root: Path, device: str = "cuda", gpu: str | None = None,
               verdicts: list[Verdict] | None = None) -> list[dict]:
    """One row per operator that has current, passing `device` results (on `gpu`, when given: a
    substring of the recorded GPU name, e.g. H200). `verdicts`: scan()'s, when the caller has them."""
    by_op: dict[str, list[tuple[Path, dict]]] = {}
    for v in verdicts if verdicts is not None else scan(root, device, gpu):
        if v.counts:
            by_op.setdefault(v.op, []).append((v.path, v.entry))
    rows = []
    for op, entries in sorted(by_op.items()):
        scored = [(p, e, summarize(e["shapes"], _weights(op))) for p, e in entries]
        scored.sort(key=lambda t: t[2]["objective"] or 0.0, reverse=True)
        p, e, summ = scored[0]
        rows.append({"op": op, "kernel": p.stem, "kernels": len(entries), "gpu": e.get("gpu"),
                     "date": e.get("date"), "shapes": len(e["shapes"]), **summ})
    return rows


def unverified(root: Path, device: str = "cuda", gpu: str | None = None,
               verdicts: list[Verdict] | None = None) -> tuple[list[Path], list[str]]:
    """The kernels without a current, passing `device` result (on `gpu`, when given), and the ops
    none of whose kernels has one: what a table of the verified ones does not speak for."""
    vs = verdicts if verdicts is not None else scan(root, device, gpu)
    covered = {v.op for v in vs if v.counts}
    return [v.path for v in vs if not v.counts], sorted({v.op for v in vs} - covered)


def stale_leaders(root: Path, rows: list[dict], device: str = "cuda", gpu: str | None = None,
                  verdicts: list[Verdict] | None = None) -> list[dict]:
    """Kernels whose passing verdict on this device (on `gpu`, when given) no longer speaks for them
    (their code, the op's shapes or the timing method changed since) and whose objective then beat
    the op's row now, or the op has no row: where the table is lower than the last measurement, and
    what `aka kb verify --op OP` should measure again. Their figures are not in the table."""
    best = {r["op"]: r["objective"] or 0.0 for r in rows}
    out = []
    for v in verdicts if verdicts is not None else scan(root, device, gpu):
        if not v.stale:
            continue
        obj = summarize(v.entry["shapes"], _weights(v.op))["objective"]
        if obj is not None and obj > best.get(v.op, 0.0):
            out.append({"op": v.op, "kernel": v.path.stem, "objective": obj, "date": v.entry.get("date"),
                        "row": best.get(v.op)})
    return sorted(out, key=lambda d: (d["op"], -d["objective"]))


def suite_estimate(rows: list[dict], weights: dict[str, float]) -> dict:
    """The suite score of these kernels: Σ op weight x objective over the suite's ops divided by Σ
    weight (aka/bench/score.py's definition, with each op's best verdict in place of one bench run),
    an op without a row (no current, passing verdict) counting 0 as a failed op does in a run; and
    torch.compile's over the same records. `weights`: the suite's op weights (aka.bench.suite)."""
    by_op = {r["op"]: r for r in rows}
    total = sum(weights.values()) or 1.0
    score = sum(w * (by_op[op]["objective"] or 0.0) for op, w in weights.items() if op in by_op) / total
    comp = sum(w * (by_op[op]["compile"] or 0.0) for op, w in weights.items() if op in by_op) / total
    missing = sorted((op for op in weights if op not in by_op), key=lambda o: -weights[o])
    # a verdict without torch.compile's times on every shape (kb verify --no-baselines, an empty cache)
    # has no compile objective: it counts 0 in the compile figure, and the table says which ops those are
    no_compile = sorted((op for op in weights if op in by_op and by_op[op]["compile"] is None),
                        key=lambda o: -weights[o])
    return {"score": score, "compile": comp, "missing": missing,
            "missing_weight": sum(weights[o] for o in missing) / total, "no_compile": no_compile}


def markdown(rows: list[dict], provenance: str = "", missing: tuple[int, int, list[str]] | None = None,
             suite: dict | None = None, stale: list[dict] | None = None) -> str:
    """`missing`: (kernels without a current passing result, kernels in all, ops with none); `stale`:
    stale_leaders' list."""
    met = sum(r["meets"] for r in rows)
    lines = ["# Best knowledge-base kernel per op", "", provenance, "",
             f"Produced by `aka kb best` from the results `aka kb verify --device cuda` recorded. Large shapes: "
             f"roofline time >= {LARGE_SOL_US:.0f} us. Fraction of the measured ceiling: `sol_fraction_measured`. "
             "Objective: importance-weighted geomean of sol_fraction over all the op's shapes; compile's is the "
             f"same over torch.compile's times. Meets: median >= {TARGET} and faster than compile. "
             f"**{met} of {len(rows)} ops meet it.** "
             "×compile, large min: torch.compile's time over the kernel's, the least over the shapes whose datasheet "
             f"roofline time is >= {LARGE_SOL_US:.0f} us (n: how many); "
             f"**{sum(1 for r in rows if (r.get('large_vs_compile_min') or 0) > 1.0)} of {len(rows)} ops are faster "
             "than compile at every large shape.** Large shapes faster / tied / slower: the kernel's 95% CI below "
             f"compile's, overlapping it (or medians within {MIN_APART:.0%}), above it, over the large shapes whose "
             "record has both (- : none has; "
             f"{sum(1 for r in rows if (r.get('large_vs_compile_ci') or {}).get('slower'))} ops are slower beyond "
             "the intervals somewhere).", ""]
    if suite is not None:
        gone = (f"; {len(suite['missing'])} ops without a verdict count 0 (their weight "
                f"{suite['missing_weight']:.3f}): {', '.join(suite['missing'])}" if suite["missing"] else "")
        if suite.get("no_compile"):
            gone += (f"; torch.compile's figure counts 0 for {len(suite['no_compile'])} ops whose records lack its "
                     f"times: {', '.join(suite['no_compile'])}")
        lines += [f"**Suite score of these kernels: {suite['score']:.3f}** (torch.compile over the same records: "
                  f"{suite['compile']:.3f}): Σ op weight x objective over the bundled suite's weights, each op's "
                  f"best verdict in place of one `aka bench run`, so its records may come from different days"
                  f"{gone}.", ""]
    lines += ["| op | best kernel (of n) | shapes | objective | compile | eager | ×compile | ×compile, large min (n) "
             "| large shapes faster / tied / slower | large shapes | of measured ceiling: median, min | meets |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['op']} | {r['kernel']} ({r['kernels']}) | {r['shapes']} | {fmt(r['objective'], '.3f')} "
                     f"| {fmt(r['compile'], '.3f')} | {fmt(r['eager'], '.3f')} | {fmt(r['vs_compile'], '.2f')} "
                     f"| {fmt(r.get('large_vs_compile_min'), '.2f')} ({r.get('large_timed', 0)}) "
                     f"| {_ci_cell(r.get('large_vs_compile_ci'))} | {r['large_shapes']} "
                     f"| {fmt(r['large_median'], '.2f')}, {fmt(r['large_min'], '.2f')} "
                     f"| {'yes' if r['meets'] else 'no'} |")
    if missing and missing[0]:
        n, total, ops = missing
        lines += ["", f"Not in this table: {n} of {total} kernels have no current, passing result on this device"
                  + (f"; {len(ops)} ops have none: {', '.join(ops)}." if ops else ".")]
    if stale:
        items = "; ".join(f"{d['op']}/{d['kernel']} {d['objective']:.3f} ({str(d.get('date') or '?')[:10]}; the row: "
                          + (f"{d['row']:.3f})" if d.get("row") is not None else "none)") for d in stale)
        lines += ["", f"Stale verdicts above their op's row: {len(stale)} kernels passed here with a higher objective, "
                  "but their code (or the op's shapes, or the timing method) changed since, so they do not count "
                  f"until `aka kb verify` measures them again: {items}."]
    return "\n".join(lines) + "\n"
