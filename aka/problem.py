"""Problems: an operator directory (ours or Atrex-Bench's), a KernelBench single file
(aka/kernelbench.py) or a KernelBench-X task file (aka/kbx.py).

Only file discovery and validation happen here; the modules themselves are imported inside the
evaluation worker (aka/evaluate/loader.py), never in the parent process.
"""
from __future__ import annotations

import ast
import json
from dataclasses import dataclass, field
from pathlib import Path
from aka.util import parse_py

REPO_ROOT = Path(__file__).resolve().parent.parent
BENCH_OPS = REPO_ROOT / "bench" / "ops"


class ProblemError(ValueError):
    """Bad problem input: the message is one line meant for the user."""


@dataclass
class ShapeCase:
    id: str
    init_kwargs: dict = field(default_factory=dict)
    input_kwargs: dict = field(default_factory=dict)
    info: dict = field(default_factory=dict)  # provenance: model, phase, tokens, tp, weight

    @property
    def weight(self) -> float:
        return float(self.info.get("weight", 1.0))

    def label(self) -> str:
        if self.info.get("label"):
            return str(self.info["label"])
        kw = {**self.input_kwargs}
        return ",".join(f"{k}={v}" for k, v in kw.items() if not isinstance(v, (dict, list)))

    def to_json(self) -> dict:
        return {"id": self.id, "init_kwargs": self.init_kwargs, "input_kwargs": self.input_kwargs}


@dataclass
class Problem:
    name: str
    kind: str  # "opdir" (ours), "atrex" (Atrex-Bench layout), "kernelbench" (single file), "kbx" (KernelBench-X task)
    root: Path
    reference_path: Path
    input_path: Path | None
    meta: dict
    shapes: dict[str, ShapeCase]
    small_shapes: dict[str, ShapeCase]

    @property
    def category(self) -> str | None:
        return self.meta.get("category")

    def select(self, spec: str | list[str] | None) -> list[ShapeCase]:
        """Shape ids to run: None/"all" -> every benchmark shape; "small" -> the CPU-sized set;
        a comma list of ids (benchmark or small); "first" / "last" -> the first / last benchmark
        shape (the bundled ops list theirs from decode to the largest prefill)."""
        if spec is None or spec == "all":
            return list(self.shapes.values())
        if spec == "small":
            if not self.small_shapes and self.meta.get("no_small_shape"):
                raise ProblemError(f"{self.name}: no small shape exists: {self.meta['no_small_shape']}")
            if not self.small_shapes:
                raise ProblemError(f"{self.name}: meta.json has no small_shapes")
            return list(self.small_shapes.values())
        if spec == "first":
            return [next(iter(self.shapes.values()))]
        if spec == "last":
            return [list(self.shapes.values())[-1]]
        ids = [s.strip() for s in spec.split(",")] if isinstance(spec, str) else list(spec)
        pool = {**self.shapes, **self.small_shapes}
        unknown = [i for i in ids if i not in pool]
        if unknown:
            known = ", ".join(list(pool)[:12]) + (" ..." if len(pool) > 12 else "")
            raise ProblemError(f"{self.name}: unknown shape id(s) {', '.join(unknown)} (known: {known})")
        return [pool[i] for i in ids]

    def candidate_functions(self) -> list[str]:
        """Functions a candidate may define instead of class ModelNew/Model (KernelBench-X only)."""
        return list((self.meta.get("kbx") or {}).get("candidate_functions") or [])

    def worker_spec(self) -> dict:
        return {
            "name": self.name,
            "kind": self.kind,
            "reference": str(self.reference_path),
            "input": str(self.input_path) if self.input_path else None,
            "meta": self.meta,
        }


def resolve_problem_path(spec: str | Path) -> Path:
    """Accept a path, or a bare operator name of the bundled benchmark (`rms_norm`)."""
    p = Path(spec).expanduser()
    if p.exists():
        return p.resolve()
    if isinstance(spec, str) and "/" not in spec and (BENCH_OPS / spec).is_dir():
        return (BENCH_OPS / spec).resolve()
    hint = did_you_mean(str(spec), bundled_ops())
    raise ProblemError(f"problem not found: {spec} (a path, or one of the operators under {BENCH_OPS}){hint}")


def bundled_ops() -> list[str]:
    """The operator directories of the bundled benchmark, by name."""
    if not BENCH_OPS.is_dir():
        return []
    return sorted(d.name for d in BENCH_OPS.iterdir() if d.is_dir() and not d.name.startswith(("_", ".")))


def did_you_mean(name: str, known, sep: str = "; ") -> str:
    """'<sep>did you mean X or Y?' for the known names closest to a mistyped one, else ''."""
    import difflib
    close = difflib.get_close_matches(name, sorted(known), n=2, cutoff=0.6)
    return f"{sep}did you mean {' or '.join(close)}?" if close else ""


def load_problem(spec: str | Path) -> Problem:
    path = resolve_problem_path(spec)
    if path.is_file():
        from aka.kbx import is_kbx_task, load_kbx
        return load_kbx(path) if is_kbx_task(path) else _load_kernelbench(path)
    return _load_opdir(path)


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ProblemError(f"malformed {path.name} in {path.parent}: {e.msg} at line {e.lineno}") from None
    if not isinstance(data, dict):
        raise ProblemError(f"malformed {path.name} in {path.parent}: expected an object")
    return data


def _parse_shapes(raw: dict, where: Path, info: dict | None = None) -> dict[str, ShapeCase]:
    shapes = {}
    for sid, entry in raw.items():
        if not isinstance(entry, dict):
            raise ProblemError(f"malformed shapes in {where}: entry {sid!r} is not an object")
        unknown = set(entry) - {"init_kwargs", "input_kwargs"}
        if unknown:
            raise ProblemError(f"malformed shapes in {where}: entry {sid!r} has unknown key(s) "
                               f"{', '.join(sorted(unknown))} (expected init_kwargs, input_kwargs)")
        # Atrex-Bench writes `"init_kwargs": null` for a Model without constructor arguments
        # (153 of its 440 shape entries): null is the empty object.
        init, inp = entry.get("init_kwargs"), entry.get("input_kwargs")
        init, inp = ({} if init is None else init), ({} if inp is None else inp)
        if not isinstance(init, dict) or not isinstance(inp, dict):
            raise ProblemError(f"malformed shapes in {where}: entry {sid!r} needs init_kwargs and input_kwargs objects")
        shapes[str(sid)] = ShapeCase(str(sid), init, inp, dict((info or {}).get(str(sid), {})))
    return shapes


def _load_opdir(path: Path) -> Problem:
    ref, inp, shp = path / "reference.py", path / "input.py", path / "shapes.json"
    missing = [p.name for p in (ref, inp, shp) if not p.exists()]
    if missing:
        raise ProblemError(f"{path} is not an operator directory: missing {', '.join(missing)}")
    raw_shapes = _read_json(shp)
    if not raw_shapes:
        raise ProblemError(f"{shp} has no shapes")
    kind = "opdir"
    if (path / "meta.json").exists():
        meta = _read_json(path / "meta.json")
    elif (path / "metadata.json").exists():
        kind, meta = "atrex", _atrex_meta(path)
    else:
        meta = {}
    shapes = _parse_shapes(raw_shapes, shp, meta.get("shapes"))
    small = _parse_shapes(meta.get("small_shapes") or {}, path / "meta.json")
    _check_reference(ref)
    return Problem(meta.get("name", path.name), kind, path, ref, inp, meta, shapes, small)


def _atrex_meta(path: Path) -> dict:
    """Translate Atrex-Bench's metadata.json + roofline.json into the fields we use."""
    md = _read_json(path / "metadata.json")
    meta: dict = {"name": path.name, "source": "atrex-bench", "atrex_id": md.get("id")}
    if isinstance(md.get("shapes"), dict):
        meta["shapes"] = {k: {"description": v.get("description", "")} for k, v in md["shapes"].items()}
    if md.get("importance_score") is not None:
        meta["importance"] = md["importance_score"]
    category = atrex_category(path.name)
    if category:
        meta["category"] = category
    roof = path / "roofline.json"
    if roof.exists():
        per_shape = {}
        for sid, r in (_read_json(roof).get("shapes") or {}).items():
            w, rd, wr = r.get("semantic_W_flops"), r.get("semantic_Q_read_bytes"), r.get("semantic_Q_write_bytes")
            if rd is not None and wr is not None:
                flops = {_ATREX_DT.get(k, k): float(v) for k, v in (w or {}).items()}
                per_shape[sid] = {"flops": flops, "bytes": float(rd) + float(wr)}
        if per_shape:
            meta["cost"] = {"per_shape": per_shape}
    return meta


ATREX_OPS = REPO_ROOT / "bench" / "atrex_ops.json"


def atrex_category(name: str) -> str | None:
    """The 15-way category of an Atrex-Bench operator: that of the bundled operator of the same
    family that bench/atrex_ops.json names (its meta.json holds the category), or None."""
    try:
        ours = json.loads(ATREX_OPS.read_text())["ops"].get(name)
        return json.loads((BENCH_OPS / ours / "meta.json").read_text()).get("category") if ours else None
    except (OSError, KeyError, json.JSONDecodeError):
        return None


_ATREX_DT = {"bf16": "bf16", "fp16": "fp16", "fp32": "fp32", "fp8": "fp8", "f32": "fp32"}


def _check_reference(ref: Path) -> None:
    try:
        tree = parse_py(ref.read_text(), filename=str(ref))
    except SyntaxError as e:
        raise ProblemError(f"{ref}: syntax error at line {e.lineno}: {e.msg}") from None
    if not any(isinstance(n, ast.ClassDef) and n.name == "Model" for n in tree.body):
        raise ProblemError(f"{ref} defines no class Model")


def _load_kernelbench(path: Path) -> Problem:
    from aka.kernelbench import load_kernelbench
    return load_kernelbench(path)
