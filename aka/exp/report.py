"""`aka exp report DIR`: REPORT.md, stats.json and three plots from DIR/table.csv alone (plus the
configs `aka exp run` saved beside it)."""
from __future__ import annotations

import json
import platform
import subprocess
from pathlib import Path

import numpy as np

from aka.exp import analysis as an
from aka.exp.table import read_table


def environment(d: Path) -> dict:
    """Where the report was computed, and (`runs`) what the runs themselves ran on, from their best
    results' records: the two differ when a GPU grid is reported on another machine."""
    env = {"python": platform.python_version(), "host": platform.node(), "numpy": np.__version__}
    for mod in ("torch", "triton", "matplotlib"):
        try:
            env[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001  a missing package is reported as missing
            env[mod] = None
    try:
        from aka.problem import REPO_ROOT
        env["git"] = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"],
                                    capture_output=True, text=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        env["git"] = None
    devices, gpus = set(), set()
    ran: dict[str, set] = {"torch": set(), "triton": set(), "python": set(), "git_sha": set(), "driver": set()}
    for ev_path in sorted((d / "runs").glob("*/events.jsonl")):
        first = ev_path.read_text().split("\n", 1)[0]
        try:
            ev = json.loads(first)
        except json.JSONDecodeError:
            continue
        devices.add(str(ev.get("device")))
    for res in sorted((d / "runs").glob("*/best.json")):
        try:
            renv = (json.loads(res.read_text()).get("result") or {}).get("env") or {}
        except json.JSONDecodeError:
            continue
        if renv.get("gpu"):
            gpus.add(renv["gpu"])
        for k in ran:
            v = (renv.get("clocks") or {}).get("driver") if k == "driver" else renv.get(k)
            if v:
                ran[k].add(str(v))
    env["devices"] = sorted(devices)
    env["gpus"] = sorted(gpus)
    env["runs"] = {k: sorted(v) for k, v in ran.items() if v}
    return env


def _spend_axis(rows: list[dict]) -> str:
    if any((r["cost_usd"] or 0) > 0 for r in rows):
        return "cost_usd"
    if any((r["tokens"] or 0) > 0 for r in rows):
        return "tokens"
    return "wall_s"


def plots(rows: list[dict], rs: dict, arms: list[str], rounds: int, category: dict, d: Path) -> list[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    made = []
    x = np.arange(1, rounds + 1)
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    spend = _spend_axis(rows)
    for arm in arms:
        curves = np.array([an.curve(v, rounds) for (a, _, _), v in rs.items() if a == arm])
        if not curves.size:
            continue
        med, lo, hi = np.median(curves, 0), np.quantile(curves, 0.25, 0), np.quantile(curves, 0.75, 0)
        line, = ax[0].plot(x, med, marker="o", ms=3, label=f"{arm} (n={len(curves)})")
        ax[0].fill_between(x, lo, hi, alpha=0.2, color=line.get_color())
        # best-so-far against cumulative spend, on a common grid up to the arm's largest spend
        per = [([r[spend] or 0 for r in v], [r["best_so_far"] for r in v]) for (a, _, _), v in rs.items() if a == arm]
        top = max(max(s) for s, _ in per) or 1.0
        grid = np.linspace(0, top, 50)
        ys = np.array([[max([b for s, b in zip(ss, bs) if s <= g], default=0.0) for g in grid] for ss, bs in per])
        ax[1].plot(grid, np.median(ys, 0), color=line.get_color(), label=arm)
        ax[1].fill_between(grid, np.quantile(ys, 0.25, 0), np.quantile(ys, 0.75, 0), alpha=0.2,
                           color=line.get_color())
    kind = next((r["objective_kind"] for r in rows if r["objective_kind"]), "objective")
    ax[0].set(xlabel="round", ylabel=f"best-so-far ({kind})", title="median over operators x seeds, IQR band")
    ax[1].set(xlabel={"cost_usd": "cumulative cost (USD)", "tokens": "cumulative LLM tokens",
                      "wall_s": "wall time (s)"}[spend], ylabel=f"best-so-far ({kind})", title="against spend")
    ax[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(d / "best_so_far.png", dpi=120)
    plt.close(fig)
    made.append("best_so_far.png")

    fin = an.finals(rs)
    cats = sorted(set(category.values()))
    fig, ax = plt.subplots(figsize=(max(5, 1.6 * len(arms) * max(1, len(cats)) / 2), 4))
    width = 0.8 / max(1, len(cats))
    rng = np.random.default_rng(0)
    for j, cat in enumerate(cats):
        for i, arm in enumerate(arms):
            vals = [v for (a, o, _), v in fin.items() if a == arm and category[o] == cat]
            if not vals:
                continue
            pos = i + (j - (len(cats) - 1) / 2) * width
            ax.boxplot([vals], positions=[pos], widths=width * 0.8, showfliers=False)
            ax.scatter(pos + rng.uniform(-width / 4, width / 4, len(vals)), vals, s=10,
                       color=f"C{j}", label=cat if i == 0 else None, zorder=3)
    ax.set_xticks(range(len(arms)), arms, rotation=20, fontsize=8)
    ax.set(ylabel=f"final best ({kind})", title="final objective per arm, by category (points: runs)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(d / "final_by_arm.png", dpi=120)
    plt.close(fig)
    made.append("final_by_arm.png")

    it = an.iteration(rs, arms, rounds)
    fig, ax = plt.subplots(1, 2, figsize=(11, 3.6))
    for arm in arms:
        pr = it[arm]["per_round"]
        ax[0].plot([p["round"] for p in pr], [p["compiled"] for p in pr], marker="o", ms=3, label=arm)
        ax[1].plot([p["round"] for p in pr], [p["correct"] for p in pr], marker="o", ms=3, label=arm)
    ax[0].set(xlabel="round", ylabel="compile rate", ylim=(-0.05, 1.05), title="candidates that compiled")
    ax[1].set(xlabel="round", ylabel="correctness rate", ylim=(-0.05, 1.05), title="candidates that were correct")
    ax[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(d / "iteration.png", dpi=120)
    plt.close(fig)
    made.append("iteration.png")
    return made


def _mechanism_lines(mech: dict, arms: list[str], arm_cfg: dict) -> list[str]:
    L = ["", "## Mechanisms in the runs", "",
         "What each arm's mechanism did, from the runs' events (an arm that changes nothing is not a result).", "",
         "| arm | runs | runs with a dropout | dropouts | rounds with KB hits in the prompt |", "|---|---|---|---|---|"]
    warn = []
    for arm in arms:
        m = mech[arm]
        L.append(f"| {arm} | {m['runs']} | {m['runs_with_dropout']} | {m['dropouts']} | "
                 f"{m['rounds_with_hits']} of {m['rounds']} |")
        if (arm_cfg.get(arm) or {}).get("dropout", {}).get("enabled") and m["runs"] and not m["dropouts"]:
            warn.append(f"**{arm}: dropout is on but never fired** (no run stalled for its patience): this arm "
                        "measured the dropout-off condition.")
    return L + ([""] + warn if warn else [])


def _incomplete(cells: dict, done: set[str]) -> list[str]:
    """Lines naming the grid's cells without a finished run (never started, cut off, or crashed)."""
    left = [rid for rid in cells if rid not in done]
    if not left:
        return []
    return [f"**{len(left)} of {len(cells)} cells have no finished run** (their rows are left out of every figure below; "
            f"`aka exp run` again resumes them): {', '.join(left[:12])}{' ...' if len(left) > 12 else ''}", ""]


def _mixed_devices(env: dict) -> list[str]:
    """A warning when the runs' best results were timed on more than one GPU model, or some on the
    CPU and some on a GPU: objectives from different devices are not comparable, yet the paired
    tests below pair them as if they were."""
    kinds = list(env.get("gpus") or []) + (["cpu"] if "cpu" in (env.get("devices") or []) else [])
    if len(kinds) < 2:
        return []
    return [f"**Runs were timed on {len(kinds)} devices ({', '.join(kinds)})**: their objectives are not comparable, "
            "and the figures below mix them. Run each device's cells into its own --out.", ""]


def _events(run_dir: Path) -> list[dict]:
    from aka.agent.store import RunStore
    return RunStore(run_dir).events() if run_dir.is_dir() else []


def _arm_configs(d: Path) -> dict:
    """arm -> its resolved optimize config, as `aka exp run` saved it (config/arms.yaml)."""
    import yaml
    p = d / "config" / "arms.yaml"
    if not p.exists():
        return {}
    return {a: v.get("resolved") or {} for a, v in (yaml.safe_load(p.read_text()).get("arms") or {}).items()}


def _ci(e: dict | None) -> str:
    if not e:
        return "-"
    if e.get("lo") is None:
        return f"{e['value']:.3g} (one run)"
    return f"{e['value']:.3g} [{e['lo']:.3g}, {e['hi']:.3g}]"


def _num(v, spec=".3g") -> str:
    return "-" if v is None else format(v, spec)


def _by_operator_lines(by_op: dict, mde: dict | None) -> list[str]:
    done = [t for t in by_op["tests"] if t.get("p") is not None]
    if not done:
        return []
    seed_sd, cell_sd = by_op.get("seed_sd"), (mde or {}).get("sd_log_diff")
    L = ["", "## Operators as the unit", "",
         "The same comparisons over operators (each the mean log-ratio over its seeds; exact sign-flip test, "
         f"Holm over the family). With {done[0]['n']} operators no p-value can be below {done[0]['min_p']:.3g}."]
    if seed_sd is not None and cell_sd:
        replicates = seed_sd < 0.5 * cell_sd
        L += ["", f"Seeds' spread: pooled SD of log final objective within (arm, operator) {seed_sd:.3g}, against "
                  f"{cell_sd:.3g} for the cell-level paired log-differences. "
                  + ("**The seeds are near-replicates of each other: read this table, not the one over cells**, which "
                     "counts each operator once per seed." if replicates else
                     "Seeds vary about as much as pairs do; the test over cells is the design's own.")]
    L += ["", "| b vs a | operators | ratio b/a | per operator | p | p (Holm) |", "|---|---|---|---|---|---|"]
    for t in by_op["tests"]:
        if t.get("p") is None:
            L.append(f"| {t['b']} vs {t['a']} | {t['n']} | - | - | - | - ({t['note']}) |")
        else:
            per = ", ".join(f"{o} {r:.3g}" for o, r in t["per_operator"].items())
            L.append(f"| {t['b']} vs {t['a']} | {t['n']} | {t['ratio']:.3g} | {per} | {t['p']:.3g} | {t['p_holm']:.3g} |")
    return L


def write_report(d: Path, *, baseline: str | None = None, n_boot: int = 4000) -> Path:
    rows = read_table(d / "table.csv")
    if not rows:
        raise ValueError(f"{d / 'table.csv'} has no rows")
    cells = json.loads((d / "cells.json").read_text()) if (d / "cells.json").exists() else {}
    from aka.exp.job import run_state
    done = {rid for rid in cells if run_state(d / "runs" / rid) == "done"}
    if cells:  # a cut-off run's rows are not its outcome: only finished runs enter the statistics
        rows = [r for r in rows if r.get("run_id") in done]
        if not rows:
            raise ValueError(f"{d}: no run of the grid has finished yet")
    rs = an.runs(rows)
    arms = an.arm_order(rows)
    if baseline and baseline not in arms:
        from aka.errors import UserError
        raise UserError(f"--baseline {baseline}: no such arm (arms: {', '.join(arms)})")
    rounds = max(r["round"] for r in rows)
    try:
        import yaml
        exp = yaml.safe_load((d / "config" / "exp.yaml").read_text())
        rounds = max(rounds, int(exp["budget"]["rounds"]))
    except (OSError, KeyError, TypeError, ValueError):
        exp = None
    category = {r["operator"]: r["category"] for r in rows}
    fin = an.finals(rs)
    summ = an.summaries(fin, arms, n_boot)
    tests = an.paired(fin, arms, baseline)
    decomp = an.decomposition(fin, category)
    mde = an.detectable(tests)
    by_op = an.paired_by_operator(fin, arms, baseline)
    it = an.iteration(rs, arms, rounds)
    kept = {rid: c for rid, c in cells.items() if rid in {r["run_id"] for r in rows}}
    mech = an.mechanisms({rid: _events(d / "runs" / rid) for rid in kept}, kept, arms)
    arm_cfg = _arm_configs(d)
    env = environment(d)
    made = plots(rows, rs, arms, rounds, category, d)
    (d / "stats.json").write_text(json.dumps({"summaries": summ, "paired": tests, "paired_by_operator": by_op,
                                              "variance": decomp, "mde": mde,
                                              "iteration": it, "mechanisms": mech, "environment": env, "floor": an.FLOOR}, indent=1))
    kind = next((r["objective_kind"] for r in rows if r["objective_kind"]), "objective")
    L = [f"# Experiment {exp.get('name') if exp else d.name}", "",
         f"{len(rs)} runs: {len(arms)} arms x {len(category)} operators x "
         f"{len({s for _, _, s in rs})} seeds, {rounds} rounds each. Outcome: each run's final best-so-far "
         f"objective ({kind}). Statistics on the log scale; a run that found nothing counts as {an.FLOOR:g} there.",
         "", *_incomplete(cells, done), *_mixed_devices(env), "## Arms", "", "| arm | runs | no passing kernel | median [95% CI] | geomean [95% CI] |",
         "|---|---|---|---|---|"]
    for arm in arms:
        s = summ[arm]
        L.append(f"| {arm} | {s['runs']} | {s['at_floor']} | {_ci(s.get('median'))} | {_ci(s.get('geomean'))} |")
    L += ["", "Percentile bootstrap, " + f"{n_boot} resamples over runs."]
    if cells:
        L += _mechanism_lines(mech, arms, arm_cfg)
    L += ["", "## Paired comparisons", "",
          "Pairs are (operator, seed) cells both arms ran; the test is a sign-flip permutation test of the mean "
          "log-ratio (aka/exp/stats.py says why), p-values Holm-adjusted over the family.", "",
          "| b vs a | pairs | ratio b/a (geomean) | wins / losses / ties | p | p (Holm) |", "|---|---|---|---|---|---|"]
    for t in tests:
        if t.get("p") is None:
            L.append(f"| {t['b']} vs {t['a']} | {t['n']} | - | - | - | - ({t['note']}) |")
        else:
            L.append(f"| {t['b']} vs {t['a']} | {t['n']} | {t['ratio']:.3g} | {t['wins']} / {t['losses']} / "
                     f"{t['ties']} | {t['p']:.3g} | {t['p_holm']:.3g} |")
    if mde:
        L += ["", f"**Smallest detectable effect**: a ratio of {mde['mde_ratio']:.3g} (log {mde['mde_log']:.3g}) "
              f"between two arms, with {mde['n_pairs']} pairs, SD of paired log-differences {mde['sd_log_diff']:.3g} "
              f"({mde['sd_source']}), two-sided alpha {mde['alpha']} / {mde['comparisons']} comparisons, "
              f"power {mde['power']}. Smaller true effects are likely to be missed by this design."]
    L += _by_operator_lines(by_op, mde)
    if decomp:
        sh = decomp["share"]
        L += ["", "## Variance decomposition", "",
              f"Shares of the total sum of squares of log final objective (n = {decomp['n']}, "
              f"{decomp['levels']['category']} categories, {decomp['levels']['method']} arms; type I, category first). "
              "KernelBench-X reported category 9.4% vs method 3.3%.", "",
              "| category | method (arm) | interaction | residual |", "|---|---|---|---|",
              f"| {sh['category']:.1%} | {sh['method']:.1%} | {sh['interaction']:.1%} | {sh['residual']:.1%} |"]
    L += ["", "## Iteration analysis", "",
          "Compile and correctness rates per round over every candidate of the round (iteration.png). "
          "Speedup over eager of each run's first correct kernel, split by whether the run's first candidate "
          "was correct (KernelBench-X: 1.58x at first try vs 1.16x fixed later). On the CPU no kernel is timed.", "",
          "| arm | correct at first try: runs, speedup | fixed later: runs, speedup | compile rate r1 -> last | "
          "correct rate r1 -> last |", "|---|---|---|---|---|"]
    for arm in arms:
        i = it[arm]
        pr = i["per_round"]
        rate = (lambda k: f"{pr[0][k]:.2f} -> {pr[-1][k]:.2f}" if pr else "-")
        L.append(f"| {arm} | {i['first_try_runs']}, {_num(i['first_try_speedup'])} | {i['fixed_later_runs']}, "
                 f"{_num(i['fixed_later_speedup'])} | {rate('compiled')} | {rate('correct')} |")
    L += ["", "## Plots", ""] + [f"![{m}]({m})" for m in made]
    L += ["", "## Environment", "", "Top level: where this report was computed; `runs`: what the runs' best results "
          "record they ran on (torch, triton, Python, source commit, driver).", "",
          "```json", json.dumps(env, indent=1), "```"]
    L += ["", "Every run's own resolved config is `runs/<run id>/config.yaml` (the arm's below, with the cell's "
          "op and seed)."]
    for name in ("exp.yaml", "arms.yaml"):
        p = d / "config" / name
        if p.exists():
            L += ["", f"## Resolved config: config/{name}", "", "```yaml", p.read_text().rstrip(), "```"]
    out = d / "REPORT.md"
    out.write_text("\n".join(L) + "\n")
    return out
