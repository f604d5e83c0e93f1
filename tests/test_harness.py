"""The `aka eval` command line, the JSON result contract, and the sandbox's environment scrubbing
and trusted-file hashing."""
from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from aka.cli import main
from aka.evaluate import sandbox
from aka.evaluate.api import EvalConfig, evaluate

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PROBLEMS = HERE / "fixtures" / "problems"
HONEST = HERE / "fixtures" / "candidates" / "honest"

SHAPE_KEYS = ("correct", "failed_stage", "max_abs_err", "rel_err", "time_us", "time_ci_us", "eager_us",
              "compile_us", "speedup_eager", "speedup_compile", "sol_us", "sol_fraction", "iou", "mfu", "bound")


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    code = main(["eval", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code: int, err: str, text: str) -> None:
    assert code == 2, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("aka: error: ") and text in lines[0], err


@pytest.fixture
def opdir(tmp_path):
    dst = tmp_path / "vec_add"
    shutil.copytree(PROBLEMS / "vec_add", dst)
    return dst


def test_missing_candidate(capsys, tmp_path):
    code, _, err = run_cli(capsys, PROBLEMS / "vec_add", tmp_path / "nope.py", "--device", "cpu")
    assert_one_line_error(code, err, "candidate not found")


def test_candidate_without_model_class(capsys, tmp_path):
    cand = tmp_path / "cand.py"
    cand.write_text((HONEST / "vec_add.py").read_text().replace("class ModelNew", "class Adder"))
    code, _, err = run_cli(capsys, PROBLEMS / "vec_add", cand, "--device", "cpu")
    assert_one_line_error(code, err, "defines no class ModelNew or Model")


def test_malformed_shapes_json(capsys, opdir):
    (opdir / "shapes.json").write_text('{"0": {"input_kwargs": {"n": 5}},')
    code, _, err = run_cli(capsys, opdir, HONEST / "vec_add.py", "--device", "cpu")
    assert_one_line_error(code, err, "malformed shapes.json")


def test_unknown_shape_id(capsys):
    code, _, err = run_cli(capsys, PROBLEMS / "vec_add", HONEST / "vec_add.py", "--device", "cpu", "--shapes", "0,42")
    assert_one_line_error(code, err, "unknown shape id(s) 42")


def test_unknown_problem_and_device(capsys, tmp_path):
    code, _, err = run_cli(capsys, tmp_path / "no_such_op", HONEST / "vec_add.py", "--device", "cpu")
    assert_one_line_error(code, err, "problem not found")
    code, _, err = run_cli(capsys, PROBLEMS / "vec_add", HONEST / "vec_add.py", "--device", "tpu")
    assert_one_line_error(code, err, "unknown device 'tpu'")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_device_cuda_without_gpu(capsys):
    code, _, err = run_cli(capsys, PROBLEMS / "vec_add", HONEST / "vec_add.py", "--device", "cuda")
    assert_one_line_error(code, err, "--device cuda requested but no CUDA GPU is visible")


def test_eval_cli_writes_the_contract_json(tmp_path):
    """The real entry point in a subprocess: exit code 0 and every contract key in the JSON."""
    out = tmp_path / "res" / "out.json"
    proc = subprocess.run([sys.executable, "-m", "aka.cli", "eval", str(PROBLEMS / "vec_add"),
                           str(HONEST / "vec_add.py"), "--device", "cpu", "--shapes", "all", "--seed", "7",
                           "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "pass" in proc.stdout
    data = json.loads(out.read_text())  # strict JSON: no NaN/Infinity literals
    assert data["status"] == "pass" and data["reason"] == "all stages passed"
    assert [s["id"] for s in data["shapes"]] == ["0", "1", "2"]
    for s in data["shapes"]:
        missing = [k for k in SHAPE_KEYS if k not in s]
        assert not missing, missing
        assert s["correct"] is True and s["failed_stage"] is None and s["rel_err"] is not None
        assert s["time_us"] is None  # CPU: correctness only, never a made-up time
    env = data["env"]
    assert env["device"] == "cpu" and env["torch"] == torch.__version__ and "triton" in env
    assert env["problem_kind"] == "opdir" and "git_sha" in env


def test_scrubbed_env_keeps_only_the_allow_list(monkeypatch):
    secrets = {"OPENAI_API_KEY": "sk-1", "ANTHROPIC_API_KEY": "sk-2", "HF_TOKEN": "hf", "GITHUB_TOKEN": "gh",
               "AWS_SECRET_ACCESS_KEY": "aws", "DB_PASSWORD": "pw", "TRITON_API_KEY": "t",
               "PYTORCH_AUTH_HEADER": "a", "NCCL_SECRET": "n", "LD_PRELOAD": "/tmp/evil.so",
               "PYTHONSTARTUP": "/tmp/x.py", "HOME": "/root"}
    kept = {"PATH": "/usr/bin", "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": "0", "OMP_NUM_THREADS": "2",
            "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "NCCL_NVLS_ENABLE": "0"}
    for k, v in {**secrets, **kept}.items():
        monkeypatch.setenv(k, v)
    env = sandbox.scrubbed_env({"HOME": "/tmp/aka-home"})
    for k in secrets:
        if k != "HOME":
            assert k not in env, k
    for k, v in kept.items():
        assert env[k] == v
    assert env["HOME"] == "/tmp/aka-home" and env["PYTHONPATH"] == str(sandbox.PKG_ROOT)
    assert not [k for k in env if any(w in k.upper() for w in sandbox.ENV_DENY_WORDS)]


@pytest.mark.parametrize("forked", [False, True], ids=["fresh", "forked"])
def test_the_judge_gets_the_callers_cache_root(monkeypatch, tmp_path, forked):
    """AKA_CACHE_DIR does not pass the scrub; the judge must still know it (its runners' Triton
    caches, its driver module, the cache paths it hides from the runner live under it). Forked:
    the environment the zygote's child takes (aka/evaluate/forkserver.py)."""
    from aka.evaluate import forkserver
    monkeypatch.setenv("AKA_CACHE_DIR", str(tmp_path / "cache"))
    seen = []
    real, real_spawn = subprocess.Popen, forkserver.ForkServer.spawn

    def spy(cmd, *a, **kw):
        if "aka.evaluate.judge" in cmd:
            seen.append(kw["env"])
        return real(cmd, *a, **kw)

    def spy_spawn(self, spec_path, fd, cwd, env, *a):
        seen.append(env)
        return real_spawn(self, spec_path, fd, cwd, env, *a)
    monkeypatch.setattr(sandbox.subprocess, "Popen", spy)
    monkeypatch.setattr(forkserver.ForkServer, "spawn", spy_spawn)
    monkeypatch.setattr(forkserver, "enabled", lambda device, user: forked)
    res = evaluate(PROBLEMS / "vec_add", HONEST / "vec_add.py", shapes="0",
                   config=EvalConfig(device="cpu", timing=False))
    assert res.status == "pass", res.reason
    assert [e["AKA_CACHE_DIR"] for e in seen] == [str((tmp_path / "cache").resolve())]
    assert seen[0]["HOME"] != str(Path.home()) and "AKA_CACHE_DIR" not in sandbox.scrubbed_env()


def test_the_runners_triton_cache_is_never_under_a_path_hidden_from_it(tmp_path, monkeypatch):
    from aka.evaluate.confine import runner_triton_cache
    monkeypatch.setenv("HOME", str(tmp_path / "judge-home"))
    cache = tmp_path / "repo" / ".gpucache"
    kept = runner_triton_cache(tmp_path / "cache", "ab12", [str(tmp_path / "cache" / "triton"), str(cache)])
    assert kept == tmp_path / "cache" / "runner-triton" / "ab12"        # kept across evaluations
    moved = runner_triton_cache(cache, "ab12", [str(tmp_path / "repo" / "results"), str(cache)])
    assert moved == tmp_path / "judge-home" / ".cache" / "aka-runner-triton" / "ab12"   # hidden: this evaluation's


def test_trusted_files_cover_the_judge_and_runner_side_harness_and_the_problem():
    files = sandbox.trusted_files([PROBLEMS / "vec_add" / "reference.py", PROBLEMS / "vec_add" / "input.py"])
    names = {p.name for p in files}
    assert {"judge.py", "runner.py", "channel.py", "confine.py", "compare.py", "guards.py", "loader.py", "static.py",
            "reference.py", "input.py"} <= names
    h1 = sandbox.hash_files(files)
    assert h1 == sandbox.hash_files(list(reversed(files)))  # order-independent


def _aka_imports(path: Path) -> set[str]:
    mods = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("aka"):
            mods.add(node.module)
            mods.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            mods.update(a.name for a in node.names if a.name.startswith("aka"))
    return mods


def test_every_module_the_judge_and_runner_import_is_hashed():
    seen, todo = set(), ["aka.evaluate.judge", "aka.evaluate.runner", "aka.evaluate.runner_timing",
                         "aka.evaluate.timed"]
    while todo:
        mod = todo.pop()
        path = ROOT / (mod.replace(".", "/") + ".py")
        if mod in seen or not path.exists():
            continue
        seen.add(mod)
        todo += sorted(_aka_imports(path))
    seen |= {"aka"}  # the package itself is imported before any submodule
    files = {ROOT / (m.replace(".", "/") + ".py") if m != "aka" else ROOT / "aka" / "__init__.py" for m in seen}
    hashed = set(sandbox.trusted_files([]))
    assert files - hashed == set(), sorted(str(p.relative_to(ROOT)) for p in files - hashed)


def test_problem_file_changed_mid_run_discards_the_result(opdir):
    """A temporary copy of the problem is edited while the worker runs: the verdict must not stand."""
    cfg = EvalConfig(device="cpu", seed=11)
    res = evaluate(opdir, HONEST / "vec_add.py", config=cfg)
    assert res.status == "pass", res.reason  # control: the same copy, untouched, passes

    edited = []

    def on_progress(msg):
        if not edited:
            with open(opdir / "reference.py", "a") as f:
                f.write("\n# edited while the evaluation ran\n")
            edited.append(msg["stage"])

    res = evaluate(opdir, HONEST / "vec_add.py", config=cfg, on_progress=on_progress)
    assert edited and res.status == "rejected"
    assert "harness or problem files changed during the evaluation" in res.reason


def test_hash_mismatch_rejects_even_a_passing_worker(monkeypatch):
    """Same rule through the hash function: any difference between before and after rejects."""
    calls = []

    def fake_hash(paths):
        calls.append(len(paths))
        return f"h{len(calls)}"

    monkeypatch.setattr(sandbox, "hash_files", fake_hash)
    res = evaluate(PROBLEMS / "vec_add", HONEST / "vec_add.py", config=EvalConfig(device="cpu", seed=3))
    assert len(calls) == 2 and res.status == "rejected"
    assert "result discarded" in res.reason


def test_fingerprint_reads_its_tensors_without_changing_them():
    """The correctness stage digests outputs where they live; an int64 output (ids) is viewed, not
    copied, so the digest must never write through the view (it once did: the first draw's output
    then no longer matched the repeat run)."""
    import torch

    from aka.evaluate.tensors import fingerprint
    ids = torch.arange(40, dtype=torch.int64).reshape(4, 10) * 7
    keep = ids.clone()
    a = fingerprint(ids)
    assert torch.equal(ids, keep) and fingerprint(ids) == a
    ids[3, 9] += 1
    assert fingerprint(ids) != a
    swapped = keep.clone()
    swapped[0, 0], swapped[0, 1] = keep[0, 1], keep[0, 0]
    assert fingerprint(swapped) != fingerprint(keep)  # position-weighted: a permutation is a change


def test_compiling_baselines_keep_the_idle_watchdog_fed_but_a_hanging_candidate_does_not(monkeypatch):
    """ShapeTimer.first_calls: the trusted baselines get a heartbeat thread (one torch.compile of
    a large graph can outlast the sandbox's idle watchdog); the candidate only beats between
    calls, so one call that never returns still looks hung."""
    import time

    import torch

    from aka.evaluate import timing
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    monkeypatch.setattr(timing, "BEAT_S", 0.05)

    class Slow:
        def __init__(self, name):
            self.name, self.error = name, None

        def __call__(self, inputs):
            time.sleep(0.5)

    for name, expect_beats in (("compile", True), ("candidate", False)):
        t = timing.ShapeTimer.__new__(timing.ShapeTimer)  # no flush buffer: no GPU here
        t.impls, t.sets = [Slow(name)], [{}]
        beats = []
        t.first_calls(beat=lambda: beats.append(time.monotonic()))
        assert (len(beats) >= 3) == expect_beats, (name, len(beats))
        assert t.impls[0].error is None


def test_timing_method_is_the_shapes_and_a_failed_capture_is_still_timed(monkeypatch):
    """Timing v4's choice, without a GPU (the CUDA calls stubbed): every capturable
    implementation of a shape with several input sets is graph-timed, a call that syncs with the
    host is event-timed with a note, a capture that fails falls back to events with a note (and
    is not left untimed, as v3 did), and a one-set shape is event-timed throughout."""
    import torch

    from aka.evaluate import timing
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    monkeypatch.setattr(timing, "_event_time_us", lambda fn, n, head_start=True: 3.0)
    monkeypatch.setattr(timing, "_syncs_with_host", lambda impl, inputs: impl.name == "syncs")

    def capture(self, impl, m=None):
        if impl.name == "breaks":
            raise RuntimeError("operation not permitted when stream is capturing")
        impl.graph, impl.graph_calls = type("G", (), {"replay": lambda self: None})(), m or len(self.sets)
    monkeypatch.setattr(timing.ShapeTimer, "_capture", capture)

    def timer(n_sets, names):
        t = timing.ShapeTimer.__new__(timing.ShapeTimer)  # no flush buffer: no GPU here
        t.sets, t.graphed = [{"x": torch.ones(2)} for _ in range(n_sets)], n_sets > 1
        t.impls = [timing.Impl(n, lambda x: x) for n in names]
        for i in t.impls:
            i.warmed = True
            t.prepare(i)
        return {i.name: (i.method, i.note) for i in t.impls}

    got = timer(4, ["candidate", "eager", "compile", "syncs", "breaks"])
    assert got["candidate"] == got["eager"] == got["compile"] == ("cuda_graph", None)
    assert got["syncs"][0] == "cuda_events" and "synchronizes" in got["syncs"][1]
    assert got["breaks"][0] == "cuda_events" and "graph capture failed" in got["breaks"][1]
    assert all(m == "cuda_events" and note is None for m, note in timer(1, ["candidate", "compile"]).values())


def test_first_calls_run_gpu_work_under_the_shared_lock(monkeypatch):
    """GPU work outside every lock would land in another evaluation's timed region: every first
    call holds the shared lock; torch.compile's through the hold that lets go while it compiles."""
    from contextlib import contextmanager

    import torch

    from aka.evaluate import timing
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    held = []

    class Lock:
        @contextmanager
        def shared(self, label=""):
            held.append("shared")
            yield
            held.pop()

        def breathe(self):
            breaths.append(tuple(held))

    calls, breaths = [], []

    class Impl:
        def __init__(self, name):
            self.name, self.error = name, None

        def __call__(self, inputs):
            calls.append((self.name, inputs["i"], tuple(held)))

    t = timing.ShapeTimer.__new__(timing.ShapeTimer)
    t.impls, t.sets = [Impl("candidate"), Impl("eager"), Impl("compile")], [{"i": i} for i in range(3)]
    t.first_calls(gpu=Lock())
    assert len(calls) == 9
    for name, _, h in calls:
        assert h == ("shared",), (name, h)
    assert breaths == [("shared",)] * 9, "a waiting timing may go between any two calls, inside the hold"


def test_timed_rounds_take_one_exclusive_hold_per_shape(monkeypatch):
    """Preparation and all rounds run in one exclusive hold (an exclusive entry waits for every
    other evaluation's shared work, so one per round cost more than the rounds). Several input
    sets: every round's new values are made under the shared lock first and written just before
    their round. One set: each round's values are made and written inside the hold, one round
    at a time (staging them all would multiply the GPU memory of inputs over 3x the L2)."""
    from contextlib import contextmanager

    import torch

    from aka.evaluate import timing
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    log, mode = [], []

    class Lock:
        @contextmanager
        def _hold(self, kind):
            log.append(f"enter {kind}")
            mode.append(kind)
            yield
            mode.pop()
            log.append(f"leave {kind}")

        def shared(self, label=""):
            return self._hold("shared")

        def exclusive(self):
            return self._hold("exclusive")

    def stage(r):
        log.append(f"make {r} ({mode[-1]})")
        return lambda: log.append(f"write {r} ({mode[-1]})")

    t = timing.ShapeTimer.__new__(timing.ShapeTimer)
    t.impls, t.stage = [], stage
    monkeypatch.setattr(t, "_round", lambda r, live: log.append(f"round {r} ({mode[-1]})"), raising=False)
    t.sets = [{}, {}]
    t.run(Lock())
    rounds = range(1, timing.ROUNDS)
    assert log == (["enter shared"] + [f"make {r} (shared)" for r in rounds] + ["leave shared", "enter exclusive",
                   "round 0 (exclusive)"]
                   + [x for r in rounds for x in (f"write {r} (exclusive)", f"round {r} (exclusive)")]
                   + ["leave exclusive"])
    log.clear()
    t.sets = [{}]
    t.run(Lock())
    assert log == (["enter exclusive", "round 0 (exclusive)"]
                   + [x for r in rounds for x in (f"make {r} (exclusive)", f"write {r} (exclusive)",
                                                  f"round {r} (exclusive)")]
                   + ["leave exclusive"])


def test_a_slow_call_is_graphed_over_fewer_sets_only_where_the_l2_cannot_matter(monkeypatch):
    """A replay of every input set of a 14 ms call held the GPU for seconds per sample (288 s of
    exclusive hold for one kernel). Fewer sets where a warm L2 is worth < 1% of the call; every
    set when the head start overstated a host-bound call, or the sets are large."""
    import torch

    from aka.evaluate import timing
    assert timing.graph_sets(256, 10.0, 1 << 10) == 256  # 2.6 ms a replay: unchanged
    assert timing.graph_sets(256, 14_000.0, 1 << 10) == 2  # 28 ms a replay, not 3.6 s
    assert timing.graph_sets(256, 14_000.0, 1 << 30) == 256  # 1 GiB sets: the L2 could matter
    assert timing.graph_sets(1, 14_000.0, 1 << 10) == 1
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    monkeypatch.setattr(timing, "_syncs_with_host", lambda impl, inputs: False)
    gpu_us = {}

    def capture(self, impl, m=None):  # as ShapeTimer._capture: the graph, then its replay's time per call
        impl.graph_calls = m or len(self.sets)
        impl.graph = type("G", (), {"replay": lambda self, n=impl.graph_calls, us=gpu_us[impl.name]: n * us})()
        impl.estimate_us = timing._event_time_us(impl.graph.replay, 3) / impl.graph_calls
    monkeypatch.setattr(timing.ShapeTimer, "_capture", capture)
    host_us = {"slow": 14_000.0, "host_bound": 200.0, "host_bound_slow": 25_000.0}
    gpu_us.update({"slow": 14_000.0, "host_bound": 3.0, "host_bound_slow": 2_000.0})

    t = timing.ShapeTimer.__new__(timing.ShapeTimer)
    t.sets, t.graphed = [{"x": torch.ones(8)} for _ in range(256)], True
    for name in ("slow", "host_bound", "host_bound_slow"):
        impl = timing.Impl(name, lambda x: x)
        impl.warmed = True

        def event_time(fn, n, head_start=True, name=name):
            r = fn()  # a graph replay gives its GPU time; a plain call, the head start's estimate
            return r if isinstance(r, float) else host_us[name]
        monkeypatch.setattr(timing, "_event_time_us", event_time)
        t.prepare(impl)
        assert impl.method == "cuda_graph"
        if name == "slow":
            assert impl.graph_calls == 2 and impl.estimate_us == 14_000.0
        elif name == "host_bound":  # 200 us by the head start, 3 us on the GPU: recaptured over every set
            assert impl.graph_calls == 256 and impl.estimate_us == 3.0
        else:  # 25 ms by the head start (1 set), 2 ms on the GPU: recaptured over 10 sets, not 256
            assert impl.graph_calls == 10 and impl.estimate_us == 2_000.0


def _exclusive_free(lock_file) -> bool:
    """Whether another holder could take the GPU lock's file exclusively right now."""
    import fcntl
    import os
    fd = os.open(lock_file, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def test_shared_hold_lets_go_while_torch_compile_compiles(tmp_path):
    """gpulock.shared: during a dynamo compile (and a recompile for new values)
    another process could take the exclusive lock; around the compiled calls it could not."""
    import torch

    from aka.evaluate.gpulock import GpuLock
    from torch._dynamo.callback import callback_handler
    lock = GpuLock(tmp_path, "gpu0")
    seen = []

    exclusive_free = lambda: _exclusive_free(tmp_path / "gpu0.lock")  # noqa: E731

    def f(x, n: int):
        return x * n if n > 2 else x + n  # an int argument: a new value recompiles

    g = torch.compile(f, backend="eager", dynamic=False)
    torch._dynamo.reset()  # (clears registered callbacks too)
    probe = lambda _a: seen.append(("compiling", exclusive_free()))  # noqa: E731
    try:
        with lock.shared():
            callback_handler.register_start_callback(probe)  # after the lock's own: it sees the release
            for n in (1, 3):
                g(torch.ones(4), n)
                seen.append(("between", exclusive_free()))
    finally:
        callback_handler.remove_start_callback(probe)
    assert seen.count(("compiling", True)) >= 2 and ("compiling", False) not in seen
    assert [s for s in seen if s[0] == "between"] == [("between", False)] * 2
    assert exclusive_free()


def test_shared_hold_lets_go_while_triton_compiles(tmp_path):
    """gpulock.shared also lets go around a Triton JIT compile: Triton calls `jit_cache_hook`
    before compiling (a truthy return would skip the compile, so the lock's hook returns None) and
    `jit_post_compile_hook` after. A launch after a compile that never reported its end takes the
    lock again. Hooks set before the hold are chained, and restored after it."""
    from triton import knobs

    from aka.evaluate.gpulock import GpuLock
    lock = GpuLock(tmp_path, "gpu0")
    rt = knobs.runtime

    exclusive_free = lambda: _exclusive_free(tmp_path / "gpu0.lock")  # noqa: E731

    theirs = []
    prev_cache, prev_post = rt.jit_cache_hook, rt.jit_post_compile_hook
    rt.jit_cache_hook = lambda **kw: theirs.append(("cache", kw["key"]))
    rt.jit_post_compile_hook = lambda **kw: theirs.append(("post", kw["key"]))
    mine_cache, mine_post = rt.jit_cache_hook, rt.jit_post_compile_hook
    n_launch = len(rt.launch_enter_hook.calls)
    try:
        with lock.shared():
            assert not exclusive_free()
            assert not rt.jit_cache_hook(key="k1")   # compiling: falsy, so Triton goes on to compile
            assert exclusive_free()
            rt.jit_post_compile_hook(key="k1")
            assert not exclusive_free()
            rt.jit_cache_hook(key="k2")               # a compile that raised: no post hook ...
            assert exclusive_free()
            rt.launch_enter_hook(None)                # ... the next launch takes the lock again
            assert not exclusive_free()
        assert exclusive_free()
        assert lock.compiling_s > 0  # reported in the worker's wall-time breakdown
        assert theirs == [("cache", "k1"), ("post", "k1"), ("cache", "k2")]
        assert (rt.jit_cache_hook, rt.jit_post_compile_hook) == (mine_cache, mine_post)
        assert len(rt.launch_enter_hook.calls) == n_launch
    finally:
        rt.jit_cache_hook, rt.jit_post_compile_hook = prev_cache, prev_post


def test_timed_rounds_refresh_floats_and_keep_the_integers_that_steer_control_flow():
    """New routing ids or sequence lengths in a timed round would make torch.compile recompile
    a value-dependent reference inside the timed region; new activations are enough to expose a
    stale cached output. An all-integer op still gets new values."""
    import torch

    from aka.evaluate.timing import refreshed_keys
    moe = {"x": torch.ones(2, 4, dtype=torch.bfloat16), "topk_ids": torch.zeros(2, 2, dtype=torch.int32),
           "scale": torch.ones(2), "block_size": 16}
    assert refreshed_keys(moe) == ["x", "scale"]
    assert refreshed_keys(moe, mutates=["x"]) == ["scale"]
    align = {"topk_ids": torch.zeros(2, 2, dtype=torch.int32), "num_experts": 8}
    assert refreshed_keys(align) == ["topk_ids"]


def test_input_sets_share_one_pattern_of_control_values():
    """Timing's input sets: floats differ per set (and per refresh), integer control values
    are the first set's in every set (one compile of a value-dependent reference), each in its
    own storage (the rotation still keeps the L2 cold)."""
    import torch

    from aka.evaluate.timing import make_input_sets

    class Rt:
        def make_inputs(self, shape):
            return {"x": torch.randn(8, 4), "ids": torch.randint(0, 1000, (8,)), "k": 3}

    class IntRt:
        def make_inputs(self, shape):
            return {"ids": torch.randint(0, 1000, (8,))}

    sets = make_input_sets(Rt(), {}, seed=1, l2_bytes=10_000, n=4)
    assert all(torch.equal(s["ids"], sets[0]["ids"]) for s in sets)
    assert len({s["ids"].data_ptr() for s in sets}) == 4
    assert not torch.equal(sets[0]["x"], sets[1]["x"])
    only_ints = make_input_sets(IntRt(), {}, seed=1, l2_bytes=10_000, n=3)
    assert not torch.equal(only_ints[0]["ids"], only_ints[1]["ids"])  # nothing else to vary


def test_provenance_names_the_commit_the_device_copy_came_from(monkeypatch):
    """The device machine's copy of the tree has a .git of its own: AKA_GIT_SHA (written by
    scripts/pre_device.sh, exported by gpu_run.sh) is what the records then name."""
    from aka.evaluate.api import git_sha
    monkeypatch.setenv("AKA_GIT_SHA", "0123456789ab")
    assert git_sha() == "0123456789ab"
    monkeypatch.delenv("AKA_GIT_SHA")
    assert git_sha() != "0123456789ab"


def test_outlier_injection_is_cheap_seeded_and_scales_a_thousandth_of_the_elements():
    """Outliers at 1e-3 of the elements, the same positions for the same seed, exempt and integer
    inputs untouched; positions are drawn, not permuted (a permutation of a 235M-element input
    took 18 s on the host inside a shared GPU hold)."""
    import torch

    from aka.evaluate.tensors import inject_outliers

    def inputs():
        return {"x": torch.ones(100_000), "w": torch.ones(1000), "ids": torch.arange(10)}

    a, b = inputs(), inputs()
    touched = inject_outliers(a, {"w"}, 1e-3, 50.0, torch.Generator().manual_seed(3))
    inject_outliers(b, {"w"}, 1e-3, 50.0, torch.Generator().manual_seed(3))
    assert touched == ["x"]
    hit = (a["x"] == 50.0).sum().item()
    assert 95 <= hit <= 100 and set(a["x"].unique().tolist()) == {1.0, 50.0}  # a repeat scales once
    assert torch.equal(a["x"], b["x"]) and torch.equal(a["w"], torch.ones(1000))
    assert torch.equal(a["ids"], torch.arange(10))


def test_runner_cache_is_seeded_with_copies_of_the_judges_driver_module_only(tmp_path):
    """A runner's own Triton cache starts with Triton's driver module from the judge's cache, as a
    copy (a runner overwriting it leaves the judge's intact); nothing else the judge compiled comes
    along, and an entry the runner already has is left as it is."""
    from aka.evaluate.confine import seed_driver_utils
    trusted, mine = tmp_path / "judge", tmp_path / "runner"
    (trusted / "k1").mkdir(parents=True)
    (trusted / "k1" / "cuda_utils.cpython-312-x86_64-linux-gnu.so").write_bytes(b"judge-built")
    (trusted / "k2").mkdir()
    (trusted / "k2" / "__triton_launcher.so").write_bytes(b"launcher")
    (trusted / "k3").mkdir()
    (trusted / "k3" / "_rms_kernel.cubin").write_bytes(b"kernel")
    assert seed_driver_utils(trusted, mine) == 1
    got = mine / "k1" / "cuda_utils.cpython-312-x86_64-linux-gnu.so"
    assert got.read_bytes() == b"judge-built" and not (mine / "k2").exists() and not (mine / "k3").exists()
    assert got.stat().st_ino != (trusted / "k1" / got.name).stat().st_ino
    got.write_bytes(b"runner-overwrote")
    assert (trusted / "k1" / got.name).read_bytes() == b"judge-built"
    assert seed_driver_utils(trusted, mine) == 0 and got.read_bytes() == b"runner-overwrote"
    assert seed_driver_utils(tmp_path / "absent", mine) == 0


def test_event_timed_samples_record_each_calls_host_time(monkeypatch):
    """ShapeTimer.sample on one input set (events): each call's host time is kept beside its GPU
    sample, for host_bound_note; a graph-timed impl records none (its host does not enter the figure)."""
    import time as _time

    import torch

    from aka.evaluate import timing

    class Event:
        def __init__(self, **kw):
            self.t = 0.0

        def record(self):
            self.t = _time.perf_counter()

        def elapsed_time(self, other):
            return (other.t - self.t) * 1e3

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    spins = []
    monkeypatch.setattr(timing, "_head_start", lambda cycles=timing.HEAD_START_CYCLES: spins.append(cycles))
    monkeypatch.setattr(timing, "head_start_us", lambda: 200.0)

    class Slow(timing.Impl):
        def __call__(self, inputs):
            _time.sleep(0.004)
            return inputs["x"]

    t = timing.ShapeTimer.__new__(timing.ShapeTimer)
    t.sets = [{"x": torch.zeros(1)}]
    t.flush = lambda: None
    impl = Slow("candidate", None)
    impl.extendable = True   # as prepare leaves a call whose spin may grow
    t.sample(impl, 3)
    assert len(impl.host_us) == 3 and all(h >= 3500 for h in impl.host_us)
    assert len(impl.samples) == 3
    # the first round ran behind the fixed spin and says so; its 4 ms host path sizes the next one's
    assert spins == [timing.HEAD_START_CYCLES] * 3 and impl.head_us == [200.0] * 3
    host = sorted(impl.host_us)[1]
    assert impl.spin_cycles == timing.head_start_cycles(host) > 20 * timing.HEAD_START_CYCLES
    sized = impl.spin_cycles
    t.sample(impl, 2)
    assert spins[3:] == [sized] * 2 and impl.head_us[3:] == [pytest.approx(1.5 * host + 50, rel=0.01)] * 2
    assert impl.spin_cycles >= sized   # raised again only if this round's host got slower
    # a call prepare did not let grow (a candidate with no graph for the checked call) keeps the fixed spin
    fixed = Slow("candidate", None)
    t.sample(fixed, 2)
    assert fixed.spin_cycles == timing.HEAD_START_CYCLES and fixed.head_us == [200.0] * 2

    class Graph:
        def replay(self):
            pass
    graphed = Slow("eager", None)
    graphed.graph, graphed.graph_calls = Graph(), 4
    t.sample(graphed, 2)
    assert graphed.host_us == [] and len(graphed.samples) == 2


def test_the_head_start_is_sized_to_the_calls_host_path_and_unchanged_inside_the_fixed_one(monkeypatch):
    """head_start_cycles: the fixed spin (cycle for cycle, so such calls' figures are what they were)
    while 1.5x the host path + 50 us fits in it; above, that many microseconds of spin, up to 10 ms."""
    from aka.evaluate import timing
    monkeypatch.setattr(timing, "head_start_us", lambda: 200.0)
    fixed = timing.HEAD_START_CYCLES
    assert timing.head_start_cycles(None) == timing.head_start_cycles(float("nan")) == fixed
    assert timing.head_start_cycles(10.0) == timing.head_start_cycles(100.0) == fixed   # 200 us covers 200
    assert timing.head_start_cycles(1000.0) == fixed * 1550 // 200                     # 1.55 ms of spin
    assert timing.head_start_cycles(1e6) == fixed * 50                                 # capped at 10 ms
    assert timing.spin_us(timing.head_start_cycles(1000.0)) == pytest.approx(1550.0)


def test_prepare_sizes_the_spin_of_a_call_whose_host_path_outruns_the_head_start(monkeypatch):
    """A one-set (event-timed) call taking 3 ms on the host: prepare measures its host path beside
    its estimate, gives it a spin that covers the path, and re-estimates behind that spin (the
    first estimate was the host's). Not for a call that syncs with the host; the candidate only
    with a one-call graph for the judge's checked call (its clock sees an eager call's host path),
    and not where that capture fails. A call inside the head start keeps the fixed spin."""
    import time as _time

    import torch

    from aka.evaluate import timing
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    monkeypatch.setattr(timing, "head_start_us", lambda: 200.0)
    monkeypatch.setattr(timing, "_syncs_with_host", lambda impl, inputs: impl.name == "syncs")
    seen = []

    def event_time(fn, n, head_start=True, cycles=timing.HEAD_START_CYCLES):
        fn()
        seen.append(cycles)
        # a host-bound call measured behind too short a spin reads its host time; behind one that covers it, 40 us
        return 40.0 if timing.spin_us(cycles) > 3000 else 3000.0
    monkeypatch.setattr(timing, "_event_time_us", event_time)

    def graph_of(impl, sets):
        if impl.name == "uncapturable":
            raise RuntimeError("operation not permitted when stream is capturing")
        return f"graph of {impl.name}", [f"out of {impl.name}"]
    monkeypatch.setattr(timing.ShapeTimer, "_graph_of", staticmethod(graph_of))

    class SlowHost(timing.Impl):
        def __call__(self, inputs):
            _time.sleep(0.003)
            return inputs["x"]

    t = timing.ShapeTimer.__new__(timing.ShapeTimer)
    t.sets, t.graphed = [{"x": torch.ones(8)}], False
    slow, fast = SlowHost("slow", None), timing.Impl("fast", lambda x: x)
    syncs, cand, uncap = SlowHost("syncs", None), SlowHost("candidate", None), SlowHost("uncapturable", None)
    cand.check_graph_wanted = uncap.check_graph_wanted = True
    for impl in (slow, fast, syncs, cand, uncap):
        impl.warmed = True
    t.prepare(slow)   # a trusted baseline that does not sync: no graph needed
    assert slow.method == "cuda_events" and slow.spin_cycles > 20 * timing.HEAD_START_CYCLES
    assert slow.estimate_us == 40.0 and seen[3:6] == [slow.spin_cycles] * 3 and slow.check_graph is None
    seen.clear()
    t.prepare(fast)
    assert fast.spin_cycles == timing.HEAD_START_CYCLES and seen[:3] == [timing.HEAD_START_CYCLES] * 3
    t.prepare(syncs)
    assert syncs.spin_cycles == timing.HEAD_START_CYCLES and syncs.estimate_us == 3000.0
    t.prepare(cand)   # captured for the checked call; its samples stay eager (no timing graph)
    assert cand.spin_cycles > 20 * timing.HEAD_START_CYCLES and cand.estimate_us == 40.0
    assert cand.check_graph == "graph of candidate" and cand.check_outs == ["out of candidate"]
    assert cand.graph is None and cand.graph_calls == 1 and cand.graph_outs is None and cand.method == "cuda_events"
    t.prepare(uncap)
    assert uncap.spin_cycles == timing.HEAD_START_CYCLES and uncap.check_graph is None and uncap.graph is None
    assert slow.extendable and cand.extendable and not (fast.extendable or syncs.extendable or uncap.extendable)


def test_host_bound_note_only_where_the_hosts_excess_over_the_head_start_is_a_real_share():
    from aka.evaluate.timing import HOST_BOUND_SHARE, host_bound_note
    # fused_moe's shape-3 case: ~2.7 ms of host path, a 200 us head start, 2562 us measured
    note = host_bound_note([2700.0, 2750.0, 2650.0], 200.0, 2562.0)
    assert note and "host-bound timing" in note and "2700 us on the host" in note and "2500 us more" in note
    # a host path inside the head start, or an excess small against the GPU time: nothing to say
    assert host_bound_note([150.0] * 5, 200.0, 448.0) is None
    assert host_bound_note([300.0] * 5, 200.0, 448.0) is None          # 100 us over, 22% of 448
    assert host_bound_note([200.0 + HOST_BOUND_SHARE * 448.0 + 1] * 5, 200.0, 448.0) is not None
    assert host_bound_note([], 200.0, 448.0) is None and host_bound_note([900.0], 200.0, 0.0) is None
    # one head start per sample (the spin grew after the first round): the excess sample by sample
    assert host_bound_note([2700.0] * 5, [200.0, 200.0, 4100.0, 4100.0, 4100.0], 450.0) is None
    assert host_bound_note([2700.0] * 3, [200.0, 200.0, 4100.0], 450.0) is not None


def test_a_runners_host_times_are_taken_only_as_a_list_of_finite_numbers():
    from aka.evaluate.timing import _numbers
    assert _numbers([1, 2.5, float("nan"), float("inf")]) == [1.0, 2.5]
    assert _numbers("123") == [] and _numbers({"a": 1}) == [] and _numbers([1, "2"]) == [] and _numbers(None) == []
    assert _numbers([True]) == []


def test_a_result_written_as_the_worker_exits_is_still_read():
    """sandbox._pump: the worker's last lines can reach the pipe after a select has timed out and before
    the poll that sees the exit. The fake worker writes its progress and result exactly then: the pump
    reads them (it used to stop at the poll and call the evaluation a worker that exited before reporting)."""
    import json as _json
    import os as _os
    from types import SimpleNamespace

    from aka.evaluate.result import EvalResult
    from aka.evaluate.sandbox import _pump

    r, w = _os.pipe()
    res = EvalResult(status="pass", reason="all stages passed", problem="p", device="cpu")

    class Proc:
        pid = 2 ** 22 + 12345   # above Linux's pid_max: the pump's group kill finds no such process
        wrote = False

        def poll(self):
            if not self.wrote:
                _os.write(w, (_json.dumps({"stage": "fallback"}) + "\n"
                              + _json.dumps({"event": "result", "result": res.to_json()}) + "\n").encode())
                _os.close(w)
                self.wrote = True
            return 0

        def wait(self, timeout=None):
            return 0

    cfg = SimpleNamespace(timeout_s=30.0, wall_limit_s=None, idle_timeout_s=30.0, gpu_wait_max_s=0.0)
    seen = []
    got, killed = _pump(Proc(), r, cfg, seen.append)   # the pump closes r
    assert killed is None and got is not None and got.status == "pass" and seen == [{"stage": "fallback"}]


def test_the_read_after_a_workers_exit_ends_even_if_something_keeps_writing(monkeypatch):
    """A child that inherited the worker's pipe and keeps writing after the worker's exit cannot hold
    the pump's final read past DRAIN_S."""
    import os as _os
    import threading
    import time as _time
    from types import SimpleNamespace

    from aka.evaluate import sandbox

    monkeypatch.setattr(sandbox, "DRAIN_S", 1.0)
    r, w = _os.pipe()
    stop = threading.Event()

    def chatter():
        while not stop.is_set():
            _os.write(w, b'{"stage": "noise"}\n')
            _time.sleep(0.05)

    class Proc:
        pid = 2 ** 22 + 12345   # above Linux's pid_max: the pump's group kill finds no such process
        started = False

        def poll(self):  # the worker has exited; from now on something else writes to its pipe
            if not self.started:
                self.started = True
                threading.Thread(target=chatter, daemon=True).start()
            return 0

        def wait(self, timeout=None):
            return 0

    cfg = SimpleNamespace(timeout_s=30.0, wall_limit_s=None, idle_timeout_s=30.0, gpu_wait_max_s=0.0)
    t0 = _time.monotonic()
    try:
        got, killed = sandbox._pump(Proc(), r, cfg, None)
    finally:
        stop.set()
        _time.sleep(0.1)
        _os.close(w)
    assert got is None and _time.monotonic() - t0 < 4.0   # (killed names the last stage it saw: " [during noise]")
