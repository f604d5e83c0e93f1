"""Which problems a suite holds: the bundled benchmark, an Atrex-Bench `data/` folder, a folder
of KernelBench problem files, or KernelBench-X (its checkout, `data/` or `data/kernelbenchx/`
folder, or one category folder); and the importance weight of each."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from aka.kbx import is_kbx_task
from aka.problem import BENCH_OPS, REPO_ROOT, Problem, ProblemError, load_problem

WEIGHTS_FILE = REPO_ROOT / "bench" / "weights.json"


@dataclass
class Suite:
    name: str
    root: Path
    problems: list[Problem]
    weights: dict[str, float]
    weights_source: str
    # (entry name, one-line reason) for every operator that did not load: the rest still list and run
    failed: list[tuple[str, str]] = field(default_factory=list)

    def weight(self, op: str) -> float:
        return self.weights.get(op, 0.0)


def load_suite(path: str | Path | None = None, ops: list[str] | None = None,
               weights_file: str | Path | None = None) -> Suite:
    root = Path(path).expanduser().resolve() if path else BENCH_OPS
    if not root.is_dir():
        raise ProblemError(f"suite not found: {root}")
    for sub in ("data/kernelbenchx", "kernelbenchx"):  # a KernelBench-X checkout or its data/ folder
        if (root / sub).is_dir():
            root = root / sub
            break
    problems: list[Problem] = []
    failed: list[tuple[str, str]] = []
    for entry in _entries(root):
        if entry.is_dir() or is_kbx_task(entry):
            try:
                problems.append(load_problem(entry))
            except ProblemError as e:  # one broken operator must not hide the others
                failed.append((entry.stem, str(e)))
        else:
            try:
                problems.append(load_problem(entry))
            except ProblemError:
                continue  # helper modules in a KernelBench folder
    if ops:
        wanted = set(ops)
        broken = {n: why for n, why in failed if n in wanted}
        if broken:
            n, why = next(iter(broken.items()))
            raise ProblemError(f"requested op {n} does not load: {why}")
        unknown = wanted - {p.name for p in problems}
        if unknown:
            from aka.problem import did_you_mean
            names = [p.name for p in problems]
            named = [u + (f" ({hint})" if (hint := did_you_mean(u, names, sep="")) else "") for u in sorted(unknown)]
            raise ProblemError(f"unknown op(s) in suite {root}: {', '.join(named)}")
        problems, failed = [p for p in problems if p.name in wanted], []
    if not problems:
        why = f": {len(failed)} failed to load, first {failed[0][0]}: {failed[0][1]}" if failed else ""
        raise ProblemError(f"no problems found under {root}{why}")
    weights, source = _weights(problems, root, weights_file)
    return Suite(root.name, root, problems, weights, source, failed)


def _entries(root: Path) -> list[Path]:
    """Operator directories, problem files, and the task files of KernelBench-X's category
    folders (`kernelbenchx/<Category>/<task>.py`: a folder without reference.py, one level down)."""
    out = []
    for entry in sorted(root.iterdir()):
        if entry.is_dir() and (entry / "reference.py").exists():
            out.append(entry)
        elif entry.is_dir():
            out += [f for f in sorted(entry.glob("*.py")) if is_kbx_task(f)]
        elif entry.is_file() and entry.suffix == ".py" and not entry.name.startswith("_"):
            out.append(entry)
    return out


def _weights(problems: list[Problem], root: Path, weights_file) -> tuple[dict[str, float], str]:
    """Weights from a weights file (ours: bench/weights.json, written by `aka bench weigh`), else the
    problems' own importance (Atrex-Bench), else uniform; always normalised to sum to 1."""
    wf = Path(weights_file) if weights_file else (WEIGHTS_FILE if root == BENCH_OPS else root / "weights.json")
    raw: dict[str, float] = {}
    source = "uniform (no weights file, no importance in meta)"
    if wf.exists():
        data = json.loads(wf.read_text())
        raw = {k: float(v) for k, v in data.get("weights", {}).items()}
        source = f"{wf.relative_to(REPO_ROOT) if wf.is_relative_to(REPO_ROOT) else wf}: {data.get('provenance', {}).get('method', 'unknown method')}"
    elif any(p.meta.get("importance") for p in problems):
        raw = {p.name: float(p.meta.get("importance") or 0.0) for p in problems}
        source = "importance from each problem's metadata"
    names = [p.name for p in problems]
    vals = {n: raw.get(n, 0.0) for n in names} if raw else {n: 1.0 for n in names}
    total = sum(vals.values())
    if total <= 0:
        vals, total, source = {n: 1.0 for n in names}, float(len(names)), "uniform (weights summed to 0)"
    return {n: v / total for n, v in vals.items()}, source
