"""Run one evaluation in two fresh, disposable processes: a judge that decides, and a runner that
only runs the candidate.

What this design does:
  * the verdict does not live in the candidate's process. The judge (aka/evaluate/judge.py) never
    imports the candidate: it makes the inputs, runs the reference, compares, decides every stage and
    alone writes the result, on a pipe only this parent holds. The runner (aka/evaluate/runner.py)
    imports the candidate and runs its forward on inputs handed over in shared memory (memfd on CPU,
    CUDA IPC on a GPU), copying outputs into buffers the judge owns; what it sends back is JSON
    evidence, never unpickled. Reference outputs, pristine inputs, the comparator, the baselines' timer
    and the result channel live in the judge, out of the candidate's reach, whatever names the
    candidate rebinds in its own interpreter;
  * the runner is confined (aka/evaluate/confine.py) where the machine allows: an unprivileged user
    (on a GPU the judge's uid with every capability dropped, since torch's CUDA IPC counters are
    0600 files of that uid), its own mount namespace with every mount read-only but its directory (and, on a GPU, its own
    Triton cache), the knowledge base, caches, run store and problem directory hidden, and no network.
    An audit hook in the runner refuses and reports writes outside its directory, new processes,
    sockets and writes to the harness's classes; any refusal makes the verdict `rejected`. The
    second run of the candidate that `aka eval --ncu` makes for Nsight Compute is confined the
    same way (aka/evaluate/ncu_run.py);
  * the runner snapshots, before the candidate is imported, the functions the harness trusts and
    every name in the harness's own modules and classes (aka/evaluate/guards.py), and every reply
    it sends carries the check: a rebinding at import, in a forward or in the timing stage is
    `rejected` (on the H200, 2026-12-02, a candidate rebinding `aka.evaluate.timing.torch` claimed
    a hundredth of its time and passed before this existed);
  * on a GPU the runner's sample times are claims: the judge samples the baselines itself in the same
    interleaved rounds, checks outputs of the timed work it picks afterwards in its own buffers, and
    rejects claims its own clock contradicts (aka/evaluate/timed.py);
  * on CPU, where the runner is confined as another user, the judge is a fork of a zygote that has
    imported torch and aka's harness and nothing of any evaluation (aka/evaluate/forkserver.py says
    what that keeps and where it is not used), and it forks its runner before it reads its spec; the
    runner confines itself as a fresh one is confined (confine.confine_self): the same processes,
    without two Python start-ups and torch imports per evaluation;
  * every evaluation gets its own process group, killed whole on timeout, on an idle judge (no progress
    for `idle_timeout_s`), or when the parent is interrupted; the judge dies with its parent
    (PR_SET_PDEATHSIG: SIGTERM and SIGHUP of the parent too) and the runner with the judge;
  * a scrubbed environment (no keys, tokens or credentials), private temporary directories (the judge's
    0700, the runner's its only writable place), a segfault or OOM of either process becomes `crashed`;
  * the harness hashes its own judge-side files and the problem's files before and after the run and
    rejects the result if any byte changed.

What it does NOT protect against:
  * the runner's evidence is its own: a candidate that defeats Python inside the runner (ctypes, say)
    can hide the ATen ops or kernels it used from the fallback check. On a GPU the claimed times are
    checked against the judge's clock and the outputs of timed work against the reference, so this
    buys a fallback pass at most and never a wrong answer (for faster times see the clock check below); on
    CPU there is no outside observer of ATen use at all (CPU verdicts are correctness only). Reading
    the kernels a forward launches from outside the runner (Nsight Compute attached by the judge) is
    the next step and not done yet;
  * the clock check is coarse for checked work under about a millisecond (host scheduling noise,
    the copies and a message round trip): a runner whose samples were forged by means the snapshot
    does not see (ctypes, say) could claim a faster time for a microsecond kernel than it has, and
    the judge's clock would not contradict it;
  * on a GPU the runner shares the judge's uid: it cannot remount or override permissions, but it
    can read what that uid owns (the judge's files and host memory; the reference outputs stay on
    the GPU, out of reach of the IPC handles it holds) and it could signal the judge (which then
    dies, so the evaluation fails, it does not pass);
  * without root (or where mount namespaces are refused) the runner runs as the same user with the
    file system shared; the result's env.runner says which confinement held;
  * resource limits beyond time: a candidate can fill the GPU's memory or its own directory's disk.
"""
from __future__ import annotations

import hashlib
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from aka.evaluate import forkserver
from aka.evaluate.gpulock import WAIT_STAGE
from aka.evaluate.result import EvalResult
from aka.hardware import cache_dir

PKG_ROOT = Path(__file__).resolve().parent.parent.parent  # the directory holding `aka/`

# Environment variables the worker may inherit (exact names or prefixes ending in "_").
ENV_ALLOW = ("PATH", "LANG", "LC_ALL", "TZ", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "CUDA_HOME",
             "CUDA_PATH", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "TRITON_",
             "TORCHINDUCTOR_", "PYTORCH_", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_",
             "VIRTUAL_ENV", "NCCL_", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")
ENV_DENY_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL", "AUTH")


STARTUP_S = 120.0  # the idle limit's floor before the judge's first message
DRAIN_S = 5.0      # after a worker's exit, how long the pump reads what it wrote just before


WALL_LIMIT = "stopped at its wall limit"    # the reason of an evaluation cut by wall_limit_s


@dataclass
class SandboxConfig:
    timeout_s: float = 900.0       # whole evaluation
    idle_timeout_s: float = 180.0  # no progress message for this long: hung kernel or loop
    gpu_wait_max_s: float = 3600.0  # waiting for the GPU (gpulock.py) not charged, up to this
    keep_dir: bool = False         # keep the temporary directory (debugging)
    visible_devices: str | None = None  # GPU: CUDA_VISIBLE_DEVICES of the judge and runner (None: inherited)
    # A hard wall limit, GPU waits included (None: none): what a run with a deadline gives one
    # evaluation (`aka kb verify --budget`). timeout_s leaves waits uncharged, so on 2026-12-06 (H100,
    # --jobs 4) budgeted verifies ran past their budgets by the waits and were killed from outside.
    wall_limit_s: float | None = None


def scrubbed_env(extra: dict | None = None) -> dict:
    env = {}
    for k, v in os.environ.items():
        allowed = any(k == a or (a.endswith("_") and k.startswith(a)) for a in ENV_ALLOW)
        if allowed and not any(w in k.upper() for w in ENV_DENY_WORDS):
            env[k] = v
    # Triton and Inductor caches stay shared across evaluations: recompiling every kernel and
    # baseline per evaluation would cost the agent minutes per round.
    cache = cache_dir()
    env.setdefault("TRITON_CACHE_DIR", str(Path(os.environ.get("TRITON_CACHE_DIR", cache / "triton"))))
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache / "inductor"))
    # A baseline graph is one to three kernels: compile them in the worker, not in a pool of
    # compile processes per worker (one per core by default), which parallel evaluations
    # (--jobs) would multiply into hundreds of processes.
    env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    env["PYTHONPATH"] = str(PKG_ROOT)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def judge_env_extra(tmp: Path, rdir: Path) -> dict:
    """What the judge's environment adds to scrubbed_env: its own temporary HOME, the runner's
    directory, and the cache root of the caller (AKA_CACHE_DIR is not among the variables that
    pass the scrub). Without the last, the judge took its HOME, a temporary directory, for the
    cache root (H200, 2026-12-03): its runners' per-candidate Triton caches lived and died with
    each evaluation, it looked for its driver module in the wrong place, and the cache paths it
    hides from its runner were ones that did not exist."""
    return {"HOME": str(tmp / "home"), "TMPDIR": str(tmp), "AKA_RUNNER_DIR": str(rdir),
            "AKA_PARENT_PID": str(os.getpid()), "AKA_CACHE_DIR": str(cache_dir().resolve())}


def hash_files(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for p in sorted(paths):
        h.update(str(p).encode())
        h.update(p.read_bytes() if p.exists() else b"<missing>")
    return h.hexdigest()


def trusted_files(problem_files: list[Path]) -> list[Path]:
    """Every aka file the worker may import (the whole aka/evaluate package, aka/__init__.py,
    aka/hardware.py and aka/util.py) plus the problem's own files."""
    here = Path(__file__).resolve().parent
    pkg = here.parent
    return sorted(here.glob("*.py")) + [pkg / "__init__.py", pkg / "hardware.py", pkg / "util.py"] \
        + [p for p in problem_files if p]


def run_worker(spec, candidate_source: str, problem_files: list[Path],
               cfg: SandboxConfig | None = None, on_progress=None) -> EvalResult:
    """Run the judge (which starts the runner) on `spec` (an EvalSpec) and return its result."""
    cfg = cfg or SandboxConfig()
    tmp = Path(tempfile.mkdtemp(prefix="aka-eval-"))  # the judge's: 0700, the runner cannot read it
    rdir = Path(tempfile.mkdtemp(prefix="aka-run-"))  # the runner's: the only place it may write
    files = trusted_files(problem_files)
    before = hash_files(files)
    t_start = time.perf_counter()
    try:
        (tmp / "home").mkdir()
        (rdir / "home").mkdir()
        cand = rdir / "candidate.py"
        cand.write_text(candidate_source)
        spec = spec.with_(candidate=str(cand))
        (tmp / "spec.json").write_text(spec.dumps())
        extra = judge_env_extra(tmp, rdir)
        if spec.device == "cpu":
            extra["TRITON_INTERPRET"] = "1"
            extra["CUDA_VISIBLE_DEVICES"] = ""
        elif cfg.visible_devices is not None:  # one GPU of several (aka bench run --gpus): it is cuda:0 inside
            extra["CUDA_VISIBLE_DEVICES"] = cfg.visible_devices
        r, w = os.pipe()
        out_f, err_f = open(tmp / "stdout.txt", "wb"), open(tmp / "stderr.txt", "wb")
        env = scrubbed_env(extra)
        proc = _forked_judge(spec, tmp, env, w, out_f, err_f)
        if proc is None:
            proc = subprocess.Popen(
                [sys.executable, "-m", "aka.evaluate.judge", str(tmp / "spec.json"), str(w)],
                cwd=tmp, env=env, stdin=subprocess.DEVNULL, stdout=out_f, stderr=err_f,
                pass_fds=(w,), start_new_session=True)
        os.close(w)
        result, killed = _pump(proc, r, cfg, on_progress)
        out_f.close()
        err_f.close()
        elapsed = time.perf_counter() - t_start
        if result is None:
            result = _death_result(proc.returncode, killed, cfg, tmp, spec.problem["name"], spec.device)
        result.stdout_tail = _tail(tmp / "stdout.txt")
        result.stderr_tail = _tail(tmp / "stderr.txt")
        result.wall_s["total_s"] = round(elapsed, 3)
        # how this evaluation's judge was born: a fork of the zygote (forkserver.py) or a fresh interpreter
        result.env["judge"] = "forked" if isinstance(proc, forkserver.ForkedJudge) else "fresh"
        if hash_files(files) != before:
            result.status = "rejected"
            result.reason = "harness or problem files changed during the evaluation; result discarded"
        return result
    finally:
        if not cfg.keep_dir:
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.rmtree(rdir, ignore_errors=True)


def _forked_judge(spec, tmp: Path, env: dict, w: int, out_f, err_f):
    """A CPU judge forked from a zygote that has imported torch already (aka/evaluate/forkserver.py,
    where it is used and why), or None: the judge starts fresh."""
    if spec.device != "cpu" or not forkserver.enabled(spec.device, spec.settings.runner_user):
        return None
    if os.environ.get("AKA_RUNNER_FORK") == "0":  # its judges start their runners fresh too
        env = dict(env, AKA_RUNNER_FORK="0")
    srv = forkserver.server_for(env, forkserver.harness_stamp(trusted_files([])))
    if srv is None:
        return None
    try:
        return srv.spawn(str(tmp / "spec.json"), w, str(tmp), env, out_f.fileno(), err_f.fileno())
    except (OSError, RuntimeError) as e:
        print(f"aka: the judge starts fresh ({e})", file=sys.stderr)
        forkserver.forget(srv)
        return None


def _pump(proc, fd, cfg, on_progress):
    """Read protocol messages until the result arrives, the worker dies, or a timeout kills it."""
    sel = selectors.DefaultSelector()
    sel.register(fd, selectors.EVENT_READ)
    buf, result, killed = b"", None, None
    last_stage = {}
    t0 = last = time.monotonic()
    started = None
    waited, wait_since = 0.0, None
    ended = False
    try:
        while True:
            now = time.monotonic()
            # Waiting for another evaluation's timing to finish (gpulock.py) is neither idleness
            # nor this evaluation's time.
            held = min(cfg.gpu_wait_max_s, waited + (now - wait_since if wait_since is not None else 0.0))
            if wait_since is not None:
                last = now
            if now - t0 - held > cfg.timeout_s:
                killed = f"timed out after {cfg.timeout_s:.0f} s"
                break
            if cfg.wall_limit_s is not None and now - t0 > cfg.wall_limit_s:
                killed = f"{WALL_LIMIT} ({cfg.wall_limit_s:.0f} s)"
                break
            # Before the judge's first message its start-up (torch's import, seconds on a busy host)
            # is not idleness: the idle limit applies from then on, with a floor for the start.
            idle_limit = cfg.idle_timeout_s if started is not None else max(cfg.idle_timeout_s, STARTUP_S)
            if now - last > idle_limit:
                killed = f"no progress for {idle_limit:.0f} s (hung kernel or infinite loop)"
                break
            events = sel.select(timeout=0.2)
            if events:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    break  # worker closed the pipe: exited or died
                buf += chunk
            elif proc.poll() is not None:
                # Exited. Its last lines (the result) may have reached the pipe after the select above
                # timed out and before the poll: read what is left before giving up on it (a CPU
                # verdict came back as "exited with code 0 before reporting" once in CI, 2026-12-07).
                # A child that inherited the pipe can keep it open, or write to it: bounded waits and at
                # most DRAIN_S in all, not read-to-EOF.
                drain_end = time.monotonic() + DRAIN_S
                while time.monotonic() < drain_end and sel.select(timeout=0.5):
                    chunk = os.read(fd, 1 << 16)
                    if not chunk:
                        break
                    buf += chunk
                ended = True
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                try:
                    msg = json.loads(line)
                except json.JSONDecodeError:
                    continue
                last = time.monotonic()
                if msg.get("stage") == WAIT_STAGE:
                    wait_since = wait_since if wait_since is not None else last
                elif wait_since is not None:
                    waited, wait_since = waited + last - wait_since, None
                if started is None:
                    started = last - t0
                if msg.get("event") == "result":
                    result = EvalResult.from_json(msg["result"])
                else:
                    last_stage.update(msg)
                    if on_progress is not None:
                        on_progress(msg)
            if ended:
                break
    except KeyboardInterrupt:
        _kill_group(proc)
        raise
    finally:
        sel.close()
        os.close(fd)
        if killed or result is None:
            _kill_group(proc)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            proc.wait(timeout=10)
        _kill_group(proc)  # children the worker left behind (it has already sent its result)
    if result is not None and started is not None:
        result.wall_s["worker_start_s"] = round(started, 3)
    if result is None and last_stage.get("stage"):
        where = last_stage["stage"] + (f", shape {last_stage['shape']}" if last_stage.get("shape") else "")
        killed = (killed or "") + f" [during {where}]"
    return result, killed


def _kill_group(proc) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _death_result(code, killed, cfg, tmp: Path, name: str, device: str) -> EvalResult:
    err = _tail(tmp / "stderr.txt", 1500)
    during = ""
    if killed and killed.startswith(" [during"):
        during, killed = killed, None
    elif killed and " [during" in killed:
        killed, during = killed.split(" [during", 1)
        during = " [during" + during
    if killed:
        killed += during
        return EvalResult(status="timeout", reason=killed, problem=name, device=device)
    if code is not None and code < 0:
        try:
            sig = signal.Signals(-code).name
        except ValueError:
            sig = str(-code)
        why = f"worker killed by {sig}"
    else:
        why = f"worker exited with code {code} before reporting"
    why += during
    low = err.lower()
    if "out of memory" in low or "memoryerror" in low or "cannot allocate" in low:
        why += " (out of memory)"
    return EvalResult(status="crashed", reason=why + (f": {err.strip().splitlines()[-1]}" if err.strip() else ""),
                      problem=name, device=device)


def _tail(path: Path, n: int = 2000) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-n:].decode("utf-8", "replace")
