"""`aka bench run`: implementations over a suite, one long-format record per (impl, op, shape).

Implementations: `reference` (PyTorch eager), `compile` (torch.compile of the reference, default
mode), `peer` (the op's production peer, meta.json `peer`: checked against the reference, then
timed; ops without one get no peer records), or a directory of candidates, one per op
(`DIR/<op>.py`, or `DIR/<op>/best.py`, or the first `DIR/<op>/*.py`). With `peer` named, every
candidate is timed beside the peer in the same rounds too (`peer_us`, `speedup_peer`). Records are appended to `records.jsonl` as each op finishes, so an
interrupted run resumes where it stopped: (impl, op, shape, device) already present are skipped,
except records that failed for want of GPU memory, which are measured again. `gpus` spreads the
tasks over several GPUs of the host, `jobs` at a time on each: every evaluation's judge and runner
see only their GPU (CUDA_VISIBLE_DEVICES), the GPU lock is per physical GPU, and each record says
which GPU timed it (`gpu_index`).
"""
from __future__ import annotations

import contextlib
import copy
import datetime as _dt
import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from aka.bench.suite import Suite
from aka.evaluate.api import EvalConfig, evaluate, evaluate_baselines, git_sha, resolve_device
from aka.evaluate.result import EvalResult
from aka.objective import fraction, impossible

BASELINES = ("reference", "compile", "peer")


@dataclass
class RunOptions:
    impls: list[str]
    out: Path
    device: str | None = None
    shapes: str | None = None  # None: all benchmark shapes on GPU, "small" on CPU
    timeout_s: float = 1800.0
    jobs: int = 1              # GPU: ops evaluated at once (their timings still take turns)
    beside: bool = True        # candidates timed beside eager and torch.compile (False: only the peer, if named)
    gpus: list[str] | None = None  # GPU ids to spread the tasks over, `jobs` at a time on each (None: as visible)
    unlock_compiles: bool = False  # the candidates' compiles let the GPU lock go (trusted candidates only)


def candidate_for(impl_dir: Path, op: str) -> Path | None:
    for p in (impl_dir / f"{op}.py", impl_dir / op / "best.py"):
        if p.is_file():
            return p
    if (impl_dir / op).is_dir():
        files = sorted((impl_dir / op).glob("*.py"))
        return files[0] if files else None
    return None


def _records_path(out: Path) -> Path:
    return out / "records.jsonl"


def load_records(out: Path) -> list[dict]:
    path = _records_path(out)
    if not path.exists():
        return []
    rows: dict = {}
    for line in path.read_text().splitlines():
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut by a crash
        # A resumed run re-measures what failed for want of resources (retryable()): the later
        # record of an (impl, op, shape, device) replaces the earlier one.
        rows[(r.get("impl"), r.get("op"), r.get("shape"), r.get("device"))] = r
    return list(rows.values())


def retryable(record: dict) -> bool:
    """A resumed run measures it again: it failed for want of resources (result.machine_failure),
    or it was timed on a GPU under an older timing method (timing.BASELINE_METHOD)."""
    from aka.evaluate.result import machine_failure
    from aka.evaluate.timing import BASELINE_METHOD
    if str(record.get("device", "")).startswith("cuda") and record.get("timing") != BASELINE_METHOD:
        return True
    if record.get("impl") == "peer" and record.get("status") == "unavailable":
        return True  # the library may be installed since
    return machine_failure(record.get("status"), record.get("reason"))


def _rows(res: EvalResult, impl: str, problem, suite: Suite, which: str | None = None) -> list[dict]:
    """Flatten one EvalResult into records; `which` picks the eager, compile or peer column for baselines."""
    from aka.evaluate.timing import BASELINE_METHOD
    env = res.env or {}
    peer = env.get("peer") or _peer_of(problem) or {}
    base = {"impl": impl, "op": problem.name, "category": problem.category, "op_weight": suite.weight(problem.name),
            "device": res.device, "gpu": env.get("gpu"), "torch": env.get("torch"), "triton": env.get("triton"),
            "git_sha": env.get("git_sha"), "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "timing": BASELINE_METHOD, "candidate": Path(res.candidate).stem if which is None and res.candidate else None,
            "peer": peer.get("name"), "peer_library": peer.get("library"),
            "peer_version": peer.get("version")}
    info = {s.id: s for s in problem.shapes.values()} | {s.id: s for s in problem.small_shapes.values()}
    rows = []
    name = _HARNESS_NAME.get(which, which)  # this implementation as the harness's notes name it
    for s in res.shapes:
        if which == "reference":
            t, method = s.eager_us, (s.baseline_methods or {}).get("eager")
        elif which == "compile":
            t, method = s.compile_us, (s.baseline_methods or {}).get("compile")
        elif which == "peer":
            t, method = s.peer_us, (s.baseline_methods or {}).get("peer")
        else:
            t, method = s.time_us, s.timing_method
        ok = res.status == "pass" and (which is not None or bool(s.correct))
        why = ""
        peer_failed = which == "peer" and s.peer_status != "pass"
        if peer_failed:  # a peer that computes something else, raises, or cannot run here: not timed
            ok = False
        if which is not None and ok and t is None and str(res.device).startswith("cuda"):
            # A baseline the GPU run could not time (torch.compile failing on this reference):
            # a failed case of that implementation, with the harness's reason, not a silent gap.
            why = next((n.split(": ", 1)[1] for n in res.notes
                        if n.startswith(f"shape {s.id}: {name} not timed")), f"{name} not timed")
            ok = False
        if which is None:  # the candidate's own time: the harness scored it
            sol_fraction, sp_eager, sp_compile, floor = s.sol_fraction, s.speedup_eager, s.speedup_compile, s.impossible
            sol_measured = s.sol_fraction_measured
        else:  # a baseline's time, which the harness timed but did not score
            sol_fraction, floor = fraction(s.sol_us, t), impossible(s.sol_us, t)
            sol_measured = fraction(s.sol_us_measured, t)
            sp_eager = s.eager_us / t if s.eager_us and t else None
            sp_compile = s.compile_us / t if s.compile_us and t else None
        shape = info.get(s.id)
        status = res.status if which is None else ("pass" if ok else ("untimed" if why else res.status))
        reason = why or (res.reason if not ok else "")
        if peer_failed:
            status, reason = s.peer_status or "error", s.peer_reason or "peer not checked"
        sp_peer = s.speedup_peer if which is None else (s.peer_us / t if s.peer_us and t else None)
        # the harness's word when this implementation's event timing carried its host path (timing.py)
        mark = f"shape {s.id}: {name}: host-bound timing"
        timing_note = next((n.split(": ", 2)[2] for n in res.notes if n.startswith(mark)), None)
        rows.append(dict(base, shape=s.id, label=s.label, shape_weight=shape.weight if shape else 1.0,
                         phase=(shape.info.get("phase") if shape else None),
                         status=status, reason=reason, correct=ok, time_us=t,
                         timing_method=method if t is not None else None,
                         eager_us=s.eager_us, compile_us=s.compile_us, peer_us=s.peer_us,
                         speedup_eager=sp_eager, speedup_compile=sp_compile, speedup_peer=sp_peer,
                         peer_status=s.peer_status, peer_rel_err=s.peer_rel_err,
                         sol_us=s.sol_us, sol_fraction=sol_fraction,
                         # against `aka hw calibrate`'s ceilings when this GPU has a cached calibration
                         sol_us_measured=s.sol_us_measured, sol_fraction_measured=sol_measured,
                         bytes=s.bytes, flops=s.flops,
                         bound=s.bound, impossible=bool(floor),
                         fallback_ops=s.fallback_ops, timing_note=timing_note))
    return rows


# a record's implementation (`which`) as the harness names it in a result's notes
_HARNESS_NAME = {None: "candidate", "reference": "eager"}


def _peer_of(problem) -> dict | None:
    """The op's peer as meta.json names it, with the installed version (for the records of an
    evaluation that did not run it: a CPU candidate)."""
    from aka.peers import PeerError, describe, peer_of
    try:
        return describe(peer_of(problem.meta))
    except PeerError:
        return None


def has_peer(problem) -> bool:
    from aka.peers import PeerError, peer_of
    try:
        return peer_of(problem.meta) is not None
    except PeerError:
        return True  # its evaluation says what is wrong with the entry


def other_gpus(out: Path, here: str) -> set[str]:
    """GPU models other than `here` that timed records already in `out` (a resumed run must not mix
    them: the report compares every record with every other)."""
    return {str(r["gpu"]) for r in load_records(out)
            if str(r.get("device", "")).startswith("cuda") and r.get("gpu") and r["gpu"] != here}


def run_bench(suite: Suite, opts: RunOptions, progress=None) -> Path:
    device = resolve_device(opts.device)
    from aka.kb.verify import gpu_name
    here = gpu_name(device) if device.startswith("cuda") else None
    if here:
        from aka.errors import UserError
        others = other_gpus(opts.out, here)
        if others:
            raise UserError(f"{opts.out} holds records timed on {', '.join(sorted(others))}, and this GPU is {here}: "
                            "a resumed run would report times from two GPU models side by side. Use another --out.")
    shapes = opts.shapes or ("small" if device == "cpu" else None)
    opts.out.mkdir(parents=True, exist_ok=True)
    done = {(r["impl"], r["op"], r["shape"], r["device"]) for r in load_records(opts.out) if not retryable(r)}
    meta_path = opts.out / "run.json"
    try:
        segments = json.loads(meta_path.read_text()).get("segments", []) if meta_path.exists() else []
    except json.JSONDecodeError:
        segments = []
    gpus = list(opts.gpus or []) if device.startswith("cuda") else []
    seg = {"started": time.time(), "jobs": opts.jobs, "git_sha": git_sha(), "records_before": len(done)}
    if opts.unlock_compiles:
        seg["unlock_compiles"] = True
    if gpus:
        seg["gpus"] = gpus
    meta = {"suite": str(suite.root), "impls": opts.impls, "device": device, "shapes": shapes or "all",
            "weights_source": suite.weights_source, "git_sha": seg["git_sha"], "started": seg["started"],
            "jobs": opts.jobs, "segments": segments + [seg]}
    meta_path.write_text(json.dumps(meta, indent=2))
    cfg = EvalConfig(device=device, baselines=opts.beside, peer="peer" in opts.impls,
                     unlock_compiles=opts.unlock_compiles)
    cfg.sandbox.timeout_s = opts.timeout_s
    want_base = [i for i in opts.impls if i in BASELINES]
    # the baselines' own evaluations time what was named: eager and compile together, the peer alone
    base_cfg = EvalConfig(device=device, baselines=bool({"reference", "compile"} & set(want_base)),
                          peer="peer" in want_base)
    base_cfg.sandbox.timeout_s = opts.timeout_s
    cand_dirs = [Path(i) for i in opts.impls if i not in BASELINES]
    for d in cand_dirs:
        if not d.is_dir():
            from aka.problem import ProblemError
            raise ProblemError(f"implementation {d} is neither 'reference', 'compile', 'peer' nor a directory")
    lock = threading.Lock()
    slots = GpuSlots(gpus, opts.jobs)

    t_run = time.time()
    finished = [0]

    def shapes_of(problem):
        # External problems (Atrex-Bench, KernelBench) carry no CPU-sized set: use their shapes.
        return None if (shapes == "small" and not problem.small_shapes) else shapes

    def chunks(problem, impls: list[str]) -> list[list[str]]:
        """The shapes some of `impls` still lack, in `bench.split` chunks (meta.json) that run as
        separate jobs: an op whose torch.compile takes minutes per shape (fused_moe unrolls its
        expert loop), or whose candidate's correctness rounds do, would otherwise be one job
        longer than the rest of the suite, and one a deadline cuts off would record nothing, so
        a resumed run would start it over again."""
        if not impls:
            return []
        missing = [s.id for s in problem.select(shapes_of(problem))
                   if not all((i, problem.name, s.id, device) in done for i in impls)]
        k = max(1, min(int((problem.meta.get("bench") or {}).get("split", 1)), len(missing)))
        return [missing[i::k] for i in range(k)] if missing else []

    def baseline_chunks(problem) -> list[list[str]]:
        return chunks(problem, [i for i in want_base if i != "peer" or has_peer(problem)])

    state: dict[str, dict] = {}  # op -> tasks left, start time, results (for the op's log line)

    def task(problem, kind: str, arg, sink) -> None:
        st = state[problem.name]
        with lock:
            st["t0"] = st["t0"] or time.time()
        with slots.take() as gid:
            rows = run_task(problem, kind, arg, st, gid)
        with lock:
            _write(sink, rows)
            st["tasks"] -= 1
            if st["tasks"] == 0:
                op_done(problem, st)

    def run_task(problem, kind: str, arg, st, gid: str | None) -> list[dict]:
        if kind == "baselines":
            _step(progress, f"{problem.name}: baselines" + (f" ({len(arg)} shapes)" if st["tasks"] > 1 else ""))
            res = evaluate_baselines(problem, shapes=arg, config=pinned(base_cfg, gid))
            rows = [r for impl in want_base if impl != "peer" or has_peer(problem)
                    for r in _rows(res, impl, problem, suite, which=impl)]
            st["waits"].append(("baselines", res))
        else:
            d, ids = arg
            impl = d.name
            _step(progress, f"{problem.name}: {impl}" + (f" ({len(ids)} shapes)" if st["tasks"] > 1 else ""))
            cand = candidate_for(d, problem.name)
            if cand is None:
                res = EvalResult(status="rejected", reason=f"no candidate for {problem.name} in {d}",
                                 problem=problem.name, device=device)
                from aka.evaluate.result import ShapeResult
                res.shapes = [ShapeResult(id=s.id, label=s.label()) for s in problem.select(ids)]
            else:
                res = evaluate(problem, cand, shapes=ids, config=pinned(cfg, gid))
                st["waits"].append((impl, res))
            rows = _rows(res, impl, problem, suite)
        if gid is not None:  # which GPU of the host timed it: per-GPU timings can be compared
            for r in rows:
                r["gpu_index"] = gid
        return rows

    def save_wall() -> None:
        """The segment's wall time so far, written after every op and every 15 s (under the lock):
        a run cut off by a deadline (the device's ten-minute calls) still says how long it ran."""
        seg.update(wall_s=round(time.time() - seg["started"], 1), ops_finished=finished[0])
        meta_path.write_text(json.dumps(meta, indent=2))

    def op_done(problem, st) -> None:
        """Called under the lock when the op's last task ends."""
        _advance(progress)
        finished[0] += 1
        save_wall()
        # A line per op, with where its time went: on a GPU shared by several jobs, the wait
        # for the GPU lock (gpulock.py) is what tells a slow op from a stalled pipeline.
        from aka.evaluate.result import wall_summary
        parts = [f"{name} {r.status} {r.wall_s.get('worker_total_s', 0):.0f} s"
                 + (f" ({wall_summary(r.wall_s)})" if wall_summary(r.wall_s) else "")
                 for name, r in st["waits"]]
        n = len(problem.select(shapes_of(problem)))
        took = f"{n} shapes in {time.time() - st['t0']:.0f} s" if st["t0"] else f"{n} shapes"
        _log(progress, f"[{time.time() - t_run:6.0f} s] {finished[0]}/{len(suite.problems)} {problem.name}: "
             f"{took}" + (": " + "; ".join(parts) if parts else " (all recorded before)"))

    # Tasks: an op's baselines (in chunks where meta.json asks), then each candidate directory
    # still missing records. Ops split into chunks start first, so their long jobs overlap the rest.
    tasks, first, rest = [], [], []
    for problem in suite.problems:
        base = baseline_chunks(problem)
        ts = [(problem, "baselines", c) for c in base]
        cand = [(problem, "candidate", (d, c)) for d in cand_dirs for c in chunks(problem, [d.name])]
        ts += cand
        state[problem.name] = {"tasks": len(ts), "t0": None, "waits": []}
        split = len(base) > 1 or len(cand) > len(cand_dirs)
        (first if split else rest).append((problem, ts))
    for problem, ts in first + rest:
        tasks += ts
    with open(_records_path(opts.out), "a") as sink:
        with lock:
            for problem in suite.problems:
                if state[problem.name]["tasks"] == 0:
                    op_done(problem, state[problem.name])
        if slots.size > 1:
            # Several ops at once: their compilation, input generation and checks overlap, their
            # timed rounds take turns under the harness's GPU lock (aka/evaluate/gpulock.py), one
            # lock per physical GPU when --gpus spreads them over several.
            from concurrent.futures import ThreadPoolExecutor
            on = f" on each of GPUs {','.join(gpus)}" if gpus else ""
            _step(progress, f"{len(suite.problems)} ops, {opts.jobs} at a time{on} (timings take turns)")
            from concurrent.futures import FIRST_EXCEPTION, wait
            with ThreadPoolExecutor(slots.size) as pool:
                pending = {pool.submit(task, p, kind, arg, sink) for p, kind, arg in tasks}
                while pending:
                    finished_now, pending = wait(pending, timeout=15, return_when=FIRST_EXCEPTION)
                    for f in finished_now:
                        f.result()
                    with lock:
                        save_wall()
        else:
            for p, kind, arg in tasks:
                task(p, kind, arg, sink)
    # Every invocation (a resumed run has several) with its wall time: "the suite takes N s" is a
    # figure of the run, not a guess.
    seg.update(finished=time.time(), wall_s=round(time.time() - seg["started"], 1),
               records_after=len(load_records(opts.out)))
    meta_path.write_text(json.dumps(meta, indent=2))
    return _records_path(opts.out)


class GpuSlots:
    """`per_gpu` task slots on each of `gpus` (none: `per_gpu` slots on whatever GPU is visible).
    `take()` hands out the GPU with the most free slots, so tasks spread over the GPUs before they
    double up on one."""

    def __init__(self, gpus: list[str], per_gpu: int):
        self.gpus, self.per_gpu = list(gpus), max(1, per_gpu)
        self.size = self.per_gpu * max(1, len(self.gpus))
        self._free = {g: self.per_gpu for g in self.gpus}
        self._cv = threading.Condition()

    @contextlib.contextmanager
    def take(self):
        if not self.gpus:
            yield None
            return
        with self._cv:
            while not any(self._free.values()):
                self._cv.wait()
            gid = max(self.gpus, key=lambda g: (self._free[g], -self.gpus.index(g)))
            self._free[gid] -= 1
        try:
            yield gid
        finally:
            with self._cv:
                self._free[gid] += 1
                self._cv.notify()


def pinned(cfg: EvalConfig, gid: str | None) -> EvalConfig:
    """The evaluation's config with its judge and runner pinned to GPU `gid` (unchanged for None)."""
    if gid is None:
        return cfg
    c = copy.deepcopy(cfg)
    c.sandbox.visible_devices = gid
    return c


def _write(sink, rows: list[dict]) -> None:
    for r in rows:
        sink.write(json.dumps(r, default=str) + "\n")
    sink.flush()


def _step(progress, text: str) -> None:
    if progress is not None:
        progress.describe(text)


def _log(progress, text: str) -> None:
    if progress is not None and hasattr(progress, "log"):
        progress.log(text)


def _advance(progress) -> None:
    if progress is not None:
        progress.advance()
