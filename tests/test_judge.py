"""The trusted judge: candidates that reach the runner's own process (module table, rebound names,
patched clocks, forged results, writes outside, new processes) must not score.

Each escape fixture (tests/fixtures/candidates/escapes/) is evaluated twice: through `evaluate()`,
where the static check's first line already refuses it, and with the static check bypassed, which
is the case the judge exists for: a route the deny-list missed. The second must still fail, with
the status each fixture's docstring names.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from aka.evaluate.api import EvalConfig, _finish, build_spec, evaluate
from aka.evaluate.sandbox import SandboxConfig, run_worker
from aka.evaluate.static import check_source
from aka.problem import load_problem

HERE = Path(__file__).resolve().parent
ESC = HERE / "fixtures" / "candidates" / "escapes"
PROBLEM = HERE / "fixtures" / "problems" / "vec_add"
HONEST = HERE / "fixtures" / "candidates" / "honest" / "vec_add.py"

EXPECTED = {  # fixture -> (statuses allowed with the static check bypassed, text the reason must contain)
    "rebind_comparator": ({"incorrect", "rejected"}, ""),  # rejected: the runner's snapshot (first line)
    "blind_fallback_logger": ({"rejected", "fallback"}, ""),
    "patch_timer": ({"rejected"}, "Event"),
    "forge_result": ({"incorrect", "compile_error", "crashed", "runtime_error"}, ""),
    "write_outside": ({"rejected"}, "write to"),
    "module_reach_spawn": ({"rejected"}, "os.system"),
    "rebind_harness_global": ({"rejected"}, "aka.evaluate.compare.torch"),
}


def unchecked(path: Path, shapes="0,2"):
    """What evaluate() does after its static check, with the static check skipped."""
    prob = load_problem(PROBLEM)
    cfg = EvalConfig(device="cpu", seed=7, timing=False, baselines=False,
                     sandbox=SandboxConfig(timeout_s=600, idle_timeout_s=300))
    src = path.read_text()
    rep = check_source(src, path.name)
    selected = prob.select(shapes)
    spec, files = build_spec(prob, selected, "cpu", cfg, candidate_name=str(path), model_class=rep.model_class,
                             kernels=rep.kernels)
    return _finish(run_worker(spec, src, files, cfg.sandbox), prob, selected)


_RESULTS: dict = {}


def _results() -> dict:
    if not _RESULTS:
        names = sorted(EXPECTED) + ["__honest__"]
        paths = [ESC / f"{n}.py" for n in sorted(EXPECTED)] + [HONEST]
        with ThreadPoolExecutor(max_workers=2) as ex:
            for n, r in zip(names, ex.map(unchecked, paths)):
                _RESULTS[n] = r
    return _RESULTS


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_static_check_refuses_every_escape_first(name):
    rep = check_source((ESC / f"{name}.py").read_text(), f"{name}.py")
    assert not rep.ok, f"{name}: the static check's first line let it through"
    assert "module-table" in rep.summary() or rep.violations


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_escape_fails_even_with_the_static_check_bypassed(name):
    res = _results()[name]
    statuses, text = EXPECTED[name]
    assert res.status != "pass", f"{name} passed: {res.reason}"
    assert res.status in statuses, f"{name}: {res.status}: {res.reason}"
    assert text in res.reason, res.reason


def test_honest_kernel_passes_through_judge_and_runner():
    res = _results()["__honest__"]
    assert res.status == "pass", res.reason
    assert all(s.correct for s in res.shapes)
    runner = res.env.get("runner") or {}
    if os.geteuid() == 0:
        assert runner.get("user") == 65534, runner  # the runner ran unprivileged
        from aka.evaluate.confine import _can_unshare
        if _can_unshare() and os.environ.get("AKA_JUDGE_FORKSERVER") != "0" and os.environ.get("AKA_RUNNER_FORK") != "0":
            # the escapes above ran through a runner forked from its judge (forkserver.PreRunner)
            assert runner.get("start") == "forked" and res.env.get("judge") == "forked", (runner, res.env.get("judge"))


def test_write_outside_left_no_file():
    _results()
    assert not Path("/tmp/aka-escape-probe.txt").exists()
    assert not Path("/root/aka-escape-probe.txt").exists()


def test_evaluate_rejects_escapes_at_the_static_stage():
    res = evaluate(PROBLEM, ESC / "rebind_comparator.py", config=EvalConfig(device="cpu", seed=3))
    assert res.status == "rejected" and res.reason.startswith("[static]"), res.reason


def _children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                out.append(int(d.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _judge_and_runner(parent: int):
    """The judge among the parent's descendants (started fresh, or forked from the judge zygote,
    aka/evaluate/forkserver.py, whose children all are judges) and its runner (started fresh, or
    forked from the judge: forkserver.PreRunner)."""
    def cmd(p):  # a forked judge or runner keeps the zygote's command line and names itself
        try:
            return Path(f"/proc/{p}/cmdline").read_bytes() + b" " + Path(f"/proc/{p}/comm").read_bytes()
        except OSError:
            return b""
    judges = []
    for p in _children(parent):
        if b"aka.evaluate.judge" in cmd(p):
            judges.append(p)
        elif b"aka.evaluate.forkserver" in cmd(p):
            judges += _children(p)
    for judge in judges:
        kids = [p for p in _children(judge) if b"aka.evaluate.runner" in cmd(p) or b"aka-runner" in cmd(p)]
        if kids:
            return judge, kids[0]
    return (judges[0] if judges else None), None


@pytest.mark.parametrize("forked", [False, True], ids=["fresh", "forked"])
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP"])
def test_judge_and_runner_die_with_a_parent_killed_by_signal(sig, forked):
    """A parent killed by SIGTERM or SIGHUP (not a KeyboardInterrupt it could handle) takes the
    judge and the runner with it: an evaluation outliving it was seen holding the GPU for ~40 s.
    Forked: the judge is a child of the zygote, which dies with the parent and takes it along."""
    import signal
    import subprocess
    import sys
    import time
    # the parent takes the signal's default action even where it inherited SIGHUP ignored (a suite
    # started under nohup: there it never died and the test timed out)
    mode = ("import aka.evaluate.forkserver as fs; fs.enabled = lambda device, user: device == 'cpu'; " if forked
            else "import os; os.environ['AKA_JUDGE_FORKSERVER'] = '0'; ")
    code = ("import signal; signal.signal(signal.SIGHUP, signal.SIG_DFL); " + mode +
            "from aka.evaluate.api import EvalConfig, evaluate; from aka.evaluate.sandbox import SandboxConfig; "
            f"evaluate({str(PROBLEM)!r}, {str(HERE / 'fixtures/candidates/cheats/infinite_loop_forward.py')!r}, "
            "config=EvalConfig(device='cpu', seed=1, sandbox=SandboxConfig(timeout_s=900, idle_timeout_s=900)))")
    parent = subprocess.Popen([sys.executable, "-c", code], cwd=HERE.parent)
    judge = runner = None
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and runner is None:
            time.sleep(0.5)
            judge, runner = _judge_and_runner(parent.pid)
        assert judge and runner, "the evaluation did not reach its runner in time"
        time.sleep(1.0)
        parent.send_signal(getattr(signal, sig))
        parent.wait(timeout=30)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 15 and (_alive(judge) or _alive(runner)):
            time.sleep(0.2)
        assert not _alive(judge), "the judge outlived its parent"
        assert not _alive(runner), "the runner outlived the judge"
    finally:  # a failed run leaves no infinite loop behind
        if parent.poll() is None:
            parent.kill()
            parent.wait(timeout=30)
        for p in (runner, judge):
            if p and _alive(p):
                os.kill(p, signal.SIGKILL)


AUDIT_PROBE = r'''
import os, shutil, subprocess, sys
from aka.evaluate.runner import install_audit
seen = []
install_audit(sys.argv[1], seen)()
cc = shutil.which("gcc") or shutil.which("cc")
for close_fds in (False, True):  # False: CPython starts it through os.posix_spawn (Triton's ptxas call)
    subprocess.run([cc, "--version"], check=True, close_fds=close_fds, stdout=subprocess.DEVNULL)
refused = []
for start in (lambda: subprocess.run(["ls"], close_fds=False, stdout=subprocess.DEVNULL),
              lambda: os.posix_spawn("/bin/ls", ["ls"], dict(os.environ))):
    try:
        start()
    except PermissionError:
        refused.append(True)
print(len(refused), seen)
'''


@pytest.mark.skipif(not (__import__("shutil").which("gcc") or __import__("shutil").which("cc")), reason="no C compiler")
def test_audit_hook_lets_the_compilers_start_however_cpython_spawns_them(tmp_path):
    """On the H200 a compiler spawned through os.posix_spawn was refused at every first launch."""
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", AUDIT_PROBE, str(tmp_path)], capture_output=True, text=True,
                         cwd=HERE.parent, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    n, seen = out.stdout.split(" ", 1)
    assert n == "2"  # both routes to another program refused
    assert "subprocess.Popen ls" in seen and "os.posix_spawn /bin/ls" in seen
    assert "gcc" not in seen and "cc --version" not in seen


def test_checked_call_opens_buffers_first_and_computes_on_inputs_written_after():
    """The checked call's two steps (runner side, on CPU tensors): the output buffers are opened
    before the judge writes fresh inputs, and the timed step computes from those fresh inputs and
    copies every set's output into the judge's buffers in one multi-tensor copy."""
    import os as _os
    from types import SimpleNamespace

    import torch

    from aka.evaluate.channel import Arena
    from aka.evaluate.runner_timing import timing_handlers

    class Twice(torch.nn.Module):
        def forward(self, x):
            return x * 2

    sets = [{"x": torch.full((5,), float(i))} for i in range(3)]
    state = {"cand": Twice(), "timer": (SimpleNamespace(sets=sets), SimpleNamespace(graph=None), [])}
    h = timing_handlers(state, sync=lambda: None)
    arena = Arena("cpu")
    bufs, descs = [], []
    for _ in sets:
        t, d = arena.empty((5,), torch.float32)
        t.fill_(float("nan"))
        bufs.append(t)
        descs.append({"0": d})
    h["time_checked_open"]({"outputs": descs}, [_os.dup(fd) for fd in arena.fds])
    for i, s in enumerate(sets):  # the judge's fresh values, after the buffers were opened
        s["x"].fill_(10.0 + i)
    assert h["time_checked"]({}, [])["ok"]
    for i, b in enumerate(bufs):
        assert torch.equal(b, torch.full((5,), 2 * (10.0 + i)))
    h["time_end"]({}, [])
    assert "checked" not in state


def test_an_event_timed_candidate_with_a_grown_spin_is_checked_by_replaying_its_one_call_graph():
    """A one-set candidate whose head start grew to cover its host path (timing.ShapeTimer._may_extend)
    has a graph of one call for the checked call: the runner replays it, so the judge's clock sees
    GPU work and not the host path its samples left out, and copies the graph's output into the
    judge's buffer; no eager call is made."""
    import os as _os
    from types import SimpleNamespace

    import torch

    from aka.evaluate.channel import Arena
    from aka.evaluate.runner_timing import timing_handlers

    class Never(torch.nn.Module):
        def forward(self, x):
            raise AssertionError("the checked call must replay the graph, not call the module")

    sets = [{"x": torch.full((5,), 1.0)}]
    out = torch.zeros(5)

    class Graph:
        replays = 0

        def replay(self):
            Graph.replays += 1
            out.copy_(sets[0]["x"] * 2)   # what the captured call computes, from the inputs' addresses
    impl = SimpleNamespace(graph=None, graph_outs=None, check_graph=Graph(), check_outs=[out])
    state = {"cand": Never(), "timer": (SimpleNamespace(sets=sets), impl, [])}
    h = timing_handlers(state, sync=lambda: None)
    arena = Arena("cpu")
    buf, desc = arena.empty((5,), torch.float32)
    buf.fill_(float("nan"))
    h["time_checked_open"]({"outputs": [{"0": desc}]}, [_os.dup(fd) for fd in arena.fds])
    sets[0]["x"].fill_(21.0)   # the judge's fresh values
    assert h["time_checked"]({}, [])["ok"] and Graph.replays == 1
    assert torch.equal(buf, torch.full((5,), 42.0))
    h["time_end"]({}, [])


def test_on_a_gpu_the_judge_finishes_its_writes_before_every_runner_request(monkeypatch):
    """The runner's stream only waits for judge work queued before a block was exported (torch's
    IPC event), and Arena.empty exports at allocation, before the judge's copies and poison fills.
    So every request on a GPU waits for the judge's own stream first (on the H200 the runner read
    0.9 GB inputs that were still being written, and a late NaN fill overwrote its outputs)."""
    import torch

    from aka.evaluate.client import RunnerClient
    order = []

    class Chan:
        def send(self, msg, fds):
            order.append(("send", msg["op"]))

        def recv(self, max_fds=0):
            return {"ok": True}, []

    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: order.append(("sync", None)))
    for device, want in (("cuda", [("sync", None), ("send", "forward")]), ("cpu", [("send", "forward")])):
        c = RunnerClient.__new__(RunnerClient)
        c.device, c.chan, c.violations = device, Chan(), []
        order.clear()
        assert c.request("forward", "correctness")["ok"]
        assert order == want, device


def test_a_runner_aborted_by_cuda_names_the_cuda_error_not_its_last_stack_frame():
    """An illegal memory access aborts the runner (SIGABRT) after a long C++ stack trace; the
    verdict's reason carries the CUDA error line (missed on the H200: 'frame #28: _start + 0x25')."""
    from aka.evaluate.client import _cause_line
    tail = ("Traceback (most recent call last):\n"
            "torch.AcceleratorError: CUDA error: an illegal memory access was encountered\n"
            "Exception raised from c10_cuda_check_implementation at ...\n"
            + "".join(f"frame #{i}: fn{i} + 0x{i:x} (0x1 in libc10.so)\n" for i in range(29)))
    assert _cause_line(tail) == "torch.AcceleratorError: CUDA error: an illegal memory access was encountered"
    # torch's own message, as the runner printed it on the H200: the hints after the error name
    # "device-side assertions" and must not be taken for the cause
    torch_msg = ("torch.AcceleratorError: CUDA error: an illegal memory access was encountered\n"
                 "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace "
                 "below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
                 "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n")
    assert _cause_line(torch_msg) == "torch.AcceleratorError: CUDA error: an illegal memory access was encountered"
    assert _cause_line("some\nplain failure\n") == "plain failure"
    assert _cause_line("") == ""


class _Lock:
    def __init__(self, shared=True):
        self.shared, self.calls = shared, []

    def holding_shared(self):
        return self.shared

    def compile_started(self):
        self.calls.append("started")

    def compile_ended(self):
        self.calls.append("ended")


class _Chan:
    """The runner's side scripted: what it sends back to one request, and what the judge sent."""
    def __init__(self, replies):
        self.replies, self.sent = list(replies), []

    def send(self, msg, fds=()):
        self.sent.append(msg)

    def recv(self, max_fds=0):
        return self.replies.pop(0), []


def _client(chan, lock):
    from aka.evaluate.client import RunnerClient
    c = RunnerClient.__new__(RunnerClient)
    c.device, c.chan, c.violations, c.lock = "cpu", chan, [], lock
    return c


def test_a_runner_compile_report_lets_the_judge_hold_go_and_resumes_the_runner():
    """The runner's Triton compiles, in a command the judge runs under a shared hold: the hold
    goes at compile_start and comes back at compile_end, before the judge tells the runner to
    resume; a compile that never reports its end still gets the hold back with the reply."""
    lock = _Lock()
    chan = _Chan([{"event": "compile_start"}, {"event": "compile_end"}, {"ok": True, "done": 1}])
    assert _client(chan, lock).request("forward", "correctness")["done"] == 1
    assert chan.sent[0]["compile_events"] is True and chan.sent[1] == {"op": "resume"}
    assert lock.calls == ["started", "ended"]
    lock = _Lock()
    chan = _Chan([{"event": "compile_start"}, {"ok": True}])
    assert _client(chan, lock).request("forward", "correctness")["ok"]
    assert lock.calls == ["started", "ended"] and len(chan.sent) == 1


def test_a_compile_report_the_judge_did_not_ask_for_is_a_crash():
    """Outside a shared hold (a timed command) the judge asks for no reports: one that comes all
    the same (a candidate calling the hooks itself) is the candidate's crash, and the lock is untouched."""
    from aka.evaluate.result import StageFailure
    for lock in (_Lock(shared=False), None):
        chan = _Chan([{"event": "compile_start"}, {"ok": True}])
        with pytest.raises(StageFailure) as e:
            _client(chan, lock).request("time_checked", "timing")
        assert e.value.status == "crashed" and "unasked" in e.value.reason
        assert chan.sent[0]["compile_events"] is False
        assert lock is None or lock.calls == []


def test_runner_reports_compiles_only_in_marked_commands_and_waits_for_resume():
    """The runner's Triton hooks (installed once, before its guarded snapshot): in a marked
    command, drain, report the start, and at the end report it and wait for the judge's resume;
    in an unmarked one, or during a graph capture, nothing."""
    from triton import knobs

    from aka.evaluate.runner import report_compiles
    rt = knobs.runtime
    before = (rt.jit_cache_hook, rt.jit_post_compile_hook)
    log, capturing = [], [False]
    events = {"on": False, "compiling": False}
    try:
        report_compiles(lambda m: log.append(("send", m["event"])), lambda max_fds=0: (log.append(("recv",)) or ({}, [])),
                        lambda: log.append(("sync",)), events, capturing=lambda: capturing[0], genuine=lambda: True)
        assert rt.jit_cache_hook(key="k") is None      # a falsy answer: Triton goes on to compile
        rt.jit_post_compile_hook(key="k")
        assert log == []                                # unmarked command: silent
        events["on"] = True
        rt.jit_cache_hook(key="k")
        rt.jit_post_compile_hook(key="k")
        assert log == [("sync",), ("send", "compile_start"), ("send", "compile_end"), ("recv",)]
        log.clear()
        capturing[0] = True
        rt.jit_cache_hook(key="k")
        rt.jit_post_compile_hook(key="k")
        assert log == []                                # no synchronize inside a capture
    finally:
        rt.jit_cache_hook, rt.jit_post_compile_hook = before


def test_runner_ignores_a_compile_hook_called_outside_tritons_compile_path():
    """The default check: a start hook called by the candidate itself (not from Triton's
    JITFunction._do_compile) reports nothing, so the judge's hold stays."""
    from triton import knobs

    from aka.evaluate.runner import report_compiles
    rt = knobs.runtime
    before = (rt.jit_cache_hook, rt.jit_post_compile_hook)
    log = []
    try:
        report_compiles(lambda m: log.append(m), lambda max_fds=0: ({}, []), lambda: log.append("sync"),
                        {"on": True, "compiling": False}, capturing=lambda: False)
        rt.jit_cache_hook(key="k")
        rt.jit_post_compile_hook(key="k")
        assert log == []
    finally:
        rt.jit_cache_hook, rt.jit_post_compile_hook = before
