"""`aka kb verify` and `aka kb stats`: run every kernel through the harness, record and count.

Results go to the results tree beside the knowledge base, not among its sources: the kernel
`<kb>/kernels/<op>/<name>.py` has `<kb>/../results/kb/kernels/<op>/<name>.results.json`
(results/kb/kernels/ in this repo); a kernel file outside a `kernels/<op>/` folder keeps its
results beside it:
  {"kernel": id, "op": op, "devices": {"cpu": {status, reason, source_hash, shapes_spec,
   shapes: [{id, label, correct, sol_fraction, speedup_eager, speedup_compile, time_us}],
   git_sha, date, torch, triton, gpu}, "cuda": {...}},
   "gpus": {"NVIDIA H200": {...}, "NVIDIA H100 80GB HBM3": {...}}}
A device's entry is reused while the kernel's source hash is unchanged (unless --force). "cuda" is
the kernel's primary GPU verdict (what the tables that name no GPU read); "gpus" keeps each GPU
model's latest one beside it, so that a verify on an H100 neither replaces the H200's verdict nor
is lost (`cuda_entry`).
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections import Counter
from pathlib import Path

from aka.kb.chunks import code_bytes, kb_files
from aka.kb.entries import as_list, read_entry
from aka.problem import bundled_ops

SHAPE_KEYS = ("id", "label", "correct", "time_us", "time_ci_us", "sol_us", "sol_fraction", "sol_fraction_measured",
              "eager_us", "compile_us", "compile_ci_us", "speedup_eager", "speedup_compile", "bound", "reason")


def kernel_paths(root: Path, op: str | None = None) -> list[Path]:
    """The kernel files, of one op or a comma list of ops when `op` is given."""
    ops = None if op is None else set(op.split(","))
    return [p for p in kb_files(root) if p.suffix == ".py" and (ops is None or p.parent.name in ops)]


def results_path(kernel: Path) -> Path:
    kernel = Path(kernel).absolute()  # a relative path's parents would stop at "."
    if kernel.parent.parent.name != "kernels":
        return kernel.with_suffix(".results.json")
    kb = kernel.parent.parent.parent
    return kb.parent / "results" / "kb" / "kernels" / kernel.parent.name / f"{kernel.stem}.results.json"


def source_hash(kernel: Path) -> str:
    """What a recorded verdict speaks for: the kernel's code, i.e. the file without its module
    docstring. The docstring is the kernel's notes and front matter (what retrieval indexes, and the
    `params` ranges a search explores; the defaults that run are AKA_PARAMS, in code), so rewording
    it keeps the GPU verdicts current instead of sending the kernel back to the device. Results
    recorded before 2026-12-04 hashed the whole file and were restamped once
    (scripts/restamp_code_hashes.py)."""
    return hashlib.sha256(code_bytes(kernel.read_bytes())).hexdigest()[:20]


def kernel_op(kernel: Path) -> str:
    meta, _ = read_entry(kernel)
    return str(meta.get("op") or kernel.parent.name)


def read_results(kernel: Path) -> dict:
    p = results_path(kernel)
    try:
        data = json.loads(p.read_text()) if p.exists() else {}
    except json.JSONDecodeError:
        data = {}
    return data if isinstance(data, dict) else {}


def _date(entry: dict | None) -> str:
    return str((entry or {}).get("date") or "")


def gpu_entries(data: dict) -> list[dict]:
    """Every GPU verdict a results record holds: the primary one ("cuda") and those kept beside it."""
    primary = (data.get("devices") or {}).get("cuda")
    return ([primary] if primary else []) + list((data.get("gpus") or {}).values())


def cuda_entry(data: dict, gpu: str | None = None) -> dict:
    """A results record's GPU verdict: the primary one ("cuda") when `gpu` is None, else the newest
    of those recorded on a GPU whose name contains `gpu` (case-insensitive: "H100" or torch's full
    name), from "gpus" or the primary; {} when there is none."""
    primary = (data.get("devices") or {}).get("cuda") or {}
    if gpu is None:
        return primary
    want = gpu.lower()
    return max((e for e in gpu_entries(data) if want in str(e.get("gpu") or "").lower()), key=_date, default={})


def put_cuda(data: dict, entry: dict, primary: bool) -> bool:
    """Record a GPU verdict: as the primary one ("cuda"; the one it replaces, when another GPU
    model's, moves to "gpus") or, with primary False, in "gpus" under its GPU model unless a newer
    verdict of that model is already there. "gpus" holds no copy of the primary. Whether the
    record changed."""
    devices = data.setdefault("devices", {})
    gpus = data.setdefault("gpus", {})
    gpu = str(entry.get("gpu") or "")
    changed = False
    if primary:
        old = devices.get("cuda") or {}
        if old.get("gpu") and old["gpu"] != gpu and _date(gpus.get(old["gpu"])) < _date(old):
            gpus[old["gpu"]] = old
        devices["cuda"] = entry
        gpus.pop(gpu, None)
        changed = True
    elif gpu and _date(cuda_entry(data, gpu)) < _date(entry):
        gpus[gpu] = entry
        changed = True
    if not gpus:
        data.pop("gpus")
    return changed


def device_entry(data: dict, device: str, gpu: str | None = None) -> dict:
    """The `device` entry of a results record; on a GPU with `gpu` named, that GPU model's verdict."""
    if device != "cpu" and gpu:
        return cuda_entry(data, gpu)
    return (data.get("devices") or {}).get(device) or {}


def is_current(kernel: Path, device: str, spec: str | None = None, gpu: str | None = None) -> bool:
    """Whether `device`'s recorded result still speaks for the kernel: same source, same shape set
    (`spec`, when given), current timing method, and run on every shape that set selects now
    (`spec`, else the device's default: small on the CPU, all elsewhere). `gpu` (the GPU in hand,
    as torch names it): a verdict recorded on another GPU model does not speak for this one."""
    from aka.evaluate.result import machine_failure
    entry = device_entry(read_results(kernel), device, gpu)
    if gpu and entry.get("gpu") and entry["gpu"] != gpu:
        return False  # an H100 verdict is no H200 result: measure it here
    if machine_failure(entry.get("status"), entry.get("reason")):
        return False  # out of GPU memory beside other evaluations: verify it again
    from aka.evaluate.timing import BASELINE_METHOD  # (imports torch: only when asked)
    if device != "cpu" and entry.get("timing_method") != BASELINE_METHOD:
        return False  # timed (kernel and baselines) under an older timing method: measure again
    if entry.get("source_hash") != source_hash(kernel) or (spec is not None and entry.get("shapes_spec") != spec):
        return False
    return _covers(entry, kernel, spec or ("small" if device == "cpu" else "all"))


def covers_shapes(kernel: Path, device: str, spec: str) -> bool:
    """Whether the recorded result ran on every shape `spec` selects now: a shape added to the
    op (a small shape for the CPU, a benchmark shape for the GPU) makes it stale."""
    return _covers(read_results(kernel).get("devices", {}).get(device) or {}, kernel, spec)


def _covers(entry: dict, kernel: Path, spec: str) -> bool:
    from aka.problem import ProblemError, load_problem
    try:
        want = {s.id for s in load_problem(kernel_op(kernel)).select(spec.split("/")[0])}
    except ProblemError:
        return True  # no such op: the verify run says so
    return {str(s.get("id")) for s in entry.get("shapes") or []} >= want


RETRY_ALONE = "out of memory beside others"
DEFERRED = "deferred"
# With a wall budget (`aka kb verify --budget`), a kernel starts only when its last recorded GPU
# evaluation, times BUDGET_MARGIN, fits in what is left; one with no recorded time needs MIN_START_S.
# On 2026-12-06 (H100) a verify given the call's last 215 s started four kernels: one finished in
# 199 s and the other three were killed at the deadline, their work lost.
BUDGET_MARGIN = 1.25
MIN_START_S = 90.0
# Evaluations running side by side queue for the GPU (aka/evaluate/gpulock.py): a kernel started beside
# others finishes later than its own time. With a budget, a start also counts GPU_SHARE of what the
# evaluations in flight still expect to need. On 2026-12-07 (H100, results/h100/device-2026-12-07) four
# kernels whose records said 48-138 s started together with 187 s left; each waited 88-96 s for the GPU
# and all four were stopped at the budget's end, nothing recorded.
GPU_SHARE = 0.5


def expected_wall(kernel: Path, gpu: str | None = None, shapes: int | None = None) -> float | None:
    """Seconds the kernel's last GPU evaluation took (`wall_s.total_s`): the GPU model in hand's
    verdict when it has one, else the newest recorded on any GPU; None when none records it. With
    `shapes` (how many this run evaluates), a record over fewer shapes is scaled up to them: on
    2026-12-07 grouped_dispatch's one-shape H200 record (48 s) let an all-shape verify start with 187 s
    left, and it was stopped in its correctness stage (results/h100/device-2026-12-07)."""
    data = read_results(kernel)
    entries = [cuda_entry(data, gpu)] if gpu else []
    for e in entries + sorted(gpu_entries(data), key=_date, reverse=True):
        t = (e.get("wall_s") or {}).get("total_s")
        if t:
            done = len(e.get("shapes") or [])
            return float(t) * (shapes / done if shapes and done and shapes > done else 1.0)
    return None


def estimate_wall(kernel: Path, gpu: str | None = None, shapes: int | None = None) -> tuple[float | None, str]:
    """(seconds, where from) for a budget's start decision: the kernel's own last GPU evaluation
    (expected_wall, scaled to `shapes`), else the median of its op's other kernels' (they share the
    op's shapes and reference, most of an evaluation's cost: a kernel new to the knowledge base has no
    record of its own), else (None, "")."""
    own = expected_wall(kernel, gpu, shapes)
    if own:
        return own, "its last evaluation"
    sib = sorted(t for k in kernel.parent.glob("*.py") if k != kernel and (t := expected_wall(k, gpu, shapes)))
    if sib:
        return sib[len(sib) // 2], f"its op's kernels' median of {len(sib)}"
    return None, ""


def gpu_name(device: str) -> str | None:
    """torch's name for the GPU `device` selects (what the harness records as env["gpu"])."""
    try:
        import torch
        return torch.cuda.get_device_name(torch.device(device)) if torch.cuda.is_available() else None
    except Exception:  # noqa: BLE001 - no name: nothing to compare, every current verdict stands
        return None


def record(res, kernel: Path, device: str, spec: str) -> dict:
    """One device's entry from an EvalResult: keep the verdict and the per-shape numbers present."""
    env = res.env or {}
    shapes = []
    for s in res.shapes:
        d = {k: getattr(s, k) for k in SHAPE_KEYS if getattr(s, k, None) not in (None, "")}
        shapes.append(d)
    from aka.evaluate.timing import BASELINE_METHOD
    return {"status": res.status, "reason": res.reason, "source_hash": source_hash(kernel), "shapes_spec": spec,
            "timing_method": BASELINE_METHOD, "shapes": shapes, "git_sha": env.get("git_sha"), "date": dt.datetime.now(dt.timezone.utc).isoformat(
                timespec="seconds"), "torch": env.get("torch"), "triton": env.get("triton"), "gpu": env.get("gpu"),
            "wall_s": res.wall_s or {}}  # where the time went (stages, GPU lock): for a slow run's diagnosis


def write_result(kernel: Path, root: Path, device: str, entry: dict) -> Path:
    data = read_results(kernel)
    meta, _ = read_entry(kernel)
    data["kernel"] = str(meta.get("id") or kernel.relative_to(root).with_suffix(""))
    data["op"] = kernel_op(kernel)
    if device == "cpu":
        data.setdefault("devices", {})[device] = entry
    else:
        put_cuda(data, entry, primary=True)
    p = results_path(kernel)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
    return p


class StageTrail:
    """Where a running evaluation has got to, from the worker's progress events (stage, shape, t):
    an evaluation stopped at a budget says which stage and shape it was in and where its time went
    (three H100 kb verifies of fused_moe's grouped_dispatch stopped at 300 s with no word of why)."""

    def __init__(self, clock=None):
        import time
        self.clock = clock or time.monotonic
        self.t0 = self.clock()
        self.events: list[tuple[str, str | None, float]] = []

    def __call__(self, msg: dict) -> None:
        if msg.get("event", "progress") == "progress" and msg.get("stage"):
            self.events.append((str(msg["stage"]), msg.get("shape"), self.clock()))

    def summary(self) -> str:
        """'in timing, shape 7, after 300 s; import 4 s, correctness 41 s (15 shapes), timing 250 s
        (6 shapes)': the stage reached last, then each stage's time in order of first arrival and
        the distinct shapes it touched."""
        if not self.events:
            return f"no progress reported in {self.clock() - self.t0:.0f} s"
        spent: dict[str, float] = {}
        shapes: dict[str, list] = {}
        marks = self.events + [("", None, self.clock())]
        for (st, sh, t), (_, _, t_next) in zip(marks, marks[1:]):
            spent[st] = spent.get(st, 0.0) + (t_next - t)
            seen = shapes.setdefault(st, [])
            if sh is not None and sh not in seen:
                seen.append(sh)
        st, sh, _ = self.events[-1]
        where = f"in {st}" + (f", shape {sh}" if sh is not None else "")
        parts = [f"{k} {v:.0f} s" + (f" ({len(shapes[k])} shape{'s' * (len(shapes[k]) != 1)})" if shapes[k] else "")
                 for k, v in spent.items()]
        return f"{where}, after {self.clock() - self.t0:.0f} s; " + ", ".join(parts)


def verify(root: Path, device: str, op: str | None = None, force: bool = False, console=None,
           evaluate_fn=None, shapes: str | None = None, timeout_s: float = 900.0, jobs: int = 1,
           timing: bool = True, first: list[str] | None = None, reverse: bool = False,
           missing_first: bool = False, oldest_first: bool = False,
           unlock_compiles: bool = False, gpu: str | None = None,
           budget_s: float | None = None, baselines: bool = True) -> list[tuple[Path, str]]:
    """(kernel, status or 'skipped') for every kernel; each result is written as soon as it is
    known, so an interrupted run keeps its finished kernels. With jobs > 1 several kernels are
    evaluated at once: on one GPU their checks overlap while their timings take turns under the
    harness's GPU lock, so no timing overlaps another evaluation. `shapes` overrides the default
    set (cpu: small, cuda: all); `timing=False` records correctness only; evaluate_fn replaces the
    harness in tests. `first` (op names), `reverse` and `missing_first` (kernels with no result on
    this device, or on the GPU model in hand, before the rest) and `oldest_first` (no result, then
    the oldest result on this device first: a partial re-verification after a harness change
    reaches the stalest verdicts) only order the work. `unlock_compiles`: the kernels' compiles let
    the GPU lock go (a knowledge base one trusts: aka/evaluate/gpulock.py). `gpu`: the GPU in hand (default: torch's name for it on a
    CUDA device); a result recorded on another GPU model is verified again, not skipped.
    `budget_s`: the whole run's wall budget. A kernel whose last recorded GPU evaluation would not
    fit in what is left (expected_wall x BUDGET_MARGIN) is not started and reported DEFERRED, so a
    later, shorter one can use the time (a record over fewer shapes than this run's is scaled up to
    them, and a kernel with no record of its own is estimated from its op's other kernels:
    estimate_wall; a start beside evaluations in flight also counts GPU_SHARE of what they still
    expect to need); each evaluation's timeout is cut to what is left, and one
    killed by that cut is DEFERRED too, with nothing recorded (its time was the budget's, not the
    kernel's). `baselines=False`: eager and torch.compile are not measured, only taken from the
    baseline cache where it has them (their figures are then missing from the record elsewhere)."""
    import functools
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from aka.evaluate.api import EvalConfig, evaluate
    from aka.evaluate.result import machine_failure
    from aka.evaluate.sandbox import WALL_LIMIT, SandboxConfig
    from aka.problem import ProblemError, load_problem
    run = evaluate_fn or evaluate
    spec = shapes or ("small" if device == "cpu" else "all")
    if gpu is None and device.startswith("cuda") and evaluate_fn is None:
        gpu = gpu_name(device)
    if not timing and device != "cpu":
        spec += "/untimed"
    paths = kernel_paths(root, op)
    if reverse:
        paths = paths[::-1]
    # stable sorts, the least significant first: --first outranks --missing-first and --oldest-first,
    # which order the work within each of its groups (named ops first, then the rest)
    if missing_first:  # on a GPU in hand, no result of that GPU model counts as missing
        paths = sorted(paths, key=lambda p: bool(device_entry(read_results(p), device, gpu)))
    if oldest_first:
        paths = sorted(paths, key=lambda p: _date(device_entry(read_results(p), device, gpu)))
    if first:  # the named ops' kernels first, in the order named, the rest as they were
        rank: dict[str, int] = {}
        for i, o in enumerate(first):   # an op named twice keeps its first place
            rank.setdefault(o, i)
        paths = sorted(paths, key=lambda p: rank.get(p.parent.name, len(rank)))
    t0 = time.monotonic()
    owed_by: dict[Path, tuple[float, float]] = {}   # in flight: (seconds needed, monotonic start)

    @functools.cache
    def op_shapes(op_name: str) -> int | None:
        """How many shapes this run evaluates for an op (None: the op does not load); once per op."""
        try:
            return len(load_problem(op_name).select(spec.split("/")[0]))
        except ProblemError:
            return None

    owed_lock = threading.Lock()
    cols = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*cols, console=console, transient=False) as bar:
        task = bar.add_task("verify", total=len(paths))

        def one(p: Path, alone: bool = False) -> tuple[Path, str]:
            name = str(p.relative_to(root))
            try:
                if not force and is_current(p, device, spec, gpu):
                    return p, "skipped"
                limit = timeout_s
                if budget_s is not None:
                    now = time.monotonic()
                    left = budget_s - (now - t0)
                    est, source = estimate_wall(p, gpu, op_shapes(kernel_op(p))) if device != "cpu" else (None, "")
                    need = est * BUDGET_MARGIN if est else MIN_START_S
                    with owed_lock:   # the evaluations in flight: what they still expect to need
                        owed = sum(max(0.0, n - (now - t)) for n, t in owed_by.values())
                        if need + GPU_SHARE * owed <= left:
                            owed_by[p] = (need, now)
                    if need > left and left <= 0:
                        return p, DEFERRED   # the budget is spent: the run's summary names these
                    if p not in owed_by:
                        beside = f", {owed:.0f} s still expected by the evaluations in flight" if owed else ""
                        bar.console.print(f"{name}: deferred, {left:.0f} s of the budget left, "
                                          + (f"{est:.0f} s expected from {source}" if est else
                                             f"no recorded time (needs {MIN_START_S:.0f} s)") + beside,
                                          markup=False, highlight=False)
                        return p, DEFERRED
                    limit = min(timeout_s, left)
                # no peer: a kernel's record keeps no peer figure (SHAPE_KEYS), and checking one is the
                # op's cost, not the kernel's; with flex_attention peers it was most of it (2026-12-06,
                # H100: four MLA kernels each compiled the same flex peer shape by shape and all four
                # timed out at 283 s on shape 3 of 14). Peers are measured by `aka bench peers` and
                # `aka bench run --impl peer`, once per op.
                # with a budget, a hard wall limit at the budget's end, GPU waits included (timeout_s
                # leaves them uncharged: four jobs queueing for the GPU ran past the budget)
                wall = left if budget_s is not None else None
                cfg = EvalConfig(device=device, timing=timing and device != "cpu", unlock_compiles=unlock_compiles,
                                 sandbox=SandboxConfig(timeout_s=limit, wall_limit_s=wall), peer=False,
                                 baselines=baselines)
                trail = StageTrail()
                kw = {"on_progress": trail} if _takes_progress(run) else {}
                try:
                    res = run(kernel_op(p), p, shapes=spec.split("/")[0], config=cfg, **kw)
                except ProblemError as e:
                    return p, f"no problem: {e}"
                if jobs > 1 and not alone and machine_failure(res.status, res.reason):
                    bar.console.print(f"{name}: crashed out of GPU memory beside {jobs - 1} other evaluation(s); "
                                      "it runs again alone once they are done", markup=False, highlight=False)
                    bar.update(task, total=bar.tasks[0].total + 1)
                    return p, RETRY_ALONE
                if res.status == "timeout" and (limit < timeout_s or WALL_LIMIT in (res.reason or "")):
                    bar.console.print(f"{name}: deferred, stopped at the budget's end ({limit:.0f} s), "
                                      + trail.summary(), markup=False, highlight=False)
                    return p, DEFERRED
                write_result(p, root, device, record(res, p, device, spec))
                sol = [s.sol_fraction for s in res.shapes if s.sol_fraction is not None]
                w = res.wall_s or {}
                from aka.evaluate.result import wall_summary
                bar.console.print(f"{name}: {res.status}" + (f", sol_fraction min {min(sol):.2f} max {max(sol):.2f}"
                                                             if sol else "")
                                  + f" ({w.get('worker_total_s', 0):.0f} s"
                                  + (f": {wall_summary(w)}" if wall_summary(w) else "") + ")"
                                  + (f"; stopped {trail.summary()}" if res.status == "timeout" else "")
                                  # why, on the console line too: a verify's log may be all that comes back
                                  # (results/h100/device-2026-12-08: a rejection whose record was lost)
                                  + (f"; {res.reason[:300]}" if res.status != "pass" and res.reason else ""),
                                  markup=False, highlight=False)
                return p, res.status
            finally:
                with owed_lock:
                    owed_by.pop(p, None)
                bar.update(task, description=name)
                bar.advance(task)

        if jobs <= 1:
            return [one(p) for p in paths]
        with ThreadPoolExecutor(jobs) as pool:
            out = list(pool.map(one, paths))
        # a kernel that ran out of GPU memory while others held theirs: its verdict is the run's, not
        # the kernel's (2026-12-05, five kb verify jobs and four adversarial workers on an 80 GB H100)
        return [one(p, alone=True) if st == RETRY_ALONE else (p, st) for p, st in out]


def _takes_progress(fn) -> bool:
    """Whether an evaluate function accepts on_progress (the harness does; tests' fakes may not)."""
    import inspect
    try:
        ps = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(q.name == "on_progress" or q.kind is q.VAR_KEYWORD for q in ps)


def stats(root: Path) -> dict:
    notes: Counter = Counter()
    ops_noted: set[str] = set()
    kernels = []
    for p in kb_files(root):
        meta, _ = read_entry(p)
        if p.suffix == ".md":
            notes[str(meta.get("layer") or p.relative_to(root).parts[0])] += 1
            ops_noted |= set(as_list(meta.get("ops")))
            continue
        data = read_results(p)
        res = data.get("devices", {})
        h = source_hash(p)

        def said(e: dict) -> str:
            return e.get("status") if e.get("source_hash") == h else f"stale ({e.get('status')})"
        verdict = {d: said(e) for d, e in res.items()}
        # each GPU model's verdict, the primary's and those kept beside it (put_cuda)
        per_gpu = {str(e["gpu"]): said(e) for e in reversed(gpu_entries(data)) if e.get("gpu")}  # the primary last: it wins
        kernels.append({"id": str(meta.get("id") or p.stem), "op": kernel_op(p), "verdicts": verdict,
                        "gpus": dict(sorted(per_gpu.items()))})
    bench = bundled_ops()
    with_kernel = sorted({k["op"] for k in kernels})
    return {
        "notes": dict(sorted(notes.items())), "notes_total": sum(notes.values()),
        "kernels": kernels, "kernels_total": len(kernels),
        "ops_with_kernel": with_kernel, "ops_with_notes": sorted(ops_noted),
        "bench_ops": bench, "bench_ops_without_kernel": [o for o in bench if o not in with_kernel],
        "verified": {d: sum(k["verdicts"].get(d) == "pass" for k in kernels) for d in ("cpu", "cuda")},
        "verified_by_gpu": {g: sum(k["gpus"].get(g) == "pass" for k in kernels)
                            for g in sorted({g for k in kernels for g in k["gpus"]})},
    }
