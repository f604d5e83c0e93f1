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


def unresumable(root: Path) -> str | None:
    """Why a partial run store cannot be resumed, or None: an evaluated candidate's record without
    its source (a resumed run re-reads its incumbent's and its last round's kernels; a proposal
    that did not parse has a record and no source, rightly). On the H200 (2026-12-03)
    seven cells copied from a results folder, which keeps run stores without candidate sources,
    each failed its resume with "candidate not found"."""
    from aka.agent.store import RunStore
    if not (root / "candidates").is_dir():
        return None
    try:
        cands = RunStore(root).candidates()
    except (OSError, ValueError, KeyError, TypeError):   # a record cut mid-write: not a store to build on
        return "a candidate record cannot be read"
    missing = [c.id for c in cands if c.result is not None and c.source is None]
    return f"candidate source(s) missing: {', '.join(missing[:4])}{' ...' if len(missing) > 4 else ''}" if missing else None


def other_device(root: Path, device: str) -> str | None:
    """Why a partial run store timed on another device (another GPU model, or the CPU) cannot be
    resumed here, or None: its incumbent's times would be compared with this device's."""
    from aka.agent.cli import hardware_in_hand
    from aka.agent.store import RunStore
    ran_on = RunStore(root).measured_on()
    here = hardware_in_hand(device)
    return f"timed on {ran_on}, this device is {here}" if ran_on is not None and ran_on != here else None


def set_aside(root: Path, why: str) -> Path:
    """Move a run store that cannot resume out of the way (kept, never deleted), so its cell starts
    anew under the same config and seed; returns where it went."""
    import time
    dest = root.with_name(f"{root.name}.unresumable-{time.strftime('%Y%m%d-%H%M%S')}")
    root.rename(dest)
    (dest / "SET_ASIDE.txt").write_text(f"set aside by aka exp run: {why}\n")
    return dest


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
    restarted = None
    cfg = from_dict(dict(config, runs_dir=str(runs_dir), run_id=run_id))
    device = resolve_device(None if cfg.eval.device == "auto" else cfg.eval.device)
    why = (unresumable(root) or other_device(root, device)) if state == "partial" else None
    if why:
        restarted = {"why": why, "old_store": str(set_aside(root, why))}
        state = "new"
    problem = load_problem(cfg.op)
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
    return dict(out, state=run_state(root), resumed=state == "partial", skipped=False,
                **({"restarted": restarted} if restarted else {}))
