"""The runner: the only process that imports the candidate. It decides nothing.

    python -m aka.evaluate.runner CHANNEL_FD

Started by the judge (aka/evaluate/judge.py), confined where the machine allows (an unprivileged
user, a read-only file system but for its own directory, no network: sandbox.confine_command). It
answers the judge's commands on the channel: import the candidate, build it for a shape, run its
forward on the inputs the judge hands over (shared memory / CUDA IPC) and copy the result into
buffers the judge owns, and on a GPU time its own calls. What it reports is evidence for the judge
(kernel launches, ATen ops seen, sample times), never a verdict: the judge compares outputs itself,
with references the runner never sees, and checks what the runner claims against what it measured.

The in-process checks here (the ATen log, the guarded-function snapshot, an audit hook that refuses
writes outside the runner's directory, process spawning, sockets and attribute writes on the
harness's classes) are a cheap first line: a candidate that defeats them can lie about its own
evidence, and nothing more.
"""
from __future__ import annotations

import os
import sys
import time


def _die_with_judge() -> None:
    """SIGKILL when the judge goes, set before anything slow is imported (torch takes seconds on a
    busy host, and a judge killed meanwhile must not leave this process behind); a change of user on
    the way in clears the setting, so it is made here, in the runner itself."""
    try:
        import ctypes
        import signal
        ctypes.CDLL(None).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    want = os.environ.get("AKA_JUDGE_PID")
    if want and os.getppid() != int(want):  # the judge died before the line above
        os._exit(3)


if __name__ == "__main__":
    _die_with_judge()

import torch  # noqa: E402

from aka.evaluate.channel import Channel, ChannelClosed, open_tree
from aka.evaluate.failures import classify_exception, trim
from aka.evaluate.guards import AtenLog, LaunchLog, Snapshot
from aka.evaluate.loader import call, candidate_class, import_file

# replies the judge times with its own clock: the guard check is left to the next reply
UNCLOCKED = frozenset({"time_checked", "ping"})
MAX_SCALAR_READS = 16  # a launch needs a few sizes from the device at most


def install_audit(root: str, violations: list, writable: tuple[str, ...] = ()) -> callable:
    """An audit hook (it cannot be removed once added) refusing what a kernel file never needs:
    writes outside `root`, new processes, sockets, and attribute writes on the classes whose
    methods the runner's evidence comes from. Returns the function that arms it (after the harness
    has finished patching, before the candidate is imported)."""
    armed = [False]
    roots = tuple(os.path.realpath(r) for r in (root,) + tuple(writable) if r)
    compilers = {"ptxas", "cc", "gcc", "clang", "cuobjdump", "nvdisasm", "ld"}
    protected: set = set()   # ids of the classes whose methods the evidence comes from (filled by arm)
    spawn = {"os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "pty.spawn",
             "subprocess.Popen", "os.kill", "os.killpg", "signal.pthread_kill"}
    net = {"socket.connect", "socket.bind", "socket.sendto", "socket.getaddrinfo"}
    introspect = {"gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys.addaudithook",
                  "sys.settrace", "sys.setprofile", "sys._current_frames"}
    realpath, isinstance_, str_, type_ = os.path.realpath, isinstance, str, type
    append = violations.append

    def refuse(what: str):
        append(what)
        raise PermissionError(f"refused by the evaluation sandbox: {what}")

    def hook(event, args):
        if not armed[0]:
            return
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None, None))[:3]
            writing = (isinstance_(mode, str_) and any(c in mode for c in "wax+")) or \
                (isinstance_(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND))
            if writing and isinstance_(path, (str_, bytes)):
                p = realpath(path if isinstance_(path, str_) else path.decode(errors="replace"))
                if not any(p == r or p.startswith(r + os.sep) for r in roots) and not p.startswith("/dev/"):
                    refuse(f"write to {p}")
        elif event in spawn:
            # subprocess.Popen names the program; CPython then starts it through os.posix_spawn
            # (Triton's ptxas runs with close_fds=False) or fork+exec, each audited with the path
            exe = str_(args[0]) if event in ("subprocess.Popen", "os.posix_spawn", "os.exec", "os.spawn") \
                and args else ""
            if os.path.basename(exe) not in compilers:  # Triton runs ptxas and a C compiler on a GPU
                refuse(f"{event} {exe}".strip())
        elif event in net or event in introspect:
            refuse(event)
        elif event in ("object.__setattr__", "object.__delattr__"):
            obj, name = args[0], args[1]
            if name in ("__code__", "__defaults__", "__kwdefaults__", "__closure__") and \
                    str_(getattr(obj, "__module__", "")).startswith("aka."):
                refuse(f"{event} {getattr(obj, '__qualname__', '?')}.{name}")
            if isinstance_(obj, type_) and name != "__doc__" and (
                    id(obj) in protected or str_(getattr(obj, "__module__", "")).startswith("aka.")):
                refuse(f"{event} {getattr(obj, '__qualname__', '?')}.{name}")

    sys.addaudithook(hook)

    def arm(classes=()):
        protected.update(id(c) for c in classes)
        armed[0] = True
    return arm


def resolve_gpu_driver() -> None:
    """Triton's first launch runs programs other than the compilers, once per process: /sbin/ldconfig
    to find libcuda and `file` on the interpreter (platform.architecture, for its build cache key),
    both cached. Run them before the audit hook is armed, which refuses every new process but the
    compilers, and build Triton's driver module now, while the judge is still starting."""
    try:
        from triton.backends.nvidia.driver import libcuda_dirs
        from triton.runtime.build import platform_key
    except ImportError:
        return
    try:
        libcuda_dirs()
        platform_key()
        import triton
        triton.runtime.driver.active.get_current_device()
    except Exception:  # noqa: BLE001 - the candidate's first launch reports what is wrong
        pass


def report_compiles(send, recv, synchronize, events: dict, capturing=None, genuine=None) -> None:
    """Tell the judge when a Triton compile starts and ends, so that its GPU lock's shared hold
    goes for the compile (host work, seconds for each new specialization) instead of keeping every
    other evaluation's timing waiting (aka/evaluate/gpulock.py). Only during commands the judge
    marks `compile_events` (those it runs under a shared hold, never a timed one): at a compile's
    start the runner drains its own GPU work, then says so; at its end it says so and waits for the
    judge's "resume", sent once the judge holds the lock again, before anything launches.

    Installed once, before the guarded snapshot; Triton calls these hooks only on a cache miss,
    so a launch pays nothing. Skipped during a CUDA graph capture, where a synchronize is illegal,
    and when the call does not come from Triton's JITFunction._do_compile (`genuine`: a candidate
    calling the hook itself). The judge asks for these reports only with `unlock_compiles`
    (trusted candidates): code in this process can still reach Triton's compile path with hooks
    of its own and run GPU work while the judge's hold is let go, which can slow another
    evaluation's timing (never this one's: its timed rounds are exclusive and ask for no reports)."""
    try:
        from triton import knobs
        rt = knobs.runtime
        before = (rt.jit_cache_hook, rt.jit_post_compile_hook)
    except Exception:  # noqa: BLE001 - a Triton without runtime knobs: compiles stay under the lock
        return
    if capturing is None:
        import torch
        capturing = torch.cuda.is_current_stream_capturing
    if genuine is None:
        from triton.runtime.jit import JITFunction
        code = JITFunction._do_compile.__code__

        def genuine():
            f = sys._getframe(2)  # start <- JITFunction._call_hook <- JITFunction._do_compile
            for _ in range(3):
                if f is None:
                    return False
                if f.f_code is code:
                    return True
                f = f.f_back
            return False

    def start(*args, **kwargs):
        if events["on"] and not events["compiling"] and not capturing() and genuine():
            synchronize()
            events["compiling"] = True
            send({"event": "compile_start"})
        return before[0](*args, **kwargs) if before[0] is not None else None

    def end(*args, **kwargs):
        if events["compiling"]:
            events["compiling"] = False
            send({"event": "compile_end"})
            _msg, fds = recv(max_fds=0)  # the judge's "resume": it holds the lock again
            for fd in fds:
                os.close(fd)
        return before[1](*args, **kwargs) if before[1] is not None else None

    rt.jit_cache_hook, rt.jit_post_compile_hook = start, end


def serve(chan: Channel, device: str, violations: list, arm) -> None:
    """The command loop. Everything it needs is bound here, before the candidate is imported, so
    rebinding module globals later does not change what the loop calls."""
    launches = LaunchLog().install(interpreted=device == "cpu")
    import importlib  # (a plain `import torch.x` here would make `torch` a local name of serve)
    # torch._dynamo patches torch.manual_seed on first import: where something may bring it in later
    # it is imported before the snapshot. On CPU nothing does (AtenLog's dispatch is not wrapped for
    # dynamo, guards.py, and nothing compiles), so a CPU runner skips its 1.3 s of CPU; were it
    # imported after the snapshot all the same, the changed torch.manual_seed rejects the candidate
    # (a false rejection, never a pass). On a GPU it is imported as before, and the profiler with
    # it, where the profile command can run.
    if device.startswith("cuda") or getattr(AtenLog.__torch_dispatch__, "__wrapped__", None) is not None:
        importlib.import_module("torch._dynamo")
    if device.startswith("cuda"):
        importlib.import_module("torch.profiler")
        # the timing commands' modules, loaded before the snapshot so that their names are guarded too
        from aka.evaluate.runner_timing import timing_handlers
        importlib.import_module("aka.evaluate.timing")
    events = {"on": False, "compiling": False}  # this command may report compiles; one is running
    if device.startswith("cuda"):
        report_compiles(chan.send, chan.recv, torch.cuda.synchronize, events)
    snapshot = Snapshot()
    state: dict = {"keep": []}
    # Bound here as locals (closure cells), not looked up as module globals at call time: a
    # candidate that rebinds this module's names (sys.modules['__main__'].AtenLog = ...) changes nothing.
    from aka.evaluate.compare import flatten_outputs
    _AtenLog, _call, _open_tree, _classify, _import_file = AtenLog, call, open_tree, classify_exception, import_file
    _no_grad, _close = torch.no_grad, os.close
    send, recv, synchronize = chan.send, chan.recv, (torch.cuda.synchronize if device.startswith("cuda") else None)

    def sync():
        if synchronize is not None:
            synchronize()

    def evidence_of(alog: AtenLog, own_kernels: set) -> dict:
        compute = dict(alog.compute)
        scalars = alog.glue.get("_local_scalar_dense", 0)
        if scalars > MAX_SCALAR_READS:  # a forward computed on the host one number at a time
            compute[f"{scalars} host scalar reads (.item()) in one forward"] = 1
        own = {k: n for k, n in launches.counts.items() if k in own_kernels}
        return {"compute": compute, "launches": own, "own": bool(own)}

    from aka.evaluate.guards import _guarded
    guarded_classes = {obj for obj, _ in _guarded() if isinstance(obj, type)} | {AtenLog, LaunchLog}

    def opened(descs, fds, keep):
        """The message's tensors, mapped; its fds closed (the mappings keep the memory)."""
        try:
            return _open_tree(descs, fds, keep)
        finally:
            for fd in fds:
                _close(fd)

    def op_import(msg, fds):
        t0 = time.perf_counter()
        arm(guarded_classes)
        try:
            mod = _import_file(msg["path"], "_aka_candidate")
        except BaseException as e:  # noqa: BLE001 - everything the candidate raises is a verdict
            f = _classify(e, "import")
            return {"ok": False, "status": f.status, "reason": f.reason}
        name = msg.get("model_class") or ("ModelNew" if hasattr(mod, "ModelNew") else "Model")
        if not hasattr(mod, name):
            return {"ok": False, "status": "compile_error", "reason": "candidate defines no ModelNew or Model"}
        state["cls"] = candidate_class(mod, msg.get("kind") or "", name)  # KernelBench-X: a function, wrapped
        state["own"] = set(msg.get("kernels") or ())
        return {"ok": True, "import_s": time.perf_counter() - t0}

    def op_build(msg, fds):
        keep = state["keep"] = []
        torch.manual_seed(int(msg.get("seed", 0)))
        try:
            cand = state["cls"](*msg.get("args", []), **msg.get("kwargs", {}))
            if isinstance(cand, torch.nn.Module):
                cand = cand.to(device)
                weights = _open_tree(msg.get("state") or {}, fds, keep)
                cs = cand.state_dict()
                shared = {k: v for k, v in weights.items() if k in cs and tuple(cs[k].shape) == tuple(v.shape)}
                if shared:
                    cand.load_state_dict(shared, strict=False)
                cand.eval()
        except BaseException as e:  # noqa: BLE001
            f = _classify(e, msg.get("stage", "first_call"))
            return {"ok": False, "status": f.status, "reason": f.reason}
        finally:
            for fd in fds:
                _close(fd)
        state["cand"] = cand
        return {"ok": True}

    def op_forward(msg, fds):
        """Run one forward on the judge's inputs; keep the output until `collect` copies it out."""
        keep = []
        inputs = opened(msg["inputs"], fds, keep)
        launches.reset()
        alog = _AtenLog(launches)
        try:
            with _no_grad(), alog:
                out = _call(state["cand"], inputs)
            sync()
        except BaseException as e:  # noqa: BLE001
            f = _classify(e, msg.get("stage", "correctness"))
            return {"ok": False, "status": f.status, "reason": f.reason}
        try:
            flat = flatten_outputs(out)
        except TypeError as e:
            return {"ok": False, "status": "incorrect", "reason": str(e)}
        state["out"], state["inputs_keep"] = flat, keep
        structure = [[name, list(t.shape), str(t.dtype).replace("torch.", "")] if isinstance(t, torch.Tensor)
                     else [name, None, type(t).__name__] for name, t in flat]
        return {"ok": True, "structure": structure, "evidence": evidence_of(alog, state["own"]),
                "guards": snapshot.changed()}

    def op_collect(msg, fds):
        """Copy the kept output into the judge's buffers (one per tensor output, by name)."""
        bufs = opened(msg["outputs"], fds, [])
        flat = dict(state.pop("out", []))
        with _no_grad():
            for name, buf in bufs.items():
                t = flat.get(name)
                if isinstance(t, torch.Tensor) and tuple(t.shape) == tuple(buf.shape) and t.dtype == buf.dtype:
                    buf.copy_(t)
        sync()
        state.pop("inputs_keep", None)
        return {"ok": True}

    handlers = {"import": op_import, "build": op_build, "forward": op_forward, "collect": op_collect,
                "ping": lambda msg, fds: {"ok": True}}
    if device.startswith("cuda"):
        handlers.update(timing_handlers(state, sync))
    changed = snapshot.changed
    send({"ok": True, "ready": True, "uid": os.getuid()})  # start-up done: what follows is the candidate's time
    while True:
        try:
            msg, fds = recv()
        except ChannelClosed:
            return
        op = msg.get("op")
        if op == "bye":
            send({"ok": True, "violations": list(violations)})
            return
        h = handlers.get(op)
        if h is None:
            send({"ok": False, "status": "crashed", "reason": f"runner: unknown command {op!r}"})
            continue
        events["on"], events["compiling"] = bool(msg.get("compile_events")), False
        try:
            reply = h(msg, fds)
        except BaseException as e:  # noqa: BLE001 - a runner-side error is the candidate's or ours: reported
            reply = {"ok": False, "status": "crashed", "reason": trim(f"runner error in {op}: {type(e).__name__}: {e}")}
        finally:
            events["on"] = events["compiling"] = False
        reply["violations"] = list(violations)
        try:  # after every command, not only a forward: a candidate may wait for the timing stage.
            # Not inside the judge's clock (the checked call and the ping that sizes its bound): a
            # change persists, so the next reply (time_end follows every checked call) carries it.
            reply["guards"] = [] if op in UNCLOCKED else changed()
        except BaseException as e:  # noqa: BLE001 - a namespace made unreadable is itself a change
            reply["guards"] = [f"guard check failed: {type(e).__name__}"]
        send(reply)


def main(argv: list[str]) -> int:
    chan = Channel.from_fd(int(argv[1]))
    device = os.environ.get("AKA_RUNNER_DEVICE", "cpu")
    violations: list = []
    if device == "cpu":
        from aka.evaluate.interp_fix import install
        install()
    else:
        resolve_gpu_driver()
    arm = install_audit(os.getcwd(), violations, (os.environ.get("TRITON_CACHE_DIR", ""),))
    try:
        serve(chan, device, violations, arm)
    finally:
        chan.close()
        sys.stdout.flush()
        sys.stderr.flush()
    # No interpreter teardown: a candidate's atexit hooks have nothing left to change.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
