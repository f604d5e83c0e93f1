"""The judge's handle on its runner: start it confined, send it commands, believe nothing it says
about the verdict.

The runner runs in the judge's process group (the parent kills both together), as an
unprivileged user when the judge is root, and where the machine allows in its own mount and
network namespaces: the whole file system read-only but its own directory, the knowledge base,
the caches and the harness's records hidden under empty mounts, no network (sandbox.confine_command).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from aka.evaluate.channel import Arena, Channel, ChannelClosed
from aka.evaluate.result import StageFailure


class RunnerClient:
    lock = None  # the judge's GPU lock, set with unlock_compiles: the runner's compiles let its shared hold go

    def __init__(self, device: str, workdir: Path, env: dict, argv_prefix: list[str], confinement: dict,
                 log_dir: Path, fork=None):
        """`fork`: the judge's forked child (forkserver.PreRunner.start) that becomes the runner,
        confining itself, instead of a fresh `argv_prefix + python -m aka.evaluate.runner`."""
        self.device, self.workdir, self.log_dir = device, workdir, log_dir
        self.confinement = confinement
        mine, theirs = Channel.pair()
        self.out = open(log_dir / "runner.stdout", "wb")
        self.err = open(log_dir / "runner.stderr", "wb")
        self.proc = None
        if fork is not None:
            try:
                self.proc = fork(cwd=str(workdir), env=env, chan_fd=theirs.fileno(), out_fd=self.out.fileno(),
                                 err_fd=self.err.fileno())
            except OSError as e:  # the forked child is gone before it got its channel: start one fresh
                print(f"judge: the runner starts fresh ({e})", file=sys.stderr)
                self.confinement = {k: v for k, v in confinement.items() if k != "start"}
        if self.proc is None:
            argv = argv_prefix + [sys.executable, "-m", "aka.evaluate.runner", str(theirs.fileno())]
            self.proc = subprocess.Popen(argv, cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=self.out,
                                         stderr=self.err, pass_fds=(theirs.fileno(),))
        theirs.close()
        self.chan = mine
        self.violations: list[str] = []

    def wait_ready(self, beat, limit_s: float = 600.0) -> dict:
        """The runner's start-up (interpreter, torch, the confinement) is the harness's time, not
        the candidate's: `beat` keeps the parent's idle watchdog fed until the runner says it is ready."""
        import select
        import time
        t0 = time.monotonic()
        while time.monotonic() - t0 < limit_s:
            ready, _, _ = select.select([self.chan.fileno()], [], [], 2.0)
            if ready:
                try:
                    msg, fds = self.chan.recv(max_fds=0)
                except (ChannelClosed, OSError) as e:
                    raise StageFailure("crashed", self.death(f"runner failed to start: {e}"), "import") from None
                return msg
            if self.proc.poll() is not None:
                raise StageFailure("crashed", self.death("runner failed to start"), "import")
            beat()
        raise StageFailure("timeout", f"runner did not start within {limit_s:.0f} s", "import")

    def request(self, op: str, stage: str, arena: Arena | None = None, **kw) -> dict:
        """One command; a runner that died or broke the protocol is a crash of the candidate's."""
        fds = list(arena.fds) if arena is not None else []
        if self.device.startswith("cuda"):
            # The runner's stream waits on the IPC event torch records when a block is first
            # exported, which Arena.empty does at allocation, before the judge copies inputs in or
            # poison-fills an output buffer. Only the judge finishing its own work first orders those
            # writes before the runner's reads and writes (found on the H200: at 0.9 GB inputs the
            # runner read buffers still being filled, and a late NaN fill overwrote its outputs).
            import torch
            torch.cuda.synchronize()
        lock = self.lock
        events = lock is not None and lock.holding_shared()
        compiling = False
        try:
            self.chan.send(dict(kw, op=op, stage=stage, compile_events=events), fds)
            while True:
                reply, extra = self.chan.recv(max_fds=0)
                for fd in extra:
                    os.close(fd)
                ev = reply.get("event") if isinstance(reply, dict) else None
                if ev is None:
                    break
                # The runner's Triton compiles, which the judge's own hooks cannot see: the shared
                # hold goes while one runs (the runner drained its GPU work first) and comes back
                # before the runner, waiting for "resume", launches anything (gpulock.py).
                if not events or ev not in ("compile_start", "compile_end"):
                    raise StageFailure("crashed", f"runner sent {ev!r} unasked during {op}", stage)
                if ev == "compile_start" and not compiling:
                    compiling = True
                    lock.compile_started()
                elif ev == "compile_end":
                    if compiling:
                        compiling = False
                        lock.compile_ended()
                    self.chan.send({"op": "resume"})
        except (ChannelClosed, OSError) as e:
            raise StageFailure("crashed", self.death(f"runner gone during {op}: {e}"), stage) from None
        finally:
            if compiling:  # a compile that never reported its end (it raised): the hold comes back
                lock.compile_ended()
        v = reply.get("violations") or []
        if v:
            self.violations = [str(x)[:200] for x in v]
            raise StageFailure("rejected", "the candidate tried what a kernel never needs (refused): "
                               + "; ".join(self.violations[:4]), stage)
        g = reply.get("guards") or []
        if g:  # every reply carries the runner's guard check: a rebinding in any stage is caught there
            raise StageFailure("rejected", "candidate replaced functions the harness relies on: "
                               + ", ".join(map(str, g[:8])), stage)
        return reply

    def death(self, why: str) -> str:
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        full = _tail(self.log_dir / "runner.stderr", 64_000)  # read once: the cause line may sit far above the end
        tail = full[-2000:]
        if code is not None and code < 0:
            import signal
            try:
                why += f" (killed by {signal.Signals(-code).name})"
            except ValueError:
                why += f" (signal {-code})"
        elif code not in (None, 0):
            why += f" (exit code {code})"
        low = tail.lower()
        if "out of memory" in low or "memoryerror" in low:
            why += " (out of memory)"
        return why + (f": {_cause_line(full)[:300]}" if tail.strip() else "")

    def stderr_tail(self) -> str:
        return _tail(self.log_dir / "runner.stderr")

    def close(self) -> None:
        try:
            self.chan.send({"op": "bye"})
            self.chan.recv(max_fds=0)
        except (ChannelClosed, OSError, ValueError):
            pass
        self.chan.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        for f in (self.out, self.err):
            f.close()


# What a dying CUDA process says about why, above the C++ stack trace it prints after (an aborted
# runner's last line is a stack frame: "frame #28: _start + 0x25")
_CAUSES = ("cuda error", "illegal memory access", "misaligned address", "device-side assert", "out of memory",
           "memoryerror", "segmentation fault")


# torch's advice after a CUDA error, which names causes without being one ("Compile with
# `TORCH_USE_CUDA_DSA` to enable device-side assertions": the reason on the H200, 2026-12-02)
_HINTS = ("torch_use_cuda_dsa", "cuda_launch_blocking", "might be asynchronously reported")


def _cause_line(tail: str) -> str:
    """The line of a runner's stderr that names a cause (the first cause of _CAUSES found, its last
    line; torch's debugging hints skipped), else its last line."""
    lines = [ln.strip() for ln in tail.strip().splitlines() if ln.strip()]
    causes = [ln for ln in lines if not any(h in ln.lower() for h in _HINTS)]
    for c in _CAUSES:
        for ln in reversed(causes):
            if c in ln.lower():
                return ln
    return lines[-1] if lines else ""


def _tail(path: Path, n: int = 2000) -> str:
    try:
        return path.read_bytes()[-n:].decode("utf-8", "replace")
    except OSError:
        return ""
