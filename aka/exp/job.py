"""One grid cell: one `aka optimize` run, called by an executor job (aka/executors.py) in its own
process. It goes through the same entry point as the command line (aka.agent.cli.run_optimize),
writes its run store under the experiment's runs/, and resumes a run that was cut off."""
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


def scripted_llm(replies: list[str], rounds: int, n: int):
    """The scripted LLM for CI grids: the replies in order, repeated to cover every sample."""
    from aka.llm.scripted import ScriptedLLM
    need = max(1, rounds * n)
    return ScriptedLLM([replies[i % len(replies)] for i in range(need)])


def run_cell(config: dict, runs_dir: str, run_id: str, scripted_replies: list[str] | None = None) -> dict:
    from rich.console import Console

    from aka.agent.cli import run_optimize
    from aka.agent.config import from_dict
    from aka.agent.shapes import task_shapes
    from aka.agent.store import RunStore
    from aka.evaluate.api import resolve_device
    from aka.problem import load_problem

    root = Path(runs_dir) / run_id
    state = run_state(root)
    if state == "done":
        return {"run_id": run_id, "state": "done", "resumed": False, "skipped": True}
    cfg = from_dict(dict(config, runs_dir=str(runs_dir), run_id=run_id))
    problem = load_problem(cfg.op)
    device = resolve_device(None if cfg.eval.device == "auto" else cfg.eval.device)
    task = task_shapes(problem, cfg.shape, device, cfg.eval.cpu_max_elems)
    store = RunStore.open(runs_dir, run_id) if state == "partial" else RunStore.create(runs_dir, run_id)
    llm = scripted_llm(scripted_replies, cfg.budget.iterations, cfg.n) if scripted_replies else None
    log = io.StringIO()
    console = Console(file=log, soft_wrap=True, width=120)
    rc = run_optimize(cfg, store, problem, task, console, resumed=state == "partial", llm=llm)
    (root / "console.log").write_text(log.getvalue())
    return {"run_id": run_id, "state": run_state(root), "resumed": state == "partial", "skipped": False, "rc": rc}
