"""The job executors, with real child processes (local) and a real local Ray cluster."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from aka.executors import Job, JobResult, LocalExecutor, make_executor

J = "tests.fakes.jobs:"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (dead, not yet reaped by a parent that is itself gone) counts as dead
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_local_pins_each_slot_to_its_gpu_and_runs_jobs_per_gpu_at_once(tmp_path):
    ex = LocalExecutor(gpus=["0", "1"], jobs_per_gpu=2, log_dir=tmp_path)
    assert ex.slots == ["0", "1", "0", "1"]
    jobs = [Job(f"j{i}", J + "slow_visible", {"seconds": 1.5, "tag": str(i)}) for i in range(4)]
    seen = []
    res = ex.run(jobs, on_result=seen.append)
    assert [r.id for r in res] == ["j0", "j1", "j2", "j3"]  # the jobs' order, whatever ended first
    assert all(r.ok and r.attempts == 1 for r in res), [r.error for r in res]
    assert sorted(r.value["cuda"] for r in res) == ["0", "0", "1", "1"]
    assert len({r.value["pid"] for r in res}) == 4  # four workers
    assert sorted(r.id for r in seen) == ["j0", "j1", "j2", "j3"]
    # all four ran at the same time: each started before any ended
    assert max(r.value["start"] for r in res) < min(r.value["end"] for r in res)
    assert all(f"cuda={r.value['cuda']}" in r.worker for r in res)


def test_local_batch_smaller_than_the_slots_spreads_over_the_gpus(tmp_path):
    ex = LocalExecutor(gpus=["0", "1", "2"], jobs_per_gpu=3, log_dir=tmp_path)
    res = ex.run([Job(f"j{i}", J + "slow_visible", {"seconds": 0.3}) for i in range(3)])
    assert sorted(r.value["cuda"] for r in res) == ["0", "1", "2"]


def test_local_cpu_slots_hide_gpus_and_reuse_a_worker(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    ex = LocalExecutor(gpus=[], cpu_workers=1, log_dir=tmp_path)
    res = ex.run([Job(f"c{i}", J + "visible", {"tag": "x"}, gpus=0) for i in range(3)])
    assert [r.value["cuda"] for r in res] == ["", "", ""]
    assert len({r.value["pid"] for r in res}) == 1  # one persistent worker per slot


def test_detect_uses_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2, 5")
    assert LocalExecutor(jobs_per_gpu=1).slots == ["2", "5"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert LocalExecutor(cpu_workers=2).slots == ["", ""]


def test_local_failures_are_results_and_the_batch_goes_on(tmp_path):
    pid_file = tmp_path / "pids"
    jobs = [Job("ok1", J + "echo", {"a": [1, 2]}),
            Job("raises", J + "raises", {"msg": "bad input 17"}),
            Job("segv", J + "segfault"),
            Job("hang", J + "hang_with_child", {"pid_file": str(pid_file)}, timeout_s=3.0),
            Job("badname", "tests.fakes.jobs"),
            Job("missing", J + "no_such_function"),
            Job("notjson", J + "not_json"),
            Job("ok2", J + "echo", {"b": "z"})]
    seen = []
    t0 = time.monotonic()
    res = {r.id: r for r in LocalExecutor(gpus=["7"], log_dir=tmp_path).run(jobs, on_result=seen.append)}
    assert time.monotonic() - t0 < 60
    assert res["ok1"].ok and res["ok1"].value == {"a": [1, 2]}
    assert res["ok2"].ok and res["ok2"].value == {"b": "z"}
    assert not res["raises"].ok and res["raises"].error.startswith("ValueError: bad input 17")
    assert not res["segv"].ok and "signal 11" in res["segv"].error and "about to die" in res["segv"].error
    h = res["hang"]
    assert not h.ok and h.error.startswith("timeout") and 2.5 < h.wall_s < 30
    parent, grandchild = map(int, pid_file.read_text().split())
    deadline = time.monotonic() + 5
    while (_alive(parent) or _alive(grandchild)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(parent) and not _alive(grandchild)  # the whole group died
    assert not res["badname"].ok and "JobError" in res["badname"].error
    assert not res["missing"].ok and "AttributeError" in res["missing"].error
    assert not res["notjson"].ok and "TypeError" in res["notjson"].error
    assert len(seen) == len(jobs)
    assert all(isinstance(r, JobResult) for r in seen)


def test_bad_jobs_are_refused_before_anything_runs(tmp_path):
    ex = LocalExecutor(gpus=["0"], log_dir=tmp_path)
    with pytest.raises(ValueError, match="duplicate"):
        ex.run([Job("a", J + "echo"), Job("a", J + "echo")])
    with pytest.raises(ValueError, match="pinned to one"):
        ex.run([Job("a", J + "echo", gpus=2)])
    with pytest.raises(TypeError):
        ex.run([Job("a", J + "echo", {"x": object()})])
    with pytest.raises(ValueError, match="unknown executor"):
        make_executor("slurm")


def test_workers_die_with_a_killed_executor(tmp_path):
    """SIGKILL the process running a LocalExecutor mid-job: its worker (and the job's forked
    child, same group) must not live on."""
    import signal
    import subprocess
    import sys
    pid_file = tmp_path / "pids"
    code = (f"from aka.executors import Job, LocalExecutor\n"
            f"LocalExecutor(gpus=['0'], log_dir={str(tmp_path)!r}).run("
            f"[Job('h', 'tests.fakes.jobs:hang_with_child', {{'pid_file': {str(pid_file)!r}}})])\n")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=Path(__file__).resolve().parent.parent)
    deadline = time.monotonic() + 60
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    worker, grandchild = map(int, pid_file.read_text().split())
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10
    while _alive(worker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(worker)
    # the job's own forked child is not covered (PR_SET_PDEATHSIG is not inherited by fork):
    # it outlives a SIGKILLed executor, as aka/executors.py says; clean it up
    if _alive(grandchild):
        os.kill(grandchild, signal.SIGKILL)


# -- Ray: a real local cluster --------------------------------------------------------------------

from tests.fakes.ray_cluster import ray_cluster  # noqa: E402,F401  (the session fixture)


def test_ray_runs_jobs_as_tasks_on_logical_gpus(ray_cluster, tmp_path):
    from aka.executors import RayExecutor
    jobs = [Job(f"r{i}", J + "slow_visible", {"seconds": 0.5, "tag": str(i)}) for i in range(3)]
    jobs += [Job("bad", J + "raises", {"msg": "nope"}), Job("segv", J + "segfault"),
             Job("hang", J + "hang_with_child", {"pid_file": str(tmp_path / "pids")}, timeout_s=3.0)]
    seen = []
    res = {r.id: r for r in RayExecutor(address="local").run(jobs, on_result=seen.append)}
    assert len(seen) == len(jobs)
    for i in range(3):
        r = res[f"r{i}"]
        assert r.ok and r.attempts == 1, r.error
        assert r.value["cuda"] in ("0", "1")  # Ray pinned the task to one logical GPU
    assert not res["bad"].ok and "ValueError: nope" in res["bad"].error and res["bad"].attempts == 1
    assert not res["segv"].ok and "signal 11" in res["segv"].error
    assert not res["hang"].ok and res["hang"].error.startswith("timeout")
    with pytest.raises(ValueError, match="largest Ray node has 2"):
        RayExecutor(address="local").run([Job("big", J + "echo", gpus=3)])


def test_ray_worker_killed_mid_batch_is_retried_and_finished_results_kept(ray_cluster, tmp_path):
    import signal
    import threading

    from aka.executors import RayExecutor
    marker = tmp_path / "ray_worker_pid"
    jobs = [Job("quick", J + "echo", {"n": 1}, gpus=1),
            Job("victim", J + "die_once", {"marker": str(marker), "seconds": 120}, gpus=1),
            Job("after", J + "slow_visible", {"seconds": 0.2}, gpus=1)]

    def killer():
        deadline = time.monotonic() + 120
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.3)
        os.kill(int(marker.read_text()), signal.SIGKILL)  # the Ray worker running the task

    threading.Thread(target=killer, daemon=True).start()
    seen = []
    t0 = time.monotonic()
    res = {r.id: r for r in RayExecutor(address="local", max_retries=1).run(jobs, on_result=seen.append)}
    assert time.monotonic() - t0 < 110  # the retry did not sleep: the kill cut the first attempt
    assert res["quick"].ok and res["after"].ok
    v = res["victim"]
    assert v.ok and v.value["retried"] and v.attempts == 2
    assert {r.id for r in seen} == {"quick", "victim", "after"}

    # without retries the killed job is a recorded failure and the others still finish
    marker.unlink()
    threading.Thread(target=killer, daemon=True).start()
    res = {r.id: r for r in RayExecutor(address="local", max_retries=0).run(jobs)}
    assert res["quick"].ok and res["after"].ok
    assert not res["victim"].ok and res["victim"].attempts == 1 and "ray:" in res["victim"].error
