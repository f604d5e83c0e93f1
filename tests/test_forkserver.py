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
    # the same confinement of the runner; where it is confined as another user the forked judge forks it too
    forked_runner = dict(honest[0].env["runner"])
    assert forked_runner.pop("start", None) == ("forked" if forked_runner.get("hidden") is not None else None)
    assert forked_runner == fresh[0].env["runner"]
    assert "start" not in fresh[0].env["runner"]
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


CONFINE_PROBE = r"""
import errno, json, os, sys
own, hidden, mnt, net = sys.argv[1:5]
def attempt(f):
    try:
        f()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
status = dict(ln.split(":", 1) for ln in open("/proc/self/status").read().splitlines() if ":" in ln)
print(json.dumps({
    "uids": os.getresuid(), "gids": os.getresgid(), "groups": os.getgroups(),
    "caps": [status[k].strip() for k in ("CapInh", "CapPrm", "CapEff", "CapAmb")],
    "own mount namespace": os.readlink("/proc/self/ns/mnt") != mnt,
    "own network namespace": os.readlink("/proc/self/ns/net") != net,
    "interfaces": sorted(ln.split(":")[0].strip() for ln in open("/proc/net/dev").read().splitlines()[2:]),
    "write own dir": attempt(lambda: open(os.path.join(own, "probe.out"), "w").close()),
    "write /tmp": attempt(lambda: open("/tmp/aka-confine-probe-%d" % os.getpid(), "w").close()),
    "write /root": attempt(lambda: open("/root/aka-confine-probe-%d" % os.getpid(), "w").close()),
    "hidden dir": os.listdir(hidden),
    "own /proc/self/fd": attempt(lambda: os.listdir("/proc/self/fd")),
    "no_new_privs": status["NoNewPrivs"].strip(),
}))
"""
FORKED_PROBE = r"""
import os, sys
from aka.evaluate.confine import confine_self
pid = os.fork()
if pid == 0:
    try:
        confine_self([sys.argv[1]], [sys.argv[2]])
        src = open(sys.argv.pop(5)).read()
        exec(compile(src, "probe", "exec"))
        sys.stdout.flush()
    finally:
        os._exit(0)
os.waitpid(pid, 0)
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="the runner is confined as another user only by a root harness")
def test_a_runner_forked_from_its_judge_is_confined_like_a_fresh_one():
    """confine.confine_self (what a runner forked from its judge does to itself) against the
    `unshare ... setpriv` prefix a fresh runner starts under: the same user, groups and (no)
    capabilities, namespaces of its own with no network, the file system read-only but its own
    directory, the hidden paths empty; and no mount of either reaches the host's table."""
    import json
    import subprocess
    import sys
    import tempfile

    from aka.evaluate.confine import NOBODY, _can_unshare, confine_prefix, give_to_nobody
    if not _can_unshare():
        pytest.skip("no mount namespaces here: both start unconfined but for the user")
    own = tempfile.mkdtemp(prefix="aka-run-")  # as run_worker makes the runner's: nobody reaches it
    hidden = Path(tempfile.mkdtemp(prefix="aka-hidden-"))  # world-readable, as the knowledge base is
    hidden.chmod(0o755)
    (hidden / "reference.py").write_text("x = 1\n")
    probe = Path(own) / "probe.py"
    probe.write_text(CONFINE_PROBE)
    give_to_nobody([own])
    ns = [os.readlink("/proc/self/ns/mnt"), os.readlink("/proc/self/ns/net")]
    mounts = Path("/proc/self/mounts").read_text()
    try:
        prefix, info = confine_prefix([own], [str(hidden)], "cpu", "auto")
        assert info["user"] == NOBODY
        fresh = subprocess.run(prefix + [sys.executable, str(probe), own, str(hidden), *ns], capture_output=True,
                               text=True, timeout=120, cwd=own)
        assert fresh.returncode == 0, fresh.stderr[-2000:]
        env = dict(os.environ, PYTHONPATH=str(HERE.parent))
        forked = subprocess.run([sys.executable, "-c", FORKED_PROBE, own, str(hidden), *ns, str(probe)],
                                capture_output=True, text=True, timeout=120, env=env, cwd=HERE.parent)
        assert forked.returncode == 0 and forked.stdout.strip(), forked.stderr[-2000:]
        a, b = json.loads(fresh.stdout), json.loads(forked.stdout)
        bare = subprocess.run([sys.executable, str(probe), own, str(hidden), *ns], capture_output=True, text=True,
                              timeout=120)  # the control: the probe sees what an unconfined child would
        c = json.loads(bare.stdout)
        assert c["hidden dir"] == ["reference.py"] and c["write /tmp"] == "ok" and not c["own mount namespace"]
        for f in Path("/tmp").glob("aka-confine-probe-*"):
            f.unlink()
        assert b.pop("no_new_privs") == "1" and a.pop("no_new_privs") in ("0", "1"), "forked: stricter if anything"
        assert a == b, (a, b)
        assert b["uids"] == [NOBODY] * 3 and b["gids"] == [NOBODY] * 3 and b["groups"] == []
        assert set(b["caps"]) == {"0000000000000000"}
        assert b["own mount namespace"] and b["own network namespace"] and b["interfaces"] in (["lo"], [])
        assert b["write own dir"] == "ok" and b["write /tmp"] == "EROFS" and b["write /root"] in ("EROFS", "EACCES")
        assert b["hidden dir"] == [] and b["own /proc/self/fd"] == "ok"
        assert Path("/proc/self/mounts").read_text() == mounts, "a mount leaked into the host's namespace"
    finally:
        import shutil
        shutil.rmtree(own, ignore_errors=True)
        shutil.rmtree(hidden, ignore_errors=True)


def test_a_runner_whose_forked_child_is_gone_starts_fresh(tmp_path):
    """PreRunner.start failing (its child died before it got its channel) costs the evaluation
    nothing: the runner starts fresh, and its confinement record says so (no `start: forked`)."""
    import subprocess

    from aka.evaluate.client import RunnerClient
    from aka.evaluate.sandbox import scrubbed_env

    def gone(**kw):
        raise BrokenPipeError("the forked child is gone")
    rdir = tmp_path / "runner"
    rdir.mkdir()
    env = scrubbed_env({"AKA_RUNNER_DEVICE": "cpu", "TRITON_INTERPRET": "1", "HOME": str(rdir), "TMPDIR": str(rdir)})
    client = RunnerClient("cpu", rdir, env, [], {"user": os.geteuid(), "start": "forked"}, tmp_path, fork=gone)
    try:
        assert isinstance(client.proc, subprocess.Popen)
        assert client.confinement == {"user": os.geteuid()}
        assert client.wait_ready(lambda: None, limit_s=120) is not None
    finally:
        client.close()
    assert client.proc.returncode == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="confine_self runs as root only")
def test_confine_self_raises_before_it_gives_up_root_when_a_mount_fails():
    """A mount line that fails (the writable directory is gone) makes confine_self raise before it
    gives up root: the forked runner's child then exits (forkserver._pre_runner) and never imports a
    candidate; the judge reports a runner that did not start."""
    import subprocess
    import sys

    from aka.evaluate.confine import _can_unshare
    if not _can_unshare():
        pytest.skip("no mount namespaces here")
    code = ("import os, sys\nfrom aka.evaluate.confine import confine_self\npid = os.fork()\nif pid == 0:\n"
            "    try:\n        confine_self(['/nonexistent/aka-runner-dir'], [])\n        print('confined')\n"
            "    except OSError as e:\n        print('refused', os.getuid(), str(e)[:80])\n"
            "    sys.stdout.flush()\n    os._exit(0)\nos.waitpid(pid, 0)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=HERE.parent,
                       env=dict(os.environ, PYTHONPATH=str(HERE.parent)))
    assert r.stdout.startswith("refused 0 mount lines failed"), (r.stdout, r.stderr[-1000:])
