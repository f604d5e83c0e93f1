"""`evaluate()`: static check in the parent, the cascade in a sandboxed worker, roofline after."""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from aka.evaluate.result import EvalResult
from aka.evaluate.spec import EvalSpec, Settings, ShapeSpec
from aka.evaluate.sandbox import SandboxConfig, run_worker
from aka.hardware import cache_dir
from aka.evaluate.static import check_source
from aka.problem import REPO_ROOT, Problem, ProblemError, load_problem


class CandidateError(ValueError):
    """Bad candidate input (missing file, no ModelNew/Model) when the caller asked for strictness."""


@dataclass
class EvalConfig:
    device: str | None = None      # "cuda", "cpu" or None (cuda when available)
    draws: int = 3                 # fresh input draws per shape in stage 1 (>= 3 enforced)
    outliers: bool = True          # stage 2: 0.1% of float inputs scaled by 50 (meta can opt out)
    outlier_frac: float = 1e-3
    outlier_scale: float = 50.0
    timing: bool = True            # GPU only
    checks: bool = True            # False: re-measurement of a source that already passed the checks
                                   # (import, first call, timing and its timed-output check only)
    baselines: bool = True         # time eager and torch.compile of the reference too
    peer: bool = True              # the op's production peer (meta.json `peer`): checked, and timed on a GPU
    fresh_baselines: bool = False  # ignore the baseline cache and re-measure interleaved
    ncu: bool = False              # Nsight Compute pass on one shape (GPU only)
    ncu_shape: str | None = None
    ncu_stalls: bool = False       # the ncu pass with the warp-state stall reasons too (more replay passes)
    compile_report: bool = False   # offline GPU compile of the candidate's launches on one shape (any device):
                                   # registers, spills, shared memory, programs per SM; advice, not a verdict
    compile_capability: int = 90   # its target (sm_90a)
    seed: int | None = None        # None: a fresh random seed per evaluation
    unlock_compiles: bool = False  # GPU: let the lock go while the runner compiles (trusted candidates only:
                                   # one could use it to overlap another evaluation's timing; gpulock.py)
    runner_user: str = "auto"      # "auto": the runner as an unprivileged user when aka runs as root; "same"
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)


def cuda_available() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001
        return False


def resolve_device(device: str | None) -> str:
    if device in (None, "auto"):
        return "cuda" if cuda_available() else "cpu"
    if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
        raise ProblemError(f"unknown device {device!r} (cpu or cuda)")
    if device.startswith("cuda") and not cuda_available():
        raise ProblemError("--device cuda requested but no CUDA GPU is visible (use --device cpu for the interpreter)")
    return device


def git_sha() -> str | None:
    # A copy of the tree whose .git is not the source's (the device machine's checkout): the
    # commit it was copied from, as scripts/pre_device.sh wrote it, names the code that ran.
    if os.environ.get("AKA_GIT_SHA"):
        return os.environ["AKA_GIT_SHA"]
    try:
        sha = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                             text=True, timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO_ROOT,
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return (sha + ("-dirty" if dirty else "")) or None
    except (OSError, subprocess.SubprocessError):
        return None


def evaluate(problem: Problem | str | Path, candidate: str | Path, *, shapes=None,
             config: EvalConfig | None = None, strict: bool = False, source: str | None = None,
             on_progress=None) -> EvalResult:
    """Evaluate a candidate file (or `source` text) against a problem.

    `strict=True` (the CLI) turns user errors in the candidate into CandidateError instead of a
    verdict; the agent keeps it False so a model's broken reply is just a bad verdict.
    """
    cfg = config or EvalConfig()
    prob = problem if isinstance(problem, Problem) else load_problem(problem)
    device = resolve_device(cfg.device)
    selected = prob.select(shapes)
    cand_path = Path(candidate)
    if source is None:
        if not cand_path.is_file():
            raise CandidateError(f"candidate not found: {candidate}")
        source = cand_path.read_text()
    base = EvalResult(status="rejected", problem=prob.name, candidate=str(candidate), device=device)
    report = check_source(source, cand_path.name, functions=prob.candidate_functions())
    if strict and report.model_class is None and report.syntax_error is None:
        raise CandidateError(f"{candidate} defines no class ModelNew or Model")
    if report.syntax_error:
        base.status, base.reason = "compile_error", "[static] " + report.syntax_error
        return _finish(base, prob, selected)
    if not report.ok:
        base.reason = "[static] " + report.summary()
        base.notes = [str(v) for v in report.violations]
        return _finish(base, prob, selected)
    spec, files = build_spec(prob, selected, device, cfg, candidate_name=str(candidate),
                             model_class=report.model_class, kernels=report.kernels)
    res = run_worker(spec, source, files, cfg.sandbox, on_progress=on_progress)
    res.candidate = str(candidate)
    res.stages_run = ["static"] + res.stages_run
    res = _finish(res, prob, selected)
    if (cfg.ncu or cfg.ncu_stalls) and res.status == "pass" and device.startswith("cuda"):
        _attach_ncu(res, spec, source, cfg)
    if cfg.compile_report and report.kernels:
        _attach_compile(res, prob, source, cfg)
    return res


def build_spec(prob: Problem, selected, device: str, cfg: EvalConfig, *, mode: str = "candidate",
               candidate_name: str = "candidate.py", model_class=None, kernels=()) -> tuple[EvalSpec, list[Path]]:
    """The one typed spec of an evaluation (aka/evaluate/spec.py) and the problem files it hashes."""
    seed = cfg.seed if cfg.seed is not None else int.from_bytes(os.urandom(4), "little") % (2**31 - 10**6)
    files = [prob.reference_path] + ([prob.input_path] if prob.input_path else [])
    settings = Settings(draws=cfg.draws, outliers=cfg.outliers, outlier_frac=cfg.outlier_frac,
                        outlier_scale=cfg.outlier_scale, timing=cfg.timing, checks=cfg.checks,
                        baselines=cfg.baselines, peer=cfg.peer, fresh_baselines=cfg.fresh_baselines, seed=seed,
                        baseline_cache=str(cache_dir() / "baselines"), gpu_lock=str(cache_dir() / "locks"),
                        runner_user=cfg.runner_user, unlock_compiles=cfg.unlock_compiles)
    spec = EvalSpec(problem=dict(prob.worker_spec(), source_hash=_hash_paths(files)),
                    shapes=tuple(ShapeSpec.from_case(dict(s.to_json(), label=s.label())) for s in selected),
                    device=device, mode=mode, candidate_name=candidate_name, model_class=model_class,
                    kernels=tuple(kernels or ()), settings=settings)
    return spec, files


def _hash_paths(paths) -> str:
    import hashlib
    h = hashlib.sha256()
    for p in paths:
        h.update(Path(p).read_bytes())
    return h.hexdigest()[:16]


def _attach_ncu(res: EvalResult, spec: EvalSpec, source: str, cfg: EvalConfig) -> None:
    """Nsight Compute metrics for one shape (default: the one with the most bytes)."""
    from aka.evaluate.ncu_run import profile_shape
    shapes = {s.id: s for s in res.shapes}
    sid = cfg.ncu_shape or max(res.shapes, key=lambda s: s.bytes or 0).id
    sr = shapes.get(sid)
    if sr is None:
        res.notes.append(f"--ncu: unknown shape {sid}")
        return
    per_forward = sum((sr.kernels or {}).values()) or 1
    sr.ncu = profile_shape(spec, source, sid, per_forward, sr.bytes, stalls=cfg.ncu_stalls)
    if not sr.ncu.get("available"):
        res.notes.append(f"ncu unavailable: {sr.ncu.get('reason')}")
    elif sr.ncu.get("refused"):  # the same code, run again for the profiler, tried what the runner refuses
        res.status, res.reason = "rejected", f"[ncu] {sr.ncu['error']}"
    elif sr.ncu.get("error"):
        res.notes.append(f"ncu: {sr.ncu['error']}")


def _attach_compile(res: EvalResult, prob: Problem, source: str, cfg: EvalConfig) -> None:
    """The offline compile report of one shape (the one with the most bytes, as for ncu; on a CPU run
    one of the small shapes evaluated): what the GPU compiler says about the launches it makes."""
    from aka.evaluate.compile_report import compile_report
    if not res.shapes:
        return
    sr = max(res.shapes, key=lambda s: s.bytes or 0)
    try:
        sr.compile = compile_report(prob.root, source, [sr.id], capability=cfg.compile_capability)
    except Exception as e:  # noqa: BLE001 - advice only: its failure is a note, never the verdict
        sr.compile = {"available": False, "reason": f"{type(e).__name__}: {str(e)[:200]}"}
    if not sr.compile.get("available"):
        res.notes.append(f"offline compile report unavailable: {sr.compile.get('reason')}")


def _finish(res: EvalResult, prob: Problem, selected) -> EvalResult:
    from aka.evaluate.report import attach_roofline
    res.env.setdefault("device", res.device)
    res.env["git_sha"] = git_sha()
    res.env["problem_kind"] = prob.kind
    if not res.shapes:
        from aka.evaluate.result import ShapeResult
        res.shapes = [ShapeResult(id=s.id, label=s.label()) for s in selected]
    import re
    m = re.search(r"\[during (\w+)(?:, shape ([^\]]+))?\]", res.reason or "")
    if m and res.status in ("timeout", "crashed"):  # a killed worker: mark where it died
        for sr in res.shapes:
            if m.group(2) is None or sr.id == m.group(2):
                sr.correct, sr.failed_stage, sr.reason = False, m.group(1), res.reason
    attach_roofline(res, prob, selected)
    return res


def evaluate_baselines(problem: Problem | str | Path, *, shapes=None, config: EvalConfig | None = None,
                       on_progress=None) -> EvalResult:
    """Time PyTorch eager and torch.compile of the reference and the op's peer (no candidate):
    benchmark baselines. On CPU it checks the peer and counts bytes and FLOPs (no timing)."""
    cfg = config or EvalConfig()
    prob = problem if isinstance(problem, Problem) else load_problem(problem)
    device = resolve_device(cfg.device)
    selected = prob.select(shapes)
    spec, files = build_spec(prob, selected, device, cfg, mode="baselines", candidate_name="<baselines>")
    res = run_worker(spec, "", files, cfg.sandbox, on_progress=on_progress)
    res.candidate = "<baselines>"
    return _finish(res, prob, selected)
