"""Starting the runner confined, from the judge.

Where the judge runs as root (CI, the GPU machine) the runner gets, in order of what the machine allows:
  * its own mount and network namespaces (util-linux `unshare`): every mount read-only but the
    runner's directory (and on a GPU its own Triton cache), the knowledge base, the caches, the
    run store and the problem's directory hidden under empty read-only mounts, no network;
  * an unprivileged user (`setpriv`, uid/gid 65534): it cannot write what root owns, read the
    judge's 0700 directory, open the judge's file descriptors through /proc, signal or trace it;
    on a GPU it keeps the judge's uid (torch's CUDA IPC counters are 0600 files) but with every
    capability dropped (`setpriv --bounding-set=-all`), so the namespaces' mounts still bind it.
Without root the runner runs as the same user with none of this, and the result's env says so.
Whatever the level, `env.runner` in the result records it.
"""
from __future__ import annotations

import functools
import hashlib
import os
import shlex
import shutil
import subprocess
from pathlib import Path

from aka.evaluate.client import RunnerClient
from aka.evaluate.spec import EvalSpec

NOBODY = 65534
_PROBE: dict = {}


def _can_unshare() -> bool:
    if "unshare" not in _PROBE:
        ok = bool(shutil.which("unshare")) and bool(shutil.which("setpriv"))
        if ok:
            try:
                ok = subprocess.run(["unshare", "--mount", "--net", "--propagation", "private", "true"],
                                    capture_output=True, timeout=20).returncode == 0
            except (OSError, subprocess.SubprocessError):
                ok = False
        _PROBE["unshare"] = ok
    return _PROBE["unshare"]


def hidden_paths(spec: EvalSpec, cache_root: Path, problem: bool = True) -> list[str]:
    """Directories a child running candidate code must not see: the knowledge base, run stores,
    results, caches (baselines, compiled kernels, GPU locks) and, unless `problem` is False (the
    Nsight Compute target builds the reference's inputs itself), the problem's directory."""
    from aka.evaluate.sandbox import PKG_ROOT
    repo = PKG_ROOT
    cands = [repo / "knowledge_base", repo / "runs", repo / "results", repo / "bench" / "results",
             repo / "experiments" / "results", repo / ".gpucache", cache_root / "baselines", cache_root / "inductor",
             cache_root / "triton", cache_root / "locks"]
    ref = spec.problem.get("reference")
    if ref and problem:
        d = Path(ref).resolve().parent
        if d not in (Path("/"), repo, Path.home()) and len(d.parts) > 2:
            cands.append(d)
    return [str(p) for p in cands if p.is_dir()]


def confine_prefix(writable: list[str], hidden: list[str], device: str, user: str,
                   network: bool = False) -> tuple[list[str], dict]:
    """The command prefix that starts a child confined, and what held. `network`: keep the host's
    network namespace (Nsight Compute talks to the process it profiles over local sockets; the
    audit hook still refuses the child's own sockets)."""
    if user == "same" or os.geteuid() != 0:
        return [], {"user": os.geteuid(), "filesystem": "shared", "network": "shared",
                    "why": "not root" if os.geteuid() != 0 else "runner_user=same"}
    setpriv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    gpu_same_user = device != "cpu" and user == "auto"
    if gpu_same_user:
        # torch's CUDA IPC keeps its reference counters in 0600 shared-memory files of the judge's
        # user, which another user cannot open: on a GPU the runner keeps the judge's user (until a
        # run on the H200 shows another way). It keeps uid 0 but no capability at all (bounding and
        # inheritable sets emptied, no_new_privs), so it cannot remount, unmount the hidden paths,
        # or override file permissions, and the read-only mounts bind it. As the same user it can
        # still read the judge's files and host memory; the reference outputs live on the GPU, where
        # no IPC handle the runner holds reaches them.
        setpriv = ["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--no-new-privs"]
    if not _can_unshare():
        if shutil.which("setpriv"):
            return setpriv + ["--"], {"user": 0 if gpu_same_user else NOBODY, "filesystem": "shared",
                                      "network": "shared", "why": "no mount namespace here"}
        return [], {"user": 0, "filesystem": "shared", "network": "shared", "why": "no setpriv"}
    lines = mount_script(writable, hidden, device)
    lines.append("exec " + (" ".join(setpriv) + " -- " if setpriv else "") + '"$@"')
    prefix = ["unshare", "--mount"] + ([] if network else ["--net"]) + \
        ["--propagation", "private", "sh", "-c", "\n".join(lines), "aka-runner"]
    info = {"user": 0 if gpu_same_user else NOBODY, "filesystem": "read-only but its own directory",
            "network": "shared" if network else "none", "hidden": len(hidden)}
    if gpu_same_user:
        info["why"] = "GPU: CUDA IPC reference counters are 0600 files of the judge's user"
        info["capabilities"] = "none"
    return prefix, info


def mount_script(writable: list[str], hidden: list[str], device: str) -> list[str]:
    """The shell lines a child runs in its own mount namespace (propagation private): `writable`
    bound read-write, `hidden` under empty read-only tmpfs mounts, every other mount read-only."""
    q = shlex.quote
    lines = ["set -e"]
    for w in writable:
        lines.append(f"mount --bind {q(w)} {q(w)}; mount -o remount,bind,rw {q(w)}")
    for h in hidden:
        lines.append(f"mount -t tmpfs -o ro,size=4k,mode=0555 tmpfs {q(h)} || true")
    keep = set(writable) | set(hidden)
    # per-mount read-only flags (remount,bind): never a superblock remount, which other
    # namespaces would see too. CUDA IPC needs /dev/shm writable (torch's reference counters).
    skip = "/proc /sys /dev /dev/pts /dev/mqueue" + ("" if device == "cpu" else " /dev/shm")
    lines.append("for m in $(awk '{print $2}' /proc/self/mounts); do case \" " + skip + " \" in *\" $m \"*) continue;; esac; "
                 "case \"$m\" in /proc/*|/sys/*) continue;; esac; "
                 + " ".join(f"[ \"$m\" = {q(k)} ] && continue;" for k in sorted(keep))
                 + " mount -o remount,bind,ro \"$m\" 2>/dev/null || true; done")
    return lines


CLONE_NEWNS, CLONE_NEWNET = 0x00020000, 0x40000000
MS_REC, MS_PRIVATE = 0x4000, 0x40000
PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS = 4, 38


def confine_self(writable: list[str], hidden: list[str]) -> None:
    """What confine_prefix's command does (`unshare --mount --net --propagation private`, the mount
    lines, `setpriv` to nobody), done by this process to itself: for a runner forked from a judge
    (aka/evaluate/forkserver.py), which must be single-threaded here (unshare refuses a mount
    namespace to a process that shares its file-system attributes with threads). CPU only, as root.
    Raises OSError when any step fails: the caller must not run candidate code then."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)

    def check(rc: int, what: str) -> None:
        if rc != 0:
            e = ctypes.get_errno()
            raise OSError(e, f"{what}: {os.strerror(e)}")
    check(libc.unshare(CLONE_NEWNS | CLONE_NEWNET), "unshare(CLONE_NEWNS | CLONE_NEWNET)")
    # first of all, before any mount: nothing mounted from here on may reach the host's namespace
    check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    path = os.environ.get("PATH") or "/usr/sbin:/usr/bin:/sbin:/bin"
    r = subprocess.run(["sh", "-c", "\n".join(mount_script(writable, hidden, "cpu"))], env={"PATH": path},
                       stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
    if r.returncode != 0:
        raise OSError(f"mount lines failed ({r.returncode}): {r.stderr.decode(errors='replace')[-300:]}")
    os.setgroups([])
    os.setresgid(NOBODY, NOBODY, NOBODY)
    os.setresuid(NOBODY, NOBODY, NOBODY)  # every capability goes with uid 0
    check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "PR_SET_NO_NEW_PRIVS")
    # as after setpriv's exec: the process may read its own /proc entries (a change of uid cleared it)
    check(libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0), "PR_SET_DUMPABLE")


def give_to_nobody(paths: list[str]) -> None:
    """chown every file and folder under `paths` to the unprivileged user a confined child runs as."""
    for w in paths:
        for root, dirs, files in os.walk(w):
            for n in [root] + [os.path.join(root, x) for x in dirs + files]:
                try:
                    os.chown(n, NOBODY, NOBODY)
                except OSError:
                    pass


def early_runner(spec_path: str):
    """The judge's first act, before it imports torch: read the spec and start the runner, so the
    two interpreters start side by side (each import of torch is seconds on a busy host).
    Returns (spec, client or None for a baselines-only evaluation)."""
    with open(spec_path) as f:
        spec = EvalSpec.loads(f.read())
    if spec.mode != "candidate":
        return spec, None
    return spec, runner_factory(spec, os.path.dirname(spec_path))(None)


DRIVER_UTILS = "cuda_utils"


def seed_driver_utils(trusted: Path, runner_cache: Path) -> int:
    """Copy Triton's compiled driver module (cuda_utils, built from Triton's own source, the same for
    every candidate) from the judge's cache into a runner's own cache, so that a runner does not
    rebuild it with the C compiler at its start, once per candidate (each candidate has its own
    cache). Copies, never links: a runner may overwrite what is in its cache, and a hard link would
    write through to the judge's. Launchers and kernels are not seeded: they are built for the
    candidate's kernels, in its own cache. Returns the number of entries copied."""
    n = 0
    try:
        entries = [p for p in trusted.glob(f"*/{DRIVER_UTILS}*") if p.is_file() and not p.is_symlink()]
    except OSError:
        return 0
    for src in entries:
        dst = runner_cache / src.parent.name / src.name
        if dst.exists():
            continue
        try:
            dst.parent.mkdir(parents=True, exist_ok=True)
            tmp = dst.with_name(dst.name + f".{os.getpid()}.tmp")
            shutil.copyfile(src, tmp)
            os.replace(tmp, dst)
            n += 1
        except OSError:
            continue
    return n


def build_driver_utils() -> str | None:
    """In the judge (which never imports candidate code): have Triton build its driver module in the
    judge's own cache, where seed_driver_utils finds it for the next runners. Returns why it could
    not (a runner then builds its own, as before), None once it is built or found."""
    try:
        import triton
        triton.runtime.driver.active.utils  # noqa: B018 - the attribute's first read builds the module
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {e}"
    return None


def runner_triton_cache(cache_root: Path, digest: str, hidden: list[str]) -> Path:
    """The runner's Triton cache for one candidate source: <cache root>/runner-triton/<digest>, kept
    across evaluations, unless that lies under a path hidden from the runner (the cache root inside
    the repo, as `.gpucache` on the device is): the runner sees an empty read-only directory there
    and Triton cannot write its cache (H200, 2026-12-03: every evaluation failed its first call with
    EROFS). Then the cache lives under the judge's temporary HOME, for this evaluation only."""
    tc = cache_root / "runner-triton" / digest
    if any(tc.resolve().is_relative_to(Path(h).resolve()) for h in hidden):
        tc = Path.home() / ".cache" / "aka-runner-triton" / digest
    return tc


def child_setup(workdir: Path, source: bytes, device: str, hidden: list[str], user: str, cache_root: Path,
                network: bool = False) -> tuple[list[str], dict, dict, list[str]]:
    """What a child that runs candidate code needs (the runner; the Nsight Compute target):
    (command prefix, confinement info, environment additions, writable directories). Its HOME,
    TMPDIR and caches live in `workdir`; on a GPU its Triton cache is the one kept per candidate
    source, so a candidate can only ever overwrite its own compiled kernels, never the baselines'
    (torch.compile's Triton kernels live in the judge's cache), and a later child of the same
    source finds them again."""
    env = {"HOME": str(workdir / "home"), "TMPDIR": str(workdir), "XDG_CACHE_HOME": str(workdir / "cache"),
           "TORCHINDUCTOR_CACHE_DIR": str(workdir / "inductor")}
    writable = [str(workdir)]
    if device == "cpu":
        env.update(TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="", TRITON_CACHE_DIR=str(workdir / "triton"))
    else:
        tc = runner_triton_cache(cache_root, hashlib.sha256(source).hexdigest()[:16], hidden)
        tc.mkdir(parents=True, exist_ok=True)
        seed_driver_utils(Path(os.environ.get("TRITON_CACHE_DIR", cache_root / "triton")), tc)
        env["TRITON_CACHE_DIR"] = str(tc)
        writable.append(str(tc))
    prefix, info = confine_prefix(writable, hidden, device, user, network=network)
    if info.get("user") == NOBODY:
        give_to_nobody(writable)
    return prefix, info, env, writable


def runner_factory(spec: EvalSpec, judge_dir: str):
    """A callable the judge calls once, at the import stage, to start its runner."""
    def start(judge) -> RunnerClient:
        from aka.evaluate.sandbox import scrubbed_env
        from aka.hardware import cache_dir
        rdir = Path(os.environ.get("AKA_RUNNER_DIR") or Path(judge_dir) / "runner")
        rdir.mkdir(parents=True, exist_ok=True)
        cache_root = cache_dir()
        hidden = hidden_paths(spec, cache_root)
        prefix, info, extra, writable = child_setup(rdir, Path(spec.candidate).read_bytes(), spec.device, hidden,
                                                    spec.settings.runner_user, cache_root)
        env = scrubbed_env(dict(extra, AKA_RUNNER_DEVICE=spec.device, AKA_JUDGE_PID=str(os.getpid())))
        fork = None
        pre = PRE_RUNNER
        if pre is not None and spec.device == "cpu" and prefix[:1] == ["unshare"] and info.get("user") == NOBODY:
            # the same namespaces, mounts and user as `prefix` would give, set up by the forked child itself
            fork = functools.partial(pre.start, writable=writable, hidden=hidden)
            info = dict(info, start="forked")
        return RunnerClient(spec.device, rdir, env, prefix, info, Path(judge_dir), fork=fork)
    return start


# A judge forked from the zygote sets this before it reads its spec (judge.forked_main): the child that
# becomes its runner without starting Python again (forkserver.PreRunner). None: the runner starts fresh.
PRE_RUNNER = None
