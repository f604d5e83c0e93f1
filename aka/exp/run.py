"""`aka exp run CONFIG`: the grid through the executors of aka/executors.py, one job per cell.

Layout of the output directory (default experiments/runs/<name>/):

    config/exp.yaml          the composed experiment config; config/files.txt the YAML files composed
    config/arms.yaml         every arm's resolved OptimizeConfig (first operator and seed; op and seed vary)
    probe.json               what each arm's proposer sees in round 1 (aka/exp/probe.py)
    cells.json               run id -> arm, operator, seed
    runs/<run id>/           each cell's run store (aka optimize's layout)
    results.jsonl            one JobResult per finished job, appended as it ends
    table.csv                the long-format table (aka/exp/table.py), rebuilt after every job

Resumable: a cell whose run has a stop event is not run again, and one cut off resumes from its
store; the table is always rebuilt from the stores.
"""
from __future__ import annotations

import json
import re
import time
from pathlib import Path

import yaml

from aka.agent.config import ConfigError
from aka.exp.config import ExpConfig, check_distinct

CPU_JOB_TIMEOUT_S = 6 * 3600


def out_dir_for(ex: ExpConfig, out: str | Path | None = None) -> Path:
    from aka.problem import REPO_ROOT
    return Path(out or ex.out_dir or REPO_ROOT / "experiments" / "runs" / ex.name)


def run_id_for(arm: str, op: str, seed: int) -> str:
    return re.sub(r"[^A-Za-z0-9_.=+-]+", "_", f"{arm}__{op}__s{seed}")


def write_configs(ex: ExpConfig, out: Path, overrides: list | None) -> None:
    d = out / "config"
    d.mkdir(parents=True, exist_ok=True)
    (d / "exp.yaml").write_text(yaml.safe_dump(ex.raw, sort_keys=False))
    (d / "files.txt").write_text("\n".join(ex.files) + "\n")
    arms = {a.name: {"describe": a.describe(), "layer": a.layer(),
                     "resolved": ex.optimize_config(a, ex.operators[0], ex.seeds[0], overrides).to_dict()}
            for a in ex.arms}
    (d / "arms.yaml").write_text(yaml.safe_dump({"overrides": [list(o) for o in overrides or []], "arms": arms},
                                                sort_keys=False))


def cell_map(ex: ExpConfig) -> dict[str, dict]:
    return {run_id_for(a.name, op, s): {"arm": a.name, "operator": op, "seed": s} for a, op, s in ex.cells()}


def collect(out: Path, cells: dict[str, dict]) -> list[dict]:
    from aka.exp.table import run_rows
    from aka.problem import load_problem
    cats: dict[str, str] = {}
    rows = []
    for rid, c in cells.items():
        root = out / "runs" / rid
        if not root.is_dir():
            continue
        if c["operator"] not in cats:
            cats[c["operator"]] = load_problem(c["operator"]).category or "unknown"
        rows += run_rows(root, c["arm"], c["operator"], cats[c["operator"]], c["seed"])
    return rows


def same_config(run_dir: Path, cfg) -> bool:
    """Whether a run's saved config.yaml is the cell's resolved config (where it lives aside)."""
    p = run_dir / "config.yaml"
    if not p.exists():
        return True  # created, nothing run yet: the job writes it
    saved = yaml.safe_load(p.read_text()) or {}
    mine = cfg.to_dict()
    skip = ("runs_dir", "run_id", "live")
    return {k: v for k, v in saved.items() if k not in skip} == {k: v for k, v in mine.items() if k not in skip}


def make_grid_executor(ex: ExpConfig, out: Path):
    from aka.executors import make_executor
    opts = {k: v for k, v in ex.executor.items() if k not in ("kind", "timeout_s")}
    kind = ex.executor.get("kind", "local")
    if kind == "local":
        opts.setdefault("log_dir", str(out / "logs"))
    return make_executor(kind, **opts)


def run_experiment(ex: ExpConfig, *, overrides: list | None = None, out: str | Path | None = None,
                   executor=None, probe: bool = True, progress=print) -> Path:
    from aka.executors import Job
    from aka.exp.job import run_state
    from aka.exp.probe import check_arms
    from aka.exp.table import write_table

    out = out_dir_for(ex, out)
    check_distinct(ex, overrides)
    write_configs(ex, out, overrides)
    if probe:
        views = check_arms(ex, overrides, progress=progress)
        (out / "probe.json").write_text(json.dumps(views, indent=1))
    cells = cell_map(ex)
    (out / "cells.json").write_text(json.dumps(cells, indent=1))
    runs_dir = out / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    jobs, done, changed = [], 0, []
    timeout = ex.executor.get("timeout_s", CPU_JOB_TIMEOUT_S)
    for a, op, s in ex.cells():
        rid = run_id_for(a.name, op, s)
        cfg = ex.optimize_config(a, op, s, overrides)
        state = run_state(runs_dir / rid)
        if state != "new" and not same_config(runs_dir / rid, cfg):
            changed.append(rid)
        if state == "done":
            done += 1
            continue
        gpus = 0.0 if cfg.eval.device == "cpu" else 1.0
        jobs.append(Job(rid, "aka.exp.job:run_cell", {"config": cfg.to_dict(), "runs_dir": str(runs_dir),
                                                       "run_id": rid},
                        gpus=gpus, timeout_s=timeout))
    if changed:
        raise ConfigError(f"{len(changed)} cell(s) in {out} ran under another config than this one resolves to "
                          f"({', '.join(changed[:4])}{' ...' if len(changed) > 4 else ''}): results of two designs "
                          "would mix; use a new --out")
    total = len(cells)
    progress(f"{ex.name}: {total} cells ({len(ex.arms)} arms x {len(ex.operators)} operators x {len(ex.seeds)} "
             f"seeds), {done} already done, {len(jobs)} to run -> {out}")
    t0 = time.monotonic()
    finished = [done]

    def on_result(res) -> None:
        finished[0] += 1
        with open(out / "results.jsonl", "a") as f:
            f.write(json.dumps(res.to_dict(), default=str) + "\n")
        write_table(collect(out, cells), out / "table.csv")
        why = "" if res.ok else f": {str(res.error).splitlines()[0][:160]}"
        progress(f"[{finished[0]}/{total}] {res.id} {'ok' if res.ok else 'FAILED'} in {res.wall_s:.0f} s "
                 f"({time.monotonic() - t0:.0f} s elapsed){why}")

    if jobs:
        (executor or make_grid_executor(ex, out)).run(jobs, on_result)
    write_table(collect(out, cells), out / "table.csv")
    return out
