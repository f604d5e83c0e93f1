"""The run store: `runs/<id>/`, written as the run goes so a crash loses nothing.

    config.yaml              the resolved OptimizeConfig
    events.jsonl             append-only, one JSON object per line, flushed and fsynced per event
    candidates/cNNNN.py      every proposed source that parsed
    candidates/cNNNN.json    its record: round, parent, techniques, proposer meta, score, EvalResult
    prompts/rNNN.md          what the model was sent (LLM proposer)
    best.py, best.json       the incumbent, rewritten on every acceptance
    totals.json              LLM usage and wall time so far, rewritten after every round
    report.md, progress.png, kernel_module.py, reference.py   at the end (aka/agent/report.py)

`resume` rebuilds the state from these files alone (see `State.from_store`).
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from aka.agent.objective import Score
from aka.evaluate.result import EvalResult


class StoreError(ValueError):
    """A run directory that cannot be created or resumed; the message is for the user."""


@dataclass
class Candidate:
    id: str
    round: int
    source: str | None
    kind: str | None                   # whole | edit | offline | None (no usable code)
    parent: str | None = None
    techniques: list[str] = field(default_factory=list)
    meta: dict = field(default_factory=dict)   # proposer-specific: offline family and params, tokens
    error: str | None = None           # why the proposal never reached the harness
    result: EvalResult | None = None
    score: Score | None = None
    accepted: bool = False

    @property
    def status(self) -> str:
        return self.result.status if self.result else "invalid"

    def record(self) -> dict:
        d = {k: v for k, v in asdict(self).items() if k not in ("source", "result", "score")}
        d["score"] = self.score.to_json() if self.score else None
        d["result"] = self.result.to_json() if self.result else None
        return d

    @classmethod
    def from_record(cls, d: dict, source: str | None) -> "Candidate":
        c = cls(**{k: d[k] for k in ("id", "round", "kind", "parent", "techniques", "meta", "error", "accepted")},
                source=source)
        c.result = EvalResult.from_json(d["result"]) if d.get("result") else None
        c.score = Score.from_json(d.get("score"))
        return c


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def new_run_id(op: str) -> str:
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', Path(op).name or 'op')}-{stamp}"


class RunStore:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.cand_dir = self.root / "candidates"
        self.events_path = self.root / "events.jsonl"

    # -- creation -----------------------------------------------------------------------
    @classmethod
    def create(cls, runs_dir: str | Path, run_id: str) -> "RunStore":
        root = Path(runs_dir) / run_id
        if (root / "events.jsonl").exists():
            raise StoreError(f"run {root} already exists: `aka optimize resume={run_id}` continues it")
        (root / "candidates").mkdir(parents=True, exist_ok=True)
        (root / "prompts").mkdir(exist_ok=True)
        return cls(root)

    @classmethod
    def open(cls, runs_dir: str | Path, run: str) -> "RunStore":
        p = Path(run)
        root = p if (p / "events.jsonl").exists() else Path(runs_dir) / run
        if not (root / "events.jsonl").exists():
            raise StoreError(f"no run {run!r} (looked for {root}/events.jsonl)")
        return cls(root)

    @property
    def run_id(self) -> str:
        return self.root.name

    # -- writing ------------------------------------------------------------------------
    def event(self, type_: str, **data) -> dict:
        ev = {"t": now(), "type": type_, **data}
        line = json.dumps(ev, default=str, allow_nan=False)
        with open(self.events_path, "a") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())
        return ev

    def _write(self, path: Path, text: str) -> None:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, path)  # atomic on POSIX: a crash leaves the old file or the new one

    def save_candidate(self, c: Candidate) -> None:
        if c.source is not None:
            self._write(self.cand_dir / f"{c.id}.py", c.source)
        self._write(self.cand_dir / f"{c.id}.json", json.dumps(c.record(), indent=1, allow_nan=False))

    def candidate_path(self, cid: str) -> Path:
        return self.cand_dir / f"{cid}.py"

    def save_best(self, c: Candidate) -> None:
        self._write(self.root / "best.py", c.source or "")
        self._write(self.root / "best.json", json.dumps(c.record(), indent=1, allow_nan=False))

    def save_prompt(self, round_no: int, system: str, messages: list) -> None:
        parts = [f"<!-- system -->\n{system}"] + [f"<!-- {m.role} -->\n{m.content}" for m in messages]
        self._write(self.root / "prompts" / f"r{round_no:03d}.md", "\n\n".join(parts))

    def save_totals(self, totals: dict) -> None:
        self._write(self.root / "totals.json", json.dumps(totals, indent=1, default=str))

    def write_text(self, name: str, text: str) -> Path:
        p = self.root / name
        self._write(p, text)
        return p

    # -- reading ------------------------------------------------------------------------
    def events(self) -> list[dict]:
        out = []
        if self.events_path.exists():
            for line in self.events_path.read_text().splitlines():
                if line.strip():
                    try:
                        out.append(json.loads(line))
                    except json.JSONDecodeError:
                        break  # a line cut by a crash: everything before it is intact
        return out

    def candidates(self) -> list[Candidate]:
        out = []
        for p in sorted(self.cand_dir.glob("c*.json")):
            d = json.loads(p.read_text())
            src = self.cand_dir / f"{d['id']}.py"
            out.append(Candidate.from_record(d, src.read_text() if src.exists() else None))
        return out

    def measured_on(self) -> str | None:
        """What the run's evaluations were timed on: the GPU model its first evaluated candidate's
        record names ("cpu" for an interpreter run), None before any evaluation."""
        for p in sorted(self.cand_dir.glob("c*.json")):
            try:
                env = ((json.loads(p.read_text()).get("result") or {}).get("env")) or {}
            except (OSError, json.JSONDecodeError):
                continue
            if env.get("gpu"):
                return str(env["gpu"])
            if env.get("device") == "cpu":
                return "cpu"
        return None

    def totals(self) -> dict:
        p = self.root / "totals.json"
        return json.loads(p.read_text()) if p.exists() else {}
