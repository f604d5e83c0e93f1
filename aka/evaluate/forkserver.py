"""A judge that starts with torch already imported: CPU evaluations fork their judge from a zygote.

Each evaluation's judge imports torch before it can do anything, ~1.5 s of one core here and more on
a busy host, paid once more by its runner. On CPU that start-up was most of an evaluation's cost
(a knowledge-base kernel's sandboxed check: ~3.4 s of its ~4.6 s of CPU, tests/test_kb_kernels.py).
A zygote pays it once per harness process:

    python -m aka.evaluate.forkserver SOCKET_FD

It imports torch and the judge's modules, then only forks. Each fork becomes one evaluation's judge,
exactly as `python -m aka.evaluate.judge SPEC PROTOCOL_FD` would be: its own session (the harness
kills its process group), the scrubbed environment, working directory, stdout/stderr files and
protocol pipe of that evaluation, dying with its parent (the zygote, which dies with the harness).
Its runner is forked too: the judge's first act, before it reads its spec, is to fork the child that
becomes the runner (PreRunner). That child closes every descriptor of the judge's, waits for its
channel, then confines itself (confine.confine_self: its own mount and network namespaces, the same
mounts, nobody's uid, no capabilities, no_new_privs) and runs runner.main: a fresh runner's start
without a second interpreter and torch import (21 knowledge-base kernels, two at a time on 2 cores:
39-42 s -> 25-27 s of wall time, 74-79 -> 47-51 CPU-s). It holds what the zygote imported and this evaluation's argv,
nothing of the spec, the inputs or the reference. AKA_RUNNER_FORK=0 starts runners fresh.

What it keeps of the trust model, and the limits of its use:
  * the zygote never loads a candidate, a problem or a spec: what a judge inherits is torch and aka's
    own modules as imported, nothing of another evaluation; a judge's own changes die with it;
  * it serves CPU evaluations only (a GPU judge starts as before: its start-up is a small part of a
    timed evaluation, and the GPU harness was last checked on the H200 that way);
  * it is used only where the runner is confined as another user (the harness runs as root), so no
    candidate can signal, trace or write to it, or reach a later evaluation through it; where the
    runner would run as the harness's own user, every judge starts fresh, as before;
  * the harness's own files are stamped (size, mtime) when the zygote starts: when they change on disk, a new zygote
    serves the next evaluation (the judge runs the code on disk, never an older copy);
  * AKA_JUDGE_FORKSERVER=0 turns it off; if the zygote cannot start or dies, judges start fresh;
  * a forked judge and runner keep the zygote's command line; their names (/proc/PID/comm, `ps -o
    comm`) are aka-judge and aka-runner.

The socket is a SOCK_SEQPACKET pair, one JSON message a packet: a request carries the evaluation's
argv, cwd and environment with its three descriptors (protocol pipe, stdout, stderr) as SCM_RIGHTS;
the zygote answers with the child's pid, and later with its exit code once it has reaped it.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading

READY = "ready"
MAX_MSG = 1 << 20


def _pdeathsig() -> None:
    import ctypes
    ctypes.CDLL(None).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG


def _die_with(parent: int, comm: bytes) -> None:
    """Die with `parent` (SIGKILL through PR_SET_PDEATHSIG), named `comm`; exit now if it went already."""
    _pdeathsig()
    _name(comm)
    if os.getppid() != parent:  # the parent died before the lines above
        os._exit(3)


def _adopt(out: int, err: int, keep: int) -> None:
    """stdout and stderr become `out` and `err`; every other descriptor above 2 but `keep` closes."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(out, 1)
    os.dup2(err, 2)
    os.closerange(3, keep)
    os.closerange(keep + 1, 65536)


def _enter(cwd: str, env: dict) -> None:
    """One evaluation's working directory and environment (its TMPDIR included)."""
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    import tempfile
    tempfile.tempdir = None


def _name(comm: bytes) -> None:
    """A forked process keeps the zygote's command line: its name (ps -o comm, /proc/PID/comm) says
    what it became."""
    import ctypes
    ctypes.CDLL(None).prctl(15, ctypes.c_char_p(comm[:15]), 0, 0, 0)  # PR_SET_NAME


# --- the zygote ------------------------------------------------------------------------------------

def serve(sock_fd: int) -> int:
    from aka.evaluate.deathwatch import die_with_parent
    die_with_parent("AKA_PARENT_PID")
    sock = socket.socket(fileno=sock_fd)
    # everything a CPU judge imports, so that a fork starts where a judge's start-up ends
    import torch  # noqa: F401

    import triton  # noqa: F401
    import triton.language  # noqa: F401

    import aka.evaluate.judge as judge
    import aka.evaluate.runner  # noqa: F401 - and what a runner forked from a judge imports
    from aka.evaluate import confine, interp_fix, runner_timing, tensors  # noqa: F401
    judge._flop_counter("cpu")
    r_wake, w_wake = os.pipe()
    os.set_blocking(w_wake, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(w_wake)
    sock.send(json.dumps({"event": READY, "pid": os.getpid()}).encode())
    import select
    while True:
        ready, _, _ = select.select([sock, r_wake], [], [])
        if r_wake in ready:
            os.read(r_wake, 4096)
        while True:  # reap every judge that ended
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            sock.send(json.dumps({"event": "exit", "pid": pid,
                                  "code": os.waitstatus_to_exitcode(status)}).encode())
        if sock in ready:
            try:
                data, fds, _, _ = socket.recv_fds(sock, MAX_MSG, 3)
            except OSError:
                return 0
            if not data:
                return 0  # the harness closed its end: nothing more to serve
            req = json.loads(data)
            pid = os.fork()
            if pid == 0:
                _become_judge(req, fds, sock)  # never returns
            for fd in fds:
                os.close(fd)
            sock.send(json.dumps({"event": "started", "id": req["id"], "pid": pid}).encode())


def _become_judge(req: dict, fds: list[int], sock: socket.socket) -> None:
    """In the fork: become `python -m aka.evaluate.judge SPEC FD` for one evaluation."""
    code = 1
    zygote = os.getppid()
    try:
        os.setsid()
        _die_with(zygote, b"aka-judge")
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sock.close()
        proto, out, err = fds
        _adopt(out, err, proto)  # nothing else of the zygote's stays open (its wake-up pipe included)
        _enter(req["cwd"], req["env"])
        argv = [req["argv"][0], req["argv"][1], str(proto)]
        sys.argv = argv
        from aka.evaluate.judge import forked_main
        code = forked_main(argv)  # ends with os._exit
    except BaseException:  # noqa: BLE001 - report on this evaluation's stderr, then die
        import traceback
        traceback.print_exc()
        sys.stderr.flush()
    os._exit(code or 1)


# --- the runner, forked from its judge -------------------------------------------------------------

class PreRunner:
    """A forked judge's first act, before it has read its spec: fork the child that will become its
    runner. What the child holds is the zygote's imports (torch, Triton, the runner's modules) and
    this evaluation's argv, nothing else: no spec, no input, no reference. It closes every descriptor
    of the judge's (its protocol pipe first of all) and waits. `start` hands it the runner's channel,
    stdout and stderr, directory, environment and mounts; the child then confines itself exactly as
    `unshare ... setpriv` confines a fresh runner (confine.confine_self) and runs runner.main. It is
    the judge's own child, in its process group: the harness's kill of the group reaches it, and it
    dies with the judge (PR_SET_PDEATHSIG, set again after its change of user)."""

    def __init__(self):
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        sys.stdout.flush()  # nothing the judge buffered may come out of the child
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            mine.close()
            _pre_runner(theirs)  # never returns
        theirs.close()
        self.sock, self.pid = mine, pid

    def start(self, *, cwd: str, env: dict, writable: list[str], hidden: list[str], chan_fd: int,
              out_fd: int, err_fd: int) -> "ForkedRunner":
        msg = json.dumps({"cwd": cwd, "env": env, "writable": writable, "hidden": hidden}).encode()
        try:
            socket.send_fds(self.sock, [msg], [chan_fd, out_fd, err_fd])
        finally:
            self.sock.close()  # one runner per judge
        return ForkedRunner(self.pid)


def _pre_runner(sock: socket.socket) -> None:
    code = 1
    judge = os.getppid()
    try:
        _die_with(judge, b"aka-runner")
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        _adopt(null, null, sock.fileno())  # the judge's protocol pipe, its stdout and stderr files: gone
        data, fds, _, _ = socket.recv_fds(sock, MAX_MSG, 3)
        if not data or len(fds) != 3:
            os._exit(0)  # the judge needed no runner (a baselines-only evaluation), or is gone
        sock.close()
        req = json.loads(data)
        chan, out, err = fds
        _adopt(out, err, chan)
        from aka.evaluate.confine import confine_self
        confine_self(req["writable"], req["hidden"])  # raises rather than run a candidate unconfined
        _die_with(judge, b"aka-runner")  # the change of user cleared PR_SET_PDEATHSIG
        _enter(req["cwd"], req["env"])  # after the mounts: the directory is the writable bind mount
        sys.argv = ["aka.evaluate.runner", str(chan)]
        from aka.evaluate.runner import main
        code = main(sys.argv)  # ends with os._exit
    except BaseException:  # noqa: BLE001 - the judge reads the runner's stderr when it does not start
        import traceback
        traceback.print_exc()
        sys.stderr.flush()
    os._exit(code or 1)


class ForkedRunner:
    """What RunnerClient needs of a Popen, for the judge's forked child: pid, poll, wait, kill."""

    def __init__(self, pid: int):
        self.pid, self.returncode = pid, None

    def poll(self):
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                self.returncode = -signal.SIGKILL
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None):
        import subprocess
        import time
        end = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if end is not None and time.monotonic() > end:
                raise subprocess.TimeoutExpired("runner", timeout)
            time.sleep(0.01)
        return self.returncode

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


# --- the harness's side ----------------------------------------------------------------------------

class ForkedJudge:
    """What sandbox.run_worker needs of a Popen: pid, poll, wait, returncode."""

    def __init__(self, server: "ForkServer", pid: int):
        self.server, self.pid = server, pid
        self.returncode = None

    def poll(self):
        if self.returncode is None:
            self.returncode = self.server.exit_code(self.pid, timeout=0)
        return self.returncode

    def wait(self, timeout: float | None = None):
        import subprocess
        if self.returncode is None:
            self.returncode = self.server.exit_code(self.pid, timeout=timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired("judge", timeout)
        return self.returncode


class ForkServer:
    def __init__(self, env: dict, digest: str):
        import subprocess
        self.digest = digest
        self.env = env
        self.owner = os.getpid()  # a forked harness starts its own zygote and leaves this one alone
        self.cond = threading.Condition()
        self.started: dict[int, int] = {}
        self.exits: dict[int, int] = {}
        self.running: set[int] = set()  # judges started and not yet reaped
        self.alive = True
        self.next_id = 0
        self.send_lock = threading.Lock()
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock = mine
        box: dict = {}

        def keeper() -> None:
            # The zygote dies with the thread that started it (PR_SET_PDEATHSIG follows the thread):
            # this one lives as long as the process.
            try:
                box["proc"] = subprocess.Popen(
                    [sys.executable, "-m", "aka.evaluate.forkserver", str(theirs.fileno())], cwd="/",
                    env=env, stdin=subprocess.DEVNULL, pass_fds=(theirs.fileno(),), start_new_session=True)
            except OSError as e:
                box["error"] = e
            box["ready"].set()
            threading.Event().wait()
        box["ready"] = threading.Event()
        threading.Thread(target=keeper, name="aka-judge-zygote", daemon=True).start()
        box["ready"].wait()
        theirs.close()
        if "error" in box:
            raise box["error"]
        self.proc = box["proc"]
        self.sock.settimeout(300)
        try:
            hello = json.loads(self.sock.recv(MAX_MSG) or b"{}")
        except (OSError, ValueError) as e:
            self.close()
            raise RuntimeError(f"judge zygote did not start: {e}") from None
        if hello.get("event") != READY:
            self.close()
            raise RuntimeError("judge zygote did not start")
        self.sock.settimeout(None)
        threading.Thread(target=self._read, name="aka-judge-zygote-reader", daemon=True).start()

    def _read(self) -> None:
        try:
            while True:
                data = self.sock.recv(MAX_MSG)
                if not data:
                    break
                msg = json.loads(data)
                with self.cond:
                    if msg["event"] == "started":
                        self.started[msg["id"]] = msg["pid"]
                        self.running.add(msg["pid"])
                    elif msg["event"] == "exit":
                        self.exits[msg["pid"]] = msg["code"]
                        self.running.discard(msg["pid"])
                    self.cond.notify_all()
        except (OSError, ValueError):
            pass
        with self.cond:
            self.alive = False
            self.cond.notify_all()

    def spawn(self, spec_path: str, proto_fd: int, cwd: str, env: dict, out_fd: int, err_fd: int) -> ForkedJudge:
        with self.cond:
            if not self.alive:
                raise RuntimeError("judge zygote is gone")
            self.next_id += 1
            rid = self.next_id
        msg = json.dumps({"id": rid, "argv": ["aka.evaluate.judge", spec_path], "cwd": cwd, "env": env}).encode()
        with self.send_lock:
            socket.send_fds(self.sock, [msg], [proto_fd, out_fd, err_fd])
        with self.cond:
            if not self.cond.wait_for(lambda: rid in self.started or not self.alive, timeout=60):
                raise RuntimeError("judge zygote did not answer")
            if rid not in self.started:
                raise RuntimeError("judge zygote is gone")
            return ForkedJudge(self, self.started.pop(rid))

    def exit_code(self, pid: int, timeout: float | None):
        with self.cond:
            self.cond.wait_for(lambda: pid in self.exits or not self.alive, timeout=timeout)
            if pid in self.exits:
                return self.exits.pop(pid)
            if not self.alive:
                return -signal.SIGKILL  # the zygote died, and its judges with it (PR_SET_PDEATHSIG)
            return None

    def close(self) -> None:
        self.alive = False
        try:
            self.sock.close()
        except OSError:
            pass
        proc = getattr(self, "proc", None)
        if proc is not None:
            try:
                proc.kill()
                proc.wait(timeout=10)
            except Exception:  # noqa: BLE001
                pass
        home = self.env.get("HOME", "")
        if "aka-zygote-" in home:
            import shutil
            shutil.rmtree(home, ignore_errors=True)


_SERVERS: dict[str, ForkServer] = {}   # oldest first
KEEP = 2  # zygotes a process keeps (each holds torch, ~0.3 GB): a test suite changes the environment often
_LOCK = threading.Lock()
_BROKEN: set[str] = set()
PER_EVALUATION = ("HOME", "TMPDIR", "AKA_RUNNER_DIR")


def harness_stamp(paths: list) -> str:
    """What the zygote's judges would run, as the files on disk are now: their sizes and modification
    times (sandbox.run_worker hashes their bytes around each evaluation; this only tells an edit)."""
    stamp = []
    for p in sorted(paths):
        try:
            st = p.stat()
            stamp.append(f"{p}:{st.st_size}:{st.st_mtime_ns}")
        except OSError:
            stamp.append(f"{p}:<missing>")
    return "|".join(stamp)


def enabled(device: str, runner_user: str) -> bool:
    """Fork CPU judges only where the runner runs as another user (see the module's docstring)."""
    if device != "cpu" or os.environ.get("AKA_JUDGE_FORKSERVER", "1") == "0":
        return False
    if not hasattr(os, "fork") or not hasattr(socket, "send_fds"):
        return False
    from aka.evaluate.confine import NOBODY, _can_unshare, confine_prefix
    if runner_user == "same" or os.geteuid() != 0:
        return False
    _, info = confine_prefix([], [], "cpu", runner_user) if _can_unshare() else ([], {"user": NOBODY})
    return info.get("user") == NOBODY


def server_for(env: dict, harness_digest: str) -> ForkServer | None:
    """The zygote for judges of this environment and these harness files (None: start judges fresh)."""
    base = {k: v for k, v in env.items() if k not in PER_EVALUATION}
    key = json.dumps(base, sort_keys=True) + harness_digest
    with _LOCK:
        for k in [k for k, s in _SERVERS.items() if s.owner != os.getpid()]:
            _SERVERS.pop(k)  # inherited through a fork of the harness: its parent's, not ours
        if key in _BROKEN:
            return None
        srv = _SERVERS.pop(key, None)
        if srv is not None and srv.alive:
            _SERVERS[key] = srv  # now the newest
            return srv
        if srv is not None:
            srv.close()
        for k in [k for k, s in _SERVERS.items() if s.digest != harness_digest or not s.alive]:
            _SERVERS.pop(k).close()  # the harness changed on disk, or the zygote died
        import tempfile
        home = tempfile.mkdtemp(prefix="aka-zygote-")
        try:
            srv = ForkServer(dict(base, HOME=home, TMPDIR=home), harness_digest)
        except (OSError, RuntimeError) as e:
            print(f"aka: judges start fresh (no zygote: {e})", file=sys.stderr)
            _BROKEN.add(key)
            return None
        _SERVERS[key] = srv
        for k in list(_SERVERS)[:-KEEP]:
            with _SERVERS[k].cond:
                idle = not _SERVERS[k].running
            if idle:  # one with judges in flight is left to serve them (closing it would kill them)
                _SERVERS.pop(k).close()
        return srv


def forget(srv: ForkServer) -> None:
    """A zygote that failed a request serves no more."""
    with _LOCK:
        for k in [k for k, s in _SERVERS.items() if s is srv]:
            _SERVERS.pop(k)
            _BROKEN.add(k)
    srv.close()


if __name__ == "__main__":
    sys.exit(serve(int(sys.argv[1])))
