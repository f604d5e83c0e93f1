"""Job functions for the executor tests (run in the executors' child processes)."""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def visible(tag: str = "") -> dict:
    return {"cuda": os.environ.get("CUDA_VISIBLE_DEVICES"), "pid": os.getpid(), "tag": tag}


def echo(**kwargs) -> dict:
    return kwargs


def slow_visible(seconds: float, tag: str = "") -> dict:
    t0 = time.time()
    time.sleep(seconds)
    return {"cuda": os.environ.get("CUDA_VISIBLE_DEVICES"), "pid": os.getpid(), "tag": tag,
            "start": t0, "end": time.time()}


def raises(msg: str) -> None:
    raise ValueError(msg)


def segfault() -> None:
    print("about to die", flush=True)
    os.kill(os.getpid(), signal.SIGSEGV)


def hang_with_child(pid_file: str) -> None:
    """Sleeps forever after forking a grandchild that also sleeps; both pids go to pid_file, so
    the test can check the timeout killed the whole group."""
    child = os.fork()
    if child == 0:
        time.sleep(3600)
        os._exit(0)
    tmp = Path(f"{pid_file}.tmp")  # written whole, then renamed: the test polls for the file and reads it at once
    tmp.write_text(f"{os.getpid()} {child}")
    os.replace(tmp, pid_file)
    time.sleep(3600)


def not_json() -> object:
    return {1, 2, 3}


def die_once(marker: str, seconds: float = 60.0) -> dict:
    """First call: write the Ray worker's pid (the parent of this child) to `marker` and sleep so
    the test can kill that worker; a later call (the retry) returns at once."""
    m = Path(marker)
    if not m.exists():
        m.write_text(str(os.getppid()))
        time.sleep(seconds)
    return {"pid": os.getpid(), "retried": True}
