"""The kernel library: what `aka convert` has converted, one directory per operator.

    LIBRARY/
      fallbacks.json            the ranked fallback table of the last `aka convert` (what was asked for)
      batch.jsonl               every job's JobResult, appended and fsynced as each job ends
      <name>/                   one per operator (names below are reserved)
        status.json             state: pass | no_kernel | failed, and why; written last
        kernel.py               the verified kernel (state pass only)
        result.json             its EvalResult: status and one record per shape
        provenance.json         GPU, device, versions, git sha, proposer/model, cost, wall, worker, run
        problem/                a copy of the operator directory it was verified against
      runs/<run id>/            the optimize runs (local executor; on a cluster, on the worker's disk)
      logs/                     the local executor's worker logs
      problems/                 operator directories extracted from a model or a trace

An operator is done when its status.json says pass or no_kernel (the search ran to its stop);
a failed one (the job raised, crashed or timed out) is tried again by the next `aka convert`.
status.json is written after the other files, atomically, so a batch killed while recording
leaves the operator not done rather than half done.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from aka.util import atomic_write_json

DONE_STATES = ("pass", "no_kernel")
RESERVED = ("runs", "logs", "problems")
PROBLEM_FILES = ("reference.py", "input.py", "shapes.json", "meta.json")


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


@dataclass
class Entry:
    name: str
    state: str
    status: dict
    result: dict | None        # EvalResult JSON (pass only)
    provenance: dict
    kernel_path: Path | None


class Library:
    def __init__(self, root: str | Path):
        self.root = Path(root)

    def op_dir(self, name: str) -> Path:
        if not name or "/" in name or name.startswith(".") or name in RESERVED:
            raise ValueError(f"bad operator name {name!r} for a library directory (reserved: {', '.join(RESERVED)})")
        return self.root / name

    @property
    def runs_dir(self) -> Path:
        return self.root / "runs"

    def status(self, name: str) -> dict | None:
        p = self.op_dir(name) / "status.json"
        try:
            return json.loads(p.read_text())
        except (OSError, ValueError):
            return None

    def exists(self) -> bool:
        return (self.root / "fallbacks.json").is_file() or any(self.root.glob("*/status.json"))

    def is_done(self, name: str) -> bool:
        st = self.status(name)
        return st is not None and st.get("state") in DONE_STATES

    # -- writing ------------------------------------------------------------------------------
    def write_fallbacks(self, rows: list[dict], source: str) -> Path:
        return atomic_write_json(self.root / "fallbacks.json",
                                 {"source": source, "written": now(), "fallbacks": rows}, indent=1)

    def fallbacks(self) -> list[dict]:
        try:
            return json.loads((self.root / "fallbacks.json").read_text())["fallbacks"]
        except (OSError, ValueError, KeyError):
            return []

    def append_log(self, record: dict) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / "batch.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(record, default=str) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def record(self, name: str, job_result, problem_dir: str | Path, *, model: str | None = None,
               share: float | None = None) -> str:
        """File one job's outcome under ops/<name>/; returns the state written."""
        res = job_result
        self.append_log({"name": name, "at": now(), **res.to_dict()})
        d = self.op_dir(name)
        d.mkdir(parents=True, exist_ok=True)
        prob = d / "problem"
        src = Path(problem_dir)
        prob.mkdir(exist_ok=True)
        if src.is_dir():
            for f in PROBLEM_FILES:
                if (src / f).is_file():
                    shutil.copyfile(src / f, prob / f)
        elif src.is_file():  # a KernelBench single file
            shutil.copyfile(src, prob / src.name)
        summary = res.value if res.ok and isinstance(res.value, dict) else None
        best = (summary or {}).get("best")
        if summary is None:
            state, why = "failed", (res.error or "the job returned no summary").strip()
        elif best is None:
            state, why = "no_kernel", f"no candidate passed ({summary.get('stop_kind')}: {summary.get('reason')})"
        else:
            state, why = "pass", f"{best['candidate']} passed ({summary.get('stop_kind')}: {summary.get('reason')})"
        for stale in ("kernel.py", "result.json"):
            (d / stale).unlink(missing_ok=True)  # a re-run that fails must not leave an older kernel looking current
        if best is not None:
            (d / "kernel.py").write_text(best["source"])
            atomic_write_json(d / "result.json", best["result"], indent=1)
        atomic_write_json(d / "provenance.json", provenance(name, res, summary, model, problem_dir), indent=1)
        atomic_write_json(d / "status.json", {
            "name": name, "state": state, "why": why[:4000], "problem": str(problem_dir), "share": share,
            "run_dir": (summary or {}).get("run_dir"), "attempts": res.attempts, "updated": now()}, indent=1)
        return state

    # -- reading ------------------------------------------------------------------------------
    def entries(self) -> list[Entry]:
        out = []
        dirs = [d for d in self.root.iterdir() if d.is_dir() and d.name not in RESERVED] if self.root.is_dir() else []
        for d in sorted(dirs):
            st = self.status(d.name)
            if st is None:
                continue
            result = _read(d / "result.json")
            kernel = d / "kernel.py"
            out.append(Entry(d.name, st.get("state", "failed"), st, result, _read(d / "provenance.json") or {},
                             kernel if kernel.is_file() else None))
        return out


def _read(p: Path) -> dict | None:
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None


def provenance(name: str, res, summary: dict | None, model: str | None, problem_dir) -> dict:
    s = summary or {}
    best = s.get("best") or {}
    env = (best.get("result") or {}).get("env") or {}
    usage = s.get("usage") or {}
    return {
        "name": name, "problem": str(problem_dir), "recorded": now(),
        "device": s.get("device"), "gpu": env.get("gpu"), "clocks": env.get("clocks"),
        "torch": env.get("torch"), "triton": env.get("triton"), "python": env.get("python"),
        "git_sha": env.get("git_sha"), "model": s.get("model", model), "proposer_meta": best.get("meta"),
        "techniques": best.get("techniques"), "cost_usd": usage.get("cost_usd"),
        "llm_calls": usage.get("calls"), "input_tokens": usage.get("input_tokens"),
        "output_tokens": usage.get("output_tokens"), "evaluations": s.get("evaluations"),
        "rounds": s.get("rounds"), "run_id": s.get("run_id"), "run_dir": s.get("run_dir"),
        "shapes": s.get("shapes"), "requested_shapes": s.get("requested_shapes"), "note": s.get("note"),
        "worker": res.worker, "attempts": res.attempts, "job_wall_s": res.wall_s,
        "search_wall_s": s.get("wall_s"),
    }
