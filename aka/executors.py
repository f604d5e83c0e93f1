"""Run many independent jobs: on this host's GPUs (`LocalExecutor`) or on a Ray cluster (`RayExecutor`).

A job names an importable function (`"package.module:function"`) and JSON keyword arguments; it
writes its own durable outputs and returns a small JSON value. The executor knows nothing about
what the jobs do (`aka convert` runs `optimize` in them, `aka exp` runs ablation arms), and
`on_result` is called in the parent as each job ends, so a caller that records results there
loses none when the batch dies.

Every job runs in a child process of its own process group, started with `CUDA_VISIBLE_DEVICES`
already set (torch reads it once, at its first CUDA call, so it must be pinned before the job
imports torch), so a timed-out job is killed whole, and a job that segfaults or is killed is a
failed `JobResult` while the batch goes on. The child also gets SIGKILL when the thread that
started it ends (PR_SET_PDEATHSIG; the executor's process dying included), so a killed executor
leaves no job running. Not covered: processes a job starts in *their own* sessions (the harness's
evaluation workers) are outside its group and end on their own timeouts, and children a job
forks itself outlive an executor killed with SIGKILL (the death signal is not inherited).

On a multi-node Ray cluster every node must have this repository (and the jobs' modules) at the
driver's path: the tasks put it on PYTHONPATH rather than shipping code (no runtime_env upload).
"""
from __future__ import annotations

import ctypes
import importlib
import json
import os
import queue
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol


@dataclass
class Job:
    id: str
    fn: str                          # "package.module:function", called as fn(**kwargs)
    kwargs: dict = field(default_factory=dict)  # JSON-serialisable
    gpus: float = 1.0                # GPUs the job needs: 0 (CPU), a fraction, or 1
    timeout_s: float | None = None   # wall limit from the job's start; None: no limit


@dataclass
class JobResult:
    id: str
    ok: bool
    value: object | None             # the function's JSON return value
    error: str | None                # one line first, then the traceback's or stderr's tail
    wall_s: float
    worker: str                      # host/pid/CUDA_VISIBLE_DEVICES of the process that ran it
    attempts: int

    def to_dict(self) -> dict:
        return asdict(self)


class Executor(Protocol):
    def run(self, jobs: list[Job], on_result: Callable[[JobResult], None] | None = None) -> list[JobResult]: ...


class JobError(RuntimeError):
    """A job function could not be named or imported (raised in the child, reported as a failure)."""


def resolve_fn(spec: str) -> Callable:
    mod, sep, name = spec.partition(":")
    if not sep or not mod or not name:
        raise JobError(f"job function {spec!r} is not 'package.module:function'")
    obj = importlib.import_module(mod)
    for part in name.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise JobError(f"{spec} is not callable")
    return obj


def _check_jobs(jobs: list[Job]) -> None:
    seen = set()
    for j in jobs:
        if j.id in seen:
            raise ValueError(f"duplicate job id {j.id!r}")
        seen.add(j.id)
        json.dumps(j.kwargs)  # fails here, in the caller, rather than in a child


# -- the child process ----------------------------------------------------------------------------

TAIL_CHARS = 3000
PKG_ROOT = Path(__file__).resolve().parent.parent  # the directory holding `aka/`


def _die_with_parent() -> None:
    """SIGKILL this process when the thread that started it ends (Linux prctl PR_SET_PDEATHSIG).
    Set here, in the child, rather than in a preexec_fn, which is unsafe while the parent runs
    threads (the slots start workers from several at once). A parent gone before the call is
    caught by comparing the parent pid with the one the parent wrote down."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    except OSError:
        return
    if str(os.getppid()) != os.environ.get("AKA_EXECUTOR_PARENT", str(os.getppid())):
        os._exit(1)


def _worker_main() -> None:
    """`python -m aka.executors`: read job lines on stdin, answer each on the original stdout.
    The job's own prints go to stderr (its log), so they cannot be mistaken for a result."""
    _die_with_parent()
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    for line in sys.stdin:
        if not line.strip():
            continue
        msg = json.loads(line)
        t0 = time.monotonic()
        print(f"[aka.executors] job {msg['id']} start", file=sys.stderr, flush=True)
        try:
            value = resolve_fn(msg["fn"])(**msg["kwargs"])
            text = json.dumps({"ok": True, "value": value, "wall_s": time.monotonic() - t0})
        except BaseException as e:  # noqa: BLE001  the job's failure is data; the worker goes on
            if isinstance(e, KeyboardInterrupt):
                raise
            text = json.dumps({"ok": False, "value": None, "wall_s": time.monotonic() - t0,
                               "error": f"{type(e).__name__}: {e}\n{traceback.format_exc()[-TAIL_CHARS:]}"})
        sys.stderr.flush()
        out.write(text + "\n")


class _Worker:
    """One child process running jobs one at a time; replaced after a timeout or a crash."""

    def __init__(self, cuda: str | None, log_path: Path, env: dict | None = None):
        self.cuda, self.log_path = cuda, log_path
        full = dict(os.environ if env is None else env)
        # The child imports this `aka` (and the job's module beside it) whatever its cwd.
        full["PYTHONPATH"] = os.pathsep.join(p for p in [str(PKG_ROOT), full.get("PYTHONPATH", "")] if p)
        full["AKA_EXECUTOR_PARENT"] = str(os.getpid())
        if cuda is not None:
            full["CUDA_VISIBLE_DEVICES"] = cuda
        self.log = open(log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "aka.executors"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, env=full,
                                     start_new_session=True)
        self.name = f"{socket.gethostname()}/{self.proc.pid}/cuda={cuda if cuda is not None else 'inherit'}"
        self._buf = b""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        if not self.log.closed:
            self.log.close()

    def _log_tail(self, since: int) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(since)
                return f.read().decode("utf-8", "replace")[-TAIL_CHARS:]
        except OSError:
            return ""

    def run(self, job: Job) -> JobResult:
        """Run one job; on timeout or death the worker is killed and this returns a failure."""
        since = self.log_path.stat().st_size if self.log_path.exists() else 0
        t0 = time.monotonic()
        deadline = None if job.timeout_s is None else t0 + job.timeout_s

        def fail(error: str) -> JobResult:
            self.kill()  # the group first, so the log is complete when its tail is read
            return JobResult(job.id, False, None, f"{error}\n{self._log_tail(since)}",
                             time.monotonic() - t0, self.name, 1)

        try:
            self.proc.stdin.write((json.dumps({"id": job.id, "fn": job.fn, "kwargs": job.kwargs}) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return fail("worker died before the job started")
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([fd], [], [], wait)
            if not ready:
                return fail(f"timeout: killed after {job.timeout_s:g} s (whole process group)")
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                code = self.proc.wait()
                how = f"signal {-code}" if code < 0 else f"exit code {code}"
                return fail(f"crashed: the job's process ended ({how})")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        msg = json.loads(line)
        return JobResult(job.id, msg["ok"], msg.get("value"), msg.get("error"), msg["wall_s"], self.name, 1)


def run_one(job: Job, cuda: str | None = None, log_path: Path | None = None) -> JobResult:
    """One job in a fresh child (what each Ray task does)."""
    if log_path is None:
        fd, name = tempfile.mkstemp(prefix="aka-job-", suffix=".log")
        os.close(fd)
        log_path = Path(name)
    w = _Worker(cuda, log_path)
    try:
        return w.run(job)
    finally:
        w.kill()


# -- local: one worker per GPU slot ---------------------------------------------------------------

def detect_gpus() -> list[str]:
    """GPU ids to pin, without importing torch: CUDA_VISIBLE_DEVICES when set, else NVML's count."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [g.strip() for g in env.split(",") if g.strip() and g.strip() != "-1"]
    try:
        import pynvml
        pynvml.nvmlInit()
        try:
            return [str(i) for i in range(pynvml.nvmlDeviceGetCount())]
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001  no driver, no GPU: the CPU
        return []


class LocalExecutor:
    """`len(gpus) * jobs_per_gpu` worker processes, each pinned to one GPU with
    CUDA_VISIBLE_DEVICES (jobs sharing a GPU coordinate their timed regions through the harness's
    GPU lock, aka/evaluate/gpulock.py); with no GPUs, `cpu_workers` workers that see none."""

    def __init__(self, gpus: list[str] | None = None, jobs_per_gpu: int = 1, cpu_workers: int = 1,
                 log_dir: str | Path | None = None):
        if jobs_per_gpu < 1 or cpu_workers < 1:
            raise ValueError("jobs_per_gpu and cpu_workers must be at least 1")
        self.gpus = detect_gpus() if gpus is None else [str(g) for g in gpus]
        # "" hides every GPU from the child: a CPU slot must not grab one the GPU slots own.
        # GPU-major round robin: a batch smaller than the slots still spreads over every GPU
        self.slots = [g for _ in range(jobs_per_gpu) for g in self.gpus] if self.gpus else [""] * cpu_workers
        self.log_dir = Path(log_dir) if log_dir else Path(tempfile.mkdtemp(prefix="aka-executor-"))
        self.log_dir.mkdir(parents=True, exist_ok=True)

    def __repr__(self) -> str:
        return f"LocalExecutor(slots={self.slots or 'cpu'}, logs={self.log_dir})"

    def run(self, jobs: list[Job], on_result: Callable[[JobResult], None] | None = None) -> list[JobResult]:
        _check_jobs(jobs)
        for j in jobs:
            if j.gpus > 1:
                raise ValueError(f"job {j.id} asks for {j.gpus} GPUs; a local worker is pinned to one")
        todo: queue.Queue = queue.Queue()
        for j in jobs:
            todo.put(j)
        results: dict[str, JobResult] = {}
        lock = threading.Lock()
        workers: list[_Worker] = []
        errors: list[BaseException] = []

        def slot(i: int, cuda: str) -> None:
            w = None
            try:
                while True:
                    try:
                        job = todo.get_nowait()
                    except queue.Empty:
                        return
                    if w is None or not w.alive():
                        w = _Worker(cuda, self.log_dir / f"slot{i}.log")
                        with lock:
                            workers.append(w)
                    res = w.run(job)
                    with lock:
                        results[job.id] = res
                        if on_result is not None:
                            on_result(res)  # serialised: the caller's record needs no lock of its own
            except BaseException as e:  # noqa: BLE001  surfaced in the parent thread below
                errors.append(e)
            finally:
                if w is not None:
                    w.kill()

        threads = [threading.Thread(target=slot, args=(i, c), daemon=True, name=f"aka-slot{i}")
                   for i, c in enumerate(self.slots[:max(1, len(jobs))])]
        try:
            for t in threads:
                t.start()
            for t in threads:
                while t.is_alive():
                    t.join(0.5)  # short joins keep ^C deliverable to this thread
        finally:
            with lock:
                for w in workers:
                    if w.alive():
                        w.kill()
        if errors:
            raise errors[0]
        return [results[j.id] for j in jobs]


# -- Ray --------------------------------------------------------------------------------------------

def _ray_task(job: dict) -> dict:
    """Runs on a Ray worker: the job in a child of its own (timeout kills its group; a segfault
    is a failure, not a dead Ray worker). Ray has already pinned CUDA_VISIBLE_DEVICES to the
    task's GPUs, and the child inherits it."""
    j = Job(**job)
    res = run_one(j, cuda=None)
    res.worker = f"{socket.gethostname()}/{os.getpid()}/cuda={os.environ.get('CUDA_VISIBLE_DEVICES', '')}" \
                 f" (child {res.worker.split('/')[1]})"
    return res.to_dict()


class RayExecutor:
    """Jobs as Ray tasks with `num_gpus` on an existing cluster (`address`, e.g. "auto" or
    "ray://head:10001"; None starts a local one unless RAY_ADDRESS names one).

    Retries: a task whose Ray worker or node died is submitted again up to `max_retries` times.
    Ray's own `max_retries` does the same for system failures but does not tell the caller how
    many attempts ran; resubmitting here records `attempts`. A job that fails by itself (raises,
    times out, crashes its child) is not retried: it would fail the same way.
    """

    def __init__(self, address: str | None = None, num_gpus_per_job: float | None = None, max_retries: int = 1,
                 num_cpus_per_job: float = 1.0, init_kwargs: dict | None = None):
        self.address, self.num_gpus_per_job, self.max_retries = address, num_gpus_per_job, max_retries
        self.num_cpus_per_job, self.init_kwargs = num_cpus_per_job, dict(init_kwargs or {})

    def __repr__(self) -> str:
        return f"RayExecutor(address={self.address!r}, num_gpus_per_job={self.num_gpus_per_job})"

    def _ray(self):
        try:
            import ray
        except ImportError:
            raise ImportError("the Ray executor needs Ray: pip install 'aka[ray]'") from None
        if not ray.is_initialized():
            kw = {"include_dashboard": False, "log_to_driver": False, **self.init_kwargs}
            # The job children import `aka` (and the job's module) the way this process does.
            paths = [str(PKG_ROOT), os.getcwd(), os.environ.get("PYTHONPATH", "")]
            env = {"PYTHONPATH": os.pathsep.join(p for p in paths if p)}
            kw.setdefault("runtime_env", {"env_vars": env})
            ray.init(address=self.address, **kw)
        return ray

    def run(self, jobs: list[Job], on_result: Callable[[JobResult], None] | None = None) -> list[JobResult]:
        _check_jobs(jobs)
        ray = self._ray()
        task = ray.remote(max_retries=0)(_ray_task)
        cluster_gpus = max((n.get("Resources", {}).get("GPU", 0) for n in ray.nodes() if n.get("Alive")), default=0)
        need = {j.id: (self.num_gpus_per_job if self.num_gpus_per_job is not None else j.gpus) for j in jobs}
        for j in jobs:
            if need[j.id] > cluster_gpus:
                raise ValueError(f"job {j.id} needs {need[j.id]} GPUs; the largest Ray node has {cluster_gpus}")
        by_id = {j.id: j for j in jobs}
        attempts = {j.id: 0 for j in jobs}
        pending: dict = {}

        def submit(j: Job) -> None:
            attempts[j.id] += 1
            ref = task.options(num_gpus=need[j.id], num_cpus=self.num_cpus_per_job, name=f"aka-job-{j.id}").remote(
                asdict(j))
            pending[ref] = (j.id, time.monotonic())

        for j in jobs:
            submit(j)
        results: dict[str, JobResult] = {}
        crash_types = tuple(getattr(ray.exceptions, n) for n in
                            ("WorkerCrashedError", "NodeDiedError", "LocalRayletDiedError", "OwnerDiedError",
                             "ActorDiedError", "TaskUnschedulableError") if hasattr(ray.exceptions, n))
        try:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
                for ref in done:
                    jid, t0 = pending.pop(ref)
                    try:
                        res = JobResult(**ray.get(ref))
                        res.attempts = attempts[jid]
                    except crash_types as e:
                        if attempts[jid] <= self.max_retries:
                            submit(by_id[jid])
                            continue
                        res = JobResult(jid, False, None, f"ray: {type(e).__name__}: {str(e)[:TAIL_CHARS]}",
                                        time.monotonic() - t0, "ray", attempts[jid])
                    except Exception as e:  # noqa: BLE001  any other Ray error is this job's failure
                        res = JobResult(jid, False, None, f"ray: {type(e).__name__}: {str(e)[:TAIL_CHARS]}",
                                        time.monotonic() - t0, "ray", attempts[jid])
                    results[jid] = res
                    if on_result is not None:
                        on_result(res)
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)
        return [results[j.id] for j in jobs]


def make_executor(kind: str, **opts) -> Executor:
    """`local` (gpus, jobs_per_gpu, cpu_workers, log_dir) or `ray` (address, num_gpus_per_job,
    max_retries, num_cpus_per_job, init_kwargs)."""
    if kind == "local":
        return LocalExecutor(**opts)
    if kind == "ray":
        return RayExecutor(**opts)
    raise ValueError(f"unknown executor {kind!r} (local or ray)")


if __name__ == "__main__":
    _worker_main()
