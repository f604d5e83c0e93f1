"""Re-tune a dispatch kernel's table on the GPU in hand: one move of the offline search.

A dispatch kernel carries configurations measured per bench shape (gemm_bf16/dispatch.py's `_TABLE`
for its default GPU and `_GPU_TABLES[gpu]` for others, the bake writing the GPU in hand's; the
attention kernels' `DISPATCH`, one table), written by a tuner run and a
bake (scripts/gpu_tune_gemm.py + bake_dispatch.py, scripts/gpu_tune_attn.py +
bake_dispatch_attn.py). The search's coordinate moves change AKA_PARAMS, global switches that leave
the table as it is, so on another GPU, or after the tuner's grid grew, nothing in the search could
reach a better table: on the H200 the offline search never beat its first candidate on gemm_bf16
(issue 21). This move runs the repository's tuner over the task's bench shapes, bakes the winners
into a copy of the kernel (rows of other shapes kept) and proposes that copy.

The tuner only picks: its timings never become the candidate's. The copy is judged, timed and
promoted by the loop like any other candidate. The tuner runs our own knowledge-base kernel (the
repository's file, the one whose front matter names the tuner), never a candidate, under the GPU
lock held exclusively, so other evaluations on the same GPU neither slow it nor are slowed.

A kernel opts in with `tuner: gemm`, `tuner: attention` or `tuner: moe` in its front matter. The move is offered
only on a GPU, for a bundled op whose task shapes include bench shapes, and for the repository's
own file (the tuners read knowledge_base/kernels/<op>/<kernel>.py, not another directory's copy).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from aka.problem import REPO_ROOT

SCRIPTS = REPO_ROOT / "scripts"


class RetuneError(RuntimeError):
    """Why a re-tune produced no candidate (the search goes on with its other moves)."""


@dataclass(frozen=True)
class Recipe:
    tune: tuple[str, ...]   # the tuner's argv after `python`: {out} {op} {shapes} {deadline} {copy}
    result: str             # the JSON it writes in {out}
    bake: tuple[str, ...]   # the baker's argv: {json} {op} {kernels} {kb} {copy}
    kernels: dict | None = None  # op -> the file stem the tuner reads (None: dispatch.py)


RECIPES = {
    "gemm": Recipe(("gpu_tune_gemm.py", "{out}", "--ops", "{op}", "--shapes", "{shapes}", "--deadline", "{deadline}"),
                   "tune.json",
                   ("bake_dispatch.py", "{json}", "--ops", "{op}", "--kernels", "{kernels}", "--merge")),
    "attention": Recipe(("gpu_tune_attn.py", "{out}", "--ops", "{op}", "--shapes", "{shapes}", "--deadline",
                         "{deadline}", "--device", "cuda"),
                        "tune_attn.json",
                        ("bake_dispatch_attn.py", "{json}", "--kb", "{kb}"),
                        {"prefill_attention": "flash_dispatch", "paged_decode_attention": "split_dispatch",
                         "mla_decode_attention": "split_dispatch"}),
    # the MoE tuner and baker take the kernel's path: both work on the copy
    "moe": Recipe(("gpu_tune_moe.py", "{out}", "--shapes", "{shapes}", "--deadline", "{deadline}", "--device", "cuda",
                   "--kernel", "{copy}"),
                  "moe_tune.json",
                  ("bake_dispatch_moe.py", "{json}", "--kernel", "{copy}"),
                  {"fused_moe": "grouped_dispatch"}),
}


@dataclass
class Retuned:
    source: str          # the kernel with the re-tuned table
    summary: dict        # what the tuner measured, for the candidate's record


def recipe_for(meta: dict) -> Recipe | None:
    return RECIPES.get(str(meta.get("tuner") or ""))


def unavailable(meta: dict, path: Path, problem, shape_ids: list[str], device: str) -> str | None:
    """Why the move cannot run here (None: it can)."""
    name = str(meta.get("tuner") or "")
    if not name:
        return "the kernel names no tuner"
    rec = RECIPES.get(name)
    if rec is None:
        return f"unknown tuner {name!r} (known: {', '.join(RECIPES)})"
    if not device.startswith("cuda"):
        return "a tuner times configurations: GPU only"
    if problem.kind != "opdir" or Path(problem.root).resolve() != (REPO_ROOT / "bench" / "ops" / problem.name).resolve():
        return f"{problem.name} is not a bundled op (the tuners read bench/ops/<op>)"
    stem = rec.kernels.get(problem.name) if rec.kernels is not None else "dispatch"
    if stem is None:
        return f"the {name} tuner has no table kernel for {problem.name}"
    own = REPO_ROOT / "knowledge_base" / "kernels" / problem.name / f"{stem}.py"
    if Path(path).resolve() != own.resolve():
        return f"the tuner reads {own.relative_to(REPO_ROOT)}, not {path}"
    if not bench_ids(problem, shape_ids):
        return "no bench shape among the task's shapes"
    missing = [s for s in (rec.tune[0], rec.bake[0]) if not (SCRIPTS / s).is_file()]
    if missing:
        return f"missing {', '.join(missing)} in {SCRIPTS}"
    return None


def bench_ids(problem, shape_ids: list[str]) -> list[str]:
    return [i for i in shape_ids if i in problem.shapes]


def _argv(template: tuple[str, ...], **kw) -> list[str]:
    return [sys.executable, str(SCRIPTS / template[0])] + [a.format(**kw) for a in template[1:]]


def retune(meta: dict, path: Path, problem, shape_ids: list[str], out_dir: Path, deadline_s: float,
           lock_root: str | None = None, tune_args: tuple[str, ...] = (), bake_args: tuple[str, ...] = ()) -> Retuned:
    """Tune `shape_ids` (the tuner's shape ids: the task's bench shapes, bench_ids), bake the winners
    into a copy of `path` under out_dir, return its source. tune_args / bake_args are appended to the
    two commands (the tests run the tuners' interpreter modes with them)."""
    rec = recipe_for(meta)
    if rec is None:
        raise RetuneError(f"no tuner recipe for {meta.get('tuner')!r}")
    ids = list(shape_ids)
    if not ids:
        raise RetuneError("no shapes to tune")
    out_dir = Path(out_dir)
    tune_dir, kb = out_dir / "tune", out_dir / "kb"
    if out_dir.exists():
        shutil.rmtree(out_dir)
    tune_dir.mkdir(parents=True)
    copy = kb / "kernels" / problem.name / Path(path).name
    copy.parent.mkdir(parents=True)
    shutil.copyfile(path, copy)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    cmd = _argv(rec.tune, out=tune_dir, op=problem.name, shapes=",".join(ids), deadline=f"{deadline_s:g}",
                copy=copy) + list(tune_args)
    t0 = time.monotonic()
    log = out_dir / "tune.log"
    from aka.evaluate.gpulock import for_worker  # no lock directory: NoLock, whose exclusive() holds nothing
    with for_worker({"gpu_lock": lock_root or ""}, "cuda", None).exclusive(), log.open("w") as fh:
        try:
            proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT,
                                  timeout=deadline_s + 120)
        except subprocess.TimeoutExpired:
            raise RetuneError(f"the tuner ran past {deadline_s + 120:.0f} s (log: {log})") from None
    wall = time.monotonic() - t0
    result = tune_dir / rec.result
    if not result.is_file():
        raise RetuneError(f"the tuner exited {proc.returncode} and wrote no {rec.result}: {_tail(log)}")
    summary = summarize(json.loads(result.read_text()), problem.name)
    if not summary["correct"]:
        raise RetuneError(f"the tuner measured no correct configuration ({summary['records']} records)")
    bake = _argv(rec.bake, json=result, op=problem.name, kernels=kb / "kernels", kb=kb, copy=copy) + list(bake_args)
    got = subprocess.run(bake, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
    if got.returncode != 0:
        raise RetuneError(f"the bake failed: {(got.stderr or got.stdout).strip()[-300:]}")
    source = copy.read_text()
    if source == Path(path).read_text():
        raise RetuneError("the re-tuned table is the same as the kernel's")
    summary.update(wall_s=round(wall, 1), shapes=ids, tune_json=str(result), log=str(log),
                   tuner=" ".join([rec.tune[0]] + cmd[2:]))
    return Retuned(source, summary)


def summarize(doc: dict, op: str) -> dict:
    """Counts from a tuner's JSON: records, correct ones, shapes with a winner. The GEMM and
    attention tuners write flat `records`; the MoE tuner one entry per shape with its `configs`."""
    if "records" not in doc and isinstance(doc.get("shapes"), list):
        cfgs = [c for sh in doc["shapes"] for c in sh.get("configs") or []]
        won = [sh for sh in doc["shapes"] if (sh.get("best") or {}).get("ok")]
        return {"records": len(cfgs), "correct": sum(bool(c.get("ok")) for c in cfgs), "shapes_won": len(won),
                "skipped_for_deadline": doc.get("skipped_for_deadline")}
    recs = [r for r in doc.get("records", []) if r.get("op", op) == op]
    ok = [r for r in recs if r.get("correct") and r.get("us") and not r.get("error")]
    return {"records": len(recs), "correct": len(ok), "shapes_won": len({str(r.get("shape")) for r in ok}),
            "skipped_for_deadline": doc.get("skipped_for_deadline")}


def _tail(log: Path, n: int = 300) -> str:
    try:
        return log.read_text(errors="replace").strip()[-n:]
    except OSError:
        return "(no log)"

