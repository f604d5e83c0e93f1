"""One grid cell: one `aka optimize` run, called by an executor job (aka/executors.py) in its own
process. It takes the path the command line and `aka.agent.api.optimize` take
(aka.agent.cli.execute: config dump, proposer, retriever, loop, report) with the cell's resolved
config as given, writes its run store under the experiment's runs/, and resumes a run that was cut
off; it returns aka.agent.api's summary."""
from __future__ import annotations

import io
import json
from pathlib import Path


def run_state(root: Path) -> str:
    """'done' (a stop event), 'partial' (started, no stop) or 'new'."""
    ev = root / "events.jsonl"
    if not ev.exists():
        return "new"
    for line in ev.read_text().splitlines():
        try:
            if json.loads(line).get("type") == "stop":
                return "done"
        except json.JSONDecodeError:
            break
    return "partial"


def run_cell(config: dict, runs_dir: str, run_id: str) -> dict:
    from rich.console import Console

    from aka.agent.api import summary
    from aka.agent.cli import execute
    from aka.agent.config import from_dict
    from aka.agent.shapes import task_shapes
    from aka.agent.store import RunStore
    from aka.evaluate.api import resolve_device
    from aka.problem import load_problem

    root = Path(runs_dir) / run_id
    state = run_state(root)
    if state == "done":
        return {"run_id": run_id, "state": "done", "skipped": True}
    cfg = from_dict(dict(config, runs_dir=str(runs_dir), run_id=run_id))
    problem = load_problem(cfg.op)
    device = resolve_device(None if cfg.eval.device == "auto" else cfg.eval.device)
    task = task_shapes(problem, cfg.shape, device, cfg.eval.cpu_max_elems)
    store = RunStore.open(runs_dir, run_id) if state == "partial" else RunStore.create(runs_dir, run_id)
    log = io.StringIO()
    try:
        outcome = execute(cfg, store, problem, task, Console(file=log, soft_wrap=True, width=120),
                          resumed=state == "partial")
    finally:
        (root / "console.log").write_text(log.getvalue())
    out = summary(store, problem, task, cfg, outcome)
    if out.get("best"):
        out["best"].pop("source", None)  # the kernel is in the run store; results.jsonl stays small
    return dict(out, state=run_state(root), resumed=state == "partial", skipped=False)
