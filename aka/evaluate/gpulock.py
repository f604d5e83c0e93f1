"""Several evaluations on one GPU: checks share it, timing owns it.

Correctness, outlier and fallback stages only need the right answer, so evaluations may run
them side by side on one GPU (`aka kb verify --jobs`, the offline sweep). A timed region must see
an idle GPU: another process's kernels would steal bandwidth and SMs and the measured time would
be wrong. The worker therefore holds a *shared* lock while it checks and an *exclusive* lock while
it times (eager and torch.compile baselines included); an exclusive holder waits until every
shared holder has left, and nobody new enters meanwhile (writer preference through a turnstile
lock), so timing is never starved by a stream of checks.

The locks are `flock`s on files under the cache directory, one pair per physical GPU (its UUID
where torch gives one): the kernel releases them when a process dies, so a crashed or killed
worker never leaves the GPU locked. Waiting emits a progress message every few seconds, stage
`gpu_wait`; the sandbox neither counts that as idleness nor charges it to the evaluation's time
limit.

What the lock cannot isolate is the host: the un-graphed per-call time (`eager_call_us`), which
measures launch cost on purpose, can see other evaluations' processes on the CPU.

Kernels are asynchronous, so a holder drains its GPU work (`torch.cuda.synchronize`) before it
lets go. A single evaluation pays one uncontended `flock` per stage: nothing measurable.
"""
from __future__ import annotations

import fcntl
import os
import time
from contextlib import contextmanager
from pathlib import Path

WAIT_STAGE = "gpu_wait"
HEARTBEAT_S = 5.0
# A shared hold lets go and re-enters at a `breathe()` once it has lasted this long: a timing
# that waits then starts within about this much (plus one call), not after the longest stretch
# of checks or input generation of any evaluation (a convoy: see `breathe`).
SLICE_S = 0.05
POLL_S = (0.001, 0.002)  # the wait between tries for a held lock: from the first, doubling to the second


def gpu_key(device: str) -> str:
    import torch
    idx = torch.device(device).index or 0
    try:
        uuid = str(torch.cuda.get_device_properties(idx).uuid)
    except Exception:  # noqa: BLE001 - older torch: fall back to the visible index
        uuid = ""
    return (uuid or f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'all')}-{idx}").replace("/", "_")


class GpuLock:
    def __init__(self, root: str | Path, key: str, emit=None, drain=None):
        self.dir = Path(root)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.key, self.emit = key, emit
        self.drain = drain  # waits for this process's queued GPU work (torch.cuda.synchronize)
        self.waited_s = 0.0
        self.waited_exclusive_s = 0.0  # the part of waited_s spent waiting to time (the rest: to check)
        self.held_s = 0.0  # seconds this process owned the GPU (exclusive holds)
        self.compiling_s = 0.0  # seconds a shared hold was let go for compiles
        self._hold = None  # the shared hold in progress: {"fd": its fd or None while compiling, "since": entry}
        self._exclusive = False
        # per label of shared(), the longest stretch held without letting go: what a waiting
        # timing had to sit out, and so what to shorten when evaluations wait on each other
        self.longest = {}

    def _acquire(self, name: str, mode: int) -> int:
        fd = os.open(self.dir / f"{self.key}.{name}", os.O_RDWR | os.O_CREAT, 0o666)
        t0 = next_beat = time.monotonic()
        pause = POLL_S[0]
        while True:
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
                self.waited_s += time.monotonic() - t0
                return fd
            except BlockingIOError:
                now = time.monotonic()
                if self.emit is not None and now >= next_beat:
                    self.emit({"event": "progress", "stage": WAIT_STAGE, "shape": None, "t": time.time()})
                    next_beat = now + HEARTBEAT_S
                time.sleep(pause)
                pause = min(2 * pause, POLL_S[1])

    @staticmethod
    def _release(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)

    def _enter(self, mode: int) -> int:
        w0 = self.waited_s
        gate = self._acquire("turnstile", fcntl.LOCK_EX)
        try:
            return self._acquire("lock", mode)
        finally:
            self._release(gate)
            if mode == fcntl.LOCK_EX:
                self.waited_exclusive_s += self.waited_s - w0

    def _leave(self, fd: int) -> None:
        # Kernels are asynchronous: work queued under the lock must finish before the lock goes,
        # or it would run inside the next holder's timed region.
        if self.drain is not None:
            try:
                self.drain()
            except Exception:  # noqa: BLE001 - a dead context: the error that killed it propagates
                pass
        self._release(fd)

    def _stretch_ends(self, state) -> None:
        t = time.monotonic() - state["since"]
        if t > self.longest.get(state["label"], 0.0):
            self.longest[state["label"]] = t

    @contextmanager
    def shared(self, label: str = "shared"):
        """A shared hold that lets go while this process compiles: torch.compile (dynamo's compile
        callbacks) and Triton's JIT (its `jit_cache_hook`, called before a compile, and
        `jit_post_compile_hook`, after) release it at a compile's start, after draining the GPU,
        and take it again at the compile's end.

        Compiles are host work: seconds for each new specialization of a Triton kernel (every
        shape of a check stage), minutes for each value pattern of a value-dependent reference
        (MoE routing, sequence lengths) under torch.compile. A shared hold across them kept every
        other evaluation's timed round waiting on a CPU (an exclusive holder waits for all shared
        holders, and the turnstile then stops new ones): in one H200 `kb verify --jobs 8` (2026-11-30),
        each kernel held the GPU 3 s and waited 90-195 s for it. The GPU work between compiles
        still runs under the lock; a Triton launch after a compile that never reported its end
        (it raised, and the candidate caught it) takes the lock again first.

        The candidate's kernels compile in the runner, another process, where these hooks do not
        reach, so by default they compile under the judge's shared hold: in the 2026-12-04 H200
        suite run (8 jobs) each op held the GPU exclusively ~3 s and waited ~90-125 s for it, with
        shared stretches of up to 5 s in its check stages, where every new shape is a new
        specialization. With `unlock_compiles` (trusted candidates only) the runner reports its
        compiles over the channel (aka/evaluate/runner.py, report_compiles) and the judge's client
        calls `compile_started` / `compile_ended`. Not the default: code in the runner's process
        could use the reports to run GPU work while the hold is let go, during another evaluation's
        timing."""
        outer = self._hold
        state = self._hold = {"fd": self._enter(fcntl.LOCK_SH), "since": time.monotonic(), "label": label}

        def start(*_args, **_kwargs):
            if state["fd"] is not None:
                fd, state["fd"] = state["fd"], None
                self._leave(fd)
                self._stretch_ends(state)
                state["t"] = time.monotonic()
            return None  # Triton skips the compile when its cache hook returns something truthy

        def end(*_args, **_kwargs):
            if state["fd"] is None:
                self.compiling_s += time.monotonic() - state.pop("t", time.monotonic())
                state["fd"], state["since"] = self._enter(fcntl.LOCK_SH), time.monotonic()
            return None

        state["start"], state["end"] = start, end  # the runner's compiles, reported over the channel
        undo = _compile_hooks(start, end)
        try:
            yield
        finally:
            undo()
            self._hold = outer
            if state["fd"] is not None:
                self._leave(state["fd"])
                self._stretch_ends(state)

    def holding_shared(self) -> bool:
        """Inside a shared hold (not an exclusive one): where a compile may let the GPU go."""
        return self._hold is not None and not self._exclusive

    def compile_started(self) -> None:
        """The runner, whose compiles this process's hooks do not see, says one starts (it has
        drained its own GPU work first): let the shared hold go, as for a compile here."""
        if self.holding_shared():
            self._hold["start"]()

    def compile_ended(self) -> None:
        """The runner's compile is over: take the shared hold again before it launches anything
        (it waits for the judge's answer to its message)."""
        if self._hold is not None and not self._exclusive:
            self._hold["end"]()

    def breathe(self) -> None:
        """Inside a shared hold, between two pieces of work: once the hold has lasted SLICE_S,
        let go (draining this process's GPU work) and take it again, so that a timing waiting
        for the GPU gets it now rather than at the hold's end.

        An exclusive waiter waits for every shared holder to leave while the turnstile keeps new
        ones out, so one long shared stretch stalled every evaluation on the GPU: in one H200 run's (2026-11-30)
        suite baselines (8 jobs), each operator waited ~100 s for the GPU, ~70 s of it to
        check or make inputs, and held it exclusively 7 s; the holds were hundreds of
        `make_inputs` calls and first calls over up to 256 input sets, host work at heart. Without
        a waiting timing, a breath costs a drain and three uncontended `flock`s."""
        st = self._hold
        if st is None or st["fd"] is None or time.monotonic() - st["since"] < SLICE_S:
            return
        fd, st["fd"] = st["fd"], None
        self._leave(fd)
        self._stretch_ends(st)
        st["fd"], st["since"] = self._enter(fcntl.LOCK_SH), time.monotonic()

    @contextmanager
    def exclusive(self):
        fd = self._enter(fcntl.LOCK_EX)
        t0 = time.monotonic()
        self._exclusive = True
        try:
            yield
        finally:
            self._exclusive = False
            self._leave(fd)
            self.held_s += time.monotonic() - t0


def _compile_hooks(start, end):
    """Register start/end around this process's compiles; returns the function that unregisters
    them. Hooks that are not there (a torch without dynamo's callbacks, Triton absent) are skipped:
    the hold then covers those compiles too (slower, never less isolated)."""
    undo = []
    try:
        from torch._dynamo.callback import callback_handler as dyn
    except Exception:  # noqa: BLE001 - a torch without dynamo's compile callbacks
        dyn = None
    if dyn is not None and all(hasattr(dyn, m) for m in ("register_start_callback", "register_end_callback",
                                                          "remove_start_callback", "remove_end_callback")):
        dyn.register_start_callback(start)
        dyn.register_end_callback(end)

        def undo_dynamo():
            for remove, cb in ((dyn.remove_start_callback, start), (dyn.remove_end_callback, end)):
                try:
                    remove(cb)
                except ValueError:  # torch._dynamo.reset() inside the hold cleared them
                    pass
        undo.append(undo_dynamo)
    try:
        from triton import knobs
        rt = knobs.runtime
        hooks_there = all(hasattr(rt, h) for h in ("jit_cache_hook", "jit_post_compile_hook", "launch_enter_hook"))
    except Exception:  # noqa: BLE001 - no Triton, or one without runtime knobs
        hooks_there = False
    if hooks_there:
        before = (rt.jit_cache_hook, rt.jit_post_compile_hook)

        def chained(mine, theirs):
            def hook(*args, **kwargs):
                mine()
                return theirs(*args, **kwargs) if theirs is not None else None
            return hook
        rt.jit_cache_hook = chained(start, before[0])
        rt.jit_post_compile_hook = chained(end, before[1])
        relock = (lambda *_a, **_k: end()) if hasattr(rt.launch_enter_hook, "add") else None
        if relock is not None:
            rt.launch_enter_hook.add(relock)

        def undo_triton():
            rt.jit_cache_hook, rt.jit_post_compile_hook = before
            if relock is not None:
                rt.launch_enter_hook.remove(relock)
        undo.append(undo_triton)

    def undo_all():
        for u in reversed(undo):
            u()
    return undo_all


# The lock's share of an evaluation's wall time, as the worker reports it (EvalResult.wall_s).
LOCK_TIMES = {"gpu_wait_s": "waited_s", "gpu_wait_to_time_s": "waited_exclusive_s", "gpu_held_s": "held_s",
              "compiling_unlocked_s": "compiling_s"}


LONGEST = "longest_shared_{}_s"  # wall_s keys: the longest shared stretch of each label


def lock_times(lock) -> dict[str, float]:
    """The lock's fields for an evaluation's wall_s (those that are non-zero)."""
    out = {key: getattr(lock, attr) for key, attr in LOCK_TIMES.items() if getattr(lock, attr, 0.0)}
    out.update({LONGEST.format(label): t for label, t in getattr(lock, "longest", {}).items()})
    return out


def lock_summary(wall_s: dict) -> str:
    """'GPU wait 92 s (75 s to time), GPU held 8.3 s, compiling unlocked 12 s, longest shared
    stretch 2.1 s (fallback)', the parts present: on a GPU shared by several evaluations, what
    tells a slow one from a stalled pipeline, and which hold kept the others waiting."""
    w = wall_s or {}
    parts = []
    if w.get("gpu_wait_s"):
        parts.append(f"GPU wait {w['gpu_wait_s']:.0f} s"
                     + (f" ({w['gpu_wait_to_time_s']:.0f} s to time)" if w.get("gpu_wait_to_time_s") else ""))
    if w.get("gpu_held_s"):
        parts.append(f"GPU held {w['gpu_held_s']:.1f} s")
    if w.get("compiling_unlocked_s"):
        parts.append(f"compiling unlocked {w['compiling_unlocked_s']:.0f} s")
    head, tail = LONGEST.split("{}")
    stretches = {k[len(head):-len(tail)]: v for k, v in w.items() if k.startswith(head) and k.endswith(tail)}
    if stretches:
        label = max(stretches, key=stretches.get)
        parts.append(f"longest shared stretch {stretches[label]:.1f} s ({label})")
    return ", ".join(parts)


class NoLock:
    waited_s = waited_exclusive_s = 0.0
    held_s = compiling_s = 0.0
    longest: dict = {}

    def __init__(self, reason: str = ""):
        self.reason = reason  # why there is no lock where one was asked for ("" when none was)

    @contextmanager
    def shared(self, label: str = ""):
        yield

    @contextmanager
    def exclusive(self):
        yield

    def breathe(self) -> None:
        pass

    def holding_shared(self) -> bool:
        return False

    def compile_started(self) -> None:
        pass

    def compile_ended(self) -> None:
        pass


def for_worker(cfg: dict, device: str, emit) -> GpuLock | NoLock:
    root = cfg.get("gpu_lock")
    if not root or not device.startswith("cuda"):
        return NoLock()
    import torch
    try:
        return GpuLock(root, gpu_key(device), emit, drain=torch.cuda.synchronize)
    except OSError as e:  # an unwritable cache directory must not fail every evaluation
        return NoLock(f"GPU lock unavailable ({e}); evaluations run in parallel on this GPU would overlap")
