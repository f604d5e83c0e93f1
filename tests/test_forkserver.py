"""CPU judges forked from a zygote that has imported torch (aka/evaluate/forkserver.py): the same
verdicts as a judge started fresh, each evaluation in its own process group that dies whole, the
zygote replaced when the harness's files change or it dies, and never used where it should not be."""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from aka.evaluate import forkserver, sandbox
from aka.evaluate.api import EvalConfig, evaluate
from aka.evaluate.sandbox import SandboxConfig

HERE = Path(__file__).resolve().parent
PROBLEM = HERE / "fixtures" / "problems" / "vec_add"
HONEST = HERE / "fixtures" / "candidates" / "honest" / "vec_add.py"
CHEATS = HERE / "fixtures" / "candidates" / "cheats"


@pytest.fixture
def forked(monkeypatch):
    """The zygote path whether or not this machine's runner would be confined as another user."""
    monkeypatch.setattr(forkserver, "enabled", lambda device, user: device == "cpu")
    spawned = []
    real = forkserver.ForkServer.spawn

    def spy(self, *a, **kw):
        j = real(self, *a, **kw)
        spawned.append((self, j.pid))
        return j
    monkeypatch.setattr(forkserver.ForkServer, "spawn", spy)
    yield spawned


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_forked_judges_give_the_verdicts_of_fresh_ones(forked, monkeypatch):
    cfg = EvalConfig(device="cpu", seed=5)
    honest = [evaluate(PROBLEM, HONEST, config=cfg) for _ in range(2)]
    wrong = evaluate(PROBLEM, CHEATS / "masked_tail_dropped.py", config=cfg)
    fallback = evaluate(PROBLEM, CHEATS / "partial_fallback_odd.py", config=cfg)
    assert len(forked) == 4 and len({id(s) for s, _ in forked}) == 1, "one zygote served all four"
    assert len({pid for _, pid in forked}) == 4, "a judge of its own for each evaluation"
    monkeypatch.setattr(forkserver, "enabled", lambda device, user: False)  # the control: fresh judges
    fresh = [evaluate(PROBLEM, p, config=cfg) for p in (HONEST, CHEATS / "masked_tail_dropped.py",
                                                          CHEATS / "partial_fallback_odd.py")]
    assert len(forked) == 4
    assert [r.status for r in honest] == ["pass", "pass"], honest[0].reason
    assert [wrong.status, fallback.status] == [fresh[1].status, fresh[2].status]
    assert wrong.status == "incorrect" and fallback.status == "fallback"
    assert [wrong.reason, fallback.reason] == [fresh[1].reason, fresh[2].reason]
    assert honest[0].env["runner"] == fresh[0].env["runner"]  # the same confinement of the runner
    assert [honest[0].env["judge"], fresh[0].env["judge"]] == ["forked", "fresh"]  # the record says which


def test_a_hung_candidate_is_killed_with_its_runner(forked):
    cfg = EvalConfig(device="cpu", seed=1, sandbox=SandboxConfig(timeout_s=600, idle_timeout_s=15))
    res = evaluate(PROBLEM, CHEATS / "infinite_loop_forward.py", config=cfg)
    assert res.status == "timeout", res.reason
    (srv, pid), = forked
    assert not _alive(pid)
    # nothing of the evaluation's process group is left
    def left():
        return [int(d.name) for d in Path("/proc").iterdir()
                if d.name.isdigit() and _pgid(int(d.name)) == pid and _alive(int(d.name))]
    t0 = time.monotonic()
    while left() and time.monotonic() - t0 < 10:
        time.sleep(0.1)
    assert left() == []
    assert srv.alive and _alive(srv.proc.pid), "the zygote serves on"


def _pgid(pid: int):
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[2])
    except OSError:
        return None


def test_a_dead_zygote_fails_its_evaluation_and_the_next_gets_a_new_one(forked):
    cfg = EvalConfig(device="cpu", seed=1, sandbox=SandboxConfig(timeout_s=600, idle_timeout_s=60))
    killed = []

    def kill_zygote(msg):
        if msg.get("stage") == "first_call" and not killed:
            srv = forked[-1][0]
            os.kill(srv.proc.pid, signal.SIGKILL)
            killed.append(forked[-1][1])
    res = evaluate(PROBLEM, CHEATS / "infinite_loop_forward.py", config=cfg, on_progress=kill_zygote)
    assert killed and res.status in {"crashed", "timeout"} and res.status != "pass", res.reason
    t0 = time.monotonic()
    while _alive(killed[0]) and time.monotonic() - t0 < 10:
        time.sleep(0.1)
    assert not _alive(killed[0]), "the judge died with its zygote"
    again = evaluate(PROBLEM, HONEST, config=EvalConfig(device="cpu", seed=1))
    assert again.status == "pass", again.reason
    assert forked[-1][0] is not forked[0][0], "a new zygote"


def test_a_changed_harness_gets_a_new_zygote():
    env = sandbox.scrubbed_env({"TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": "",
                                "AKA_PARENT_PID": str(os.getpid())})
    a = forkserver.server_for(env, "digest-a")
    assert a is not None and forkserver.server_for(dict(env, HOME="/elsewhere"), "digest-a") is a
    b = forkserver.server_for(env, "digest-b")
    assert b is not a and not a.alive and b.alive
    a.proc.wait(timeout=10)
    forkserver.forget(b)


def test_only_cpu_judges_where_the_runner_is_another_user(monkeypatch):
    assert not forkserver.enabled("cuda:0", "auto")
    assert not forkserver.enabled("cpu", "same")
    monkeypatch.setenv("AKA_JUDGE_FORKSERVER", "0")
    assert not forkserver.enabled("cpu", "auto")
    monkeypatch.delenv("AKA_JUDGE_FORKSERVER")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert not forkserver.enabled("cpu", "auto"), "a runner of the harness's own user could reach the zygote"


def test_a_process_keeps_two_zygotes_and_never_closes_one_with_judges_in_flight(monkeypatch):
    monkeypatch.setattr(forkserver, "_SERVERS", {})
    env = sandbox.scrubbed_env({"TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": "", "AKA_PARENT_PID": str(os.getpid())})
    first = forkserver.server_for(dict(env, AKA_TEST_ENV="1"), "d")
    first.running.add(-1)  # as if a judge of it were still running
    second = forkserver.server_for(dict(env, AKA_TEST_ENV="2"), "d")
    third = forkserver.server_for(dict(env, AKA_TEST_ENV="3"), "d")
    assert first.alive and second.alive and third.alive, "the oldest is busy: kept"
    first.running.clear()
    fourth = forkserver.server_for(dict(env, AKA_TEST_ENV="4"), "d")
    assert not first.alive and not second.alive and third.alive and fourth.alive
    assert list(forkserver._SERVERS.values()) == [third, fourth]
    for s in (first, second, third, fourth):
        forkserver.forget(s)
    assert not any(Path(s.env["HOME"]).exists() for s in (first, second, third, fourth))
