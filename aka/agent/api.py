"""`optimize()`: one `aka optimize` run as a function call returning a JSON summary.

The same path as the CLI (config, overrides, shapes, run store, loop, report), for callers that run
many operators (`aka convert`, through an executor) and need the outcome as data. The summary
carries the best kernel's source and EvalResult, so a caller on another machine (a Ray cluster)
gets the result without reading this machine's run directory.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from aka.llm import BudgetedLLM, FatalLLMError, ScriptedLLM


def scripted_llm(spec: str, op_name: str, budget=None):
    """`scripted:<file.json>`: a ScriptedLLM replaying the file's replies, a JSON list of strings
    (every operator gets the same script) or an object mapping an operator's name to its list.
    For tests and demos of the LLM path through processes that cannot share a Python object."""
    path = Path(spec.split(":", 1)[1])
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise FatalLLMError(f"scripted model {path}: {e}") from None
    if isinstance(data, dict):
        if op_name not in data:
            raise FatalLLMError(f"scripted model {path} has no replies for {op_name} (has {', '.join(data)})")
        data = data[op_name]
    if not isinstance(data, list) or not all(isinstance(r, str) for r in data):
        raise FatalLLMError(f"scripted model {path}: expected a list of reply strings")
    llm = ScriptedLLM(data, model="scripted", provider="scripted")
    return BudgetedLLM(llm, budget) if budget is not None else llm


def optimize(op: str, *, shape: str = "all", model: str = "offline", iters: int | None = None,
             device: str | None = None, runs_dir: str = "runs", run_id: str | None = None,
             config_files: list[str] = (), overrides: dict | None = None, quiet: bool = True) -> dict:
    """Run the loop on `op` and return its summary (JSON). Bad input raises the CLI's errors
    (ConfigError, ProblemError, StoreError, FatalLLMError); the caller decides what they mean."""
    from rich.console import Console

    from aka.agent.cli import execute
    from aka.agent.config import load_config, set_path, validate
    from aka.agent.shapes import task_shapes
    from aka.agent.store import RunStore, new_run_id
    from aka.evaluate.api import resolve_device
    from aka.problem import load_problem

    cfg = load_config(list(config_files))
    pairs = {"op": op, "shape": shape, "model": model, "runs_dir": runs_dir, "live": "off"}
    if iters is not None:
        pairs["budget.iterations"] = str(iters)
    if device is not None:
        pairs["eval.device"] = device
    if run_id is not None:
        pairs["run_id"] = run_id
    pairs.update({k: str(v) if not isinstance(v, str) else v for k, v in (overrides or {}).items()})
    for k, v in pairs.items():
        set_path(cfg, k, v)
    validate(cfg)
    problem = load_problem(cfg.op)
    dev = resolve_device(None if cfg.eval.device == "auto" else cfg.eval.device)
    task = task_shapes(problem, cfg.shape, dev, cfg.eval.cpu_max_elems)
    store = RunStore.create(cfg.runs_dir, cfg.run_id or new_run_id(cfg.op))
    console = Console(file=sys.stderr, quiet=quiet, soft_wrap=True)
    outcome = execute(cfg, store, problem, task, console, overrides=pairs)
    return summary(store, problem, task, cfg, outcome)


def summary(store, problem, task, cfg, outcome) -> dict:
    inc = outcome.incumbent
    totals_path = store.root / "totals.json"
    totals = json.loads(totals_path.read_text()) if totals_path.exists() else {}
    return {
        "run_id": store.run_id, "run_dir": str(store.root), "problem": str(problem.root), "op": problem.name,
        "device": task.device, "shapes": task.ids, "requested_shapes": [s.id for s in task.requested],
        "note": task.note, "model": cfg.model, "stop_kind": outcome.stop_kind, "reason": outcome.reason,
        "rounds": outcome.rounds, "passed": inc is not None,
        "best": None if inc is None else {
            "candidate": inc.id, "source": inc.source, "objective": inc.score.value if inc.score else None,
            "objective_kind": inc.score.kind if inc.score else None, "result": inc.result.to_json(),
            "meta": inc.meta, "techniques": inc.techniques},
        "usage": totals.get("usage", {}), "wall_s": totals.get("wall_s"),
        "evaluations": totals.get("evaluations"), "host": os.uname().nodename,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }
