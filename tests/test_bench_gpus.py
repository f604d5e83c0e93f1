"""`aka bench run --gpus`: the tasks spread over several GPUs, `jobs` at a time on each, every
evaluation pinned to its GPU, each record naming the GPU that timed it. Fake GPUs: the harness's
evaluate is replaced by a recorder (what a real evaluation would do with the pin, the sandbox
test below checks: the judge is started with CUDA_VISIBLE_DEVICES set to it)."""
import threading
import time

import pytest

import aka.bench.run as br
from aka.bench.run import GpuSlots, RunOptions, load_records, run_bench
from aka.bench.suite import load_suite
from aka.evaluate.result import EvalResult, ShapeResult
from aka.problem import REPO_ROOT

FIX = REPO_ROOT / "tests" / "fixtures"


class Recorder:
    def __init__(self, hold_s=0.05):
        self.lock = threading.Lock()
        self.active: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        self.peak_total = 0
        self.calls: list[tuple[str, str]] = []
        self.hold_s = hold_s

    def __call__(self, problem, cand=None, shapes=None, config=None):
        gid = config.sandbox.visible_devices
        with self.lock:
            self.active[gid] = self.active.get(gid, 0) + 1
            self.peak[gid] = max(self.peak.get(gid, 0), self.active[gid])
            self.peak_total = max(self.peak_total, sum(self.active.values()))
            self.calls.append((problem.name, gid))
        time.sleep(self.hold_s)
        with self.lock:
            self.active[gid] -= 1
        res = EvalResult(status="pass", reason="ok", problem=problem.name, device="cuda",
                         shapes=[ShapeResult(id=s.id, label=s.label(), correct=True, time_us=10.0)
                                 for s in problem.select(shapes)])
        return res


def _run(tmp_path, monkeypatch, gpus, jobs, ops):
    rec = Recorder()
    monkeypatch.setattr(br, "resolve_device", lambda d: "cuda")
    monkeypatch.setattr(br, "evaluate", rec)
    suite = load_suite(FIX / "problems", ops=ops)
    opts = RunOptions(impls=[str(FIX / "candidates" / "honest")], out=tmp_path / "run", jobs=jobs, gpus=gpus,
                      beside=False)
    run_bench(suite, opts)
    return rec, load_records(tmp_path / "run")


def test_tasks_spread_over_the_gpus_with_jobs_on_each_and_records_say_which(tmp_path, monkeypatch):
    ops = ["vec_add", "atrex_fused_add_rms_norm", "kb_linear_relu", "matmul", "rms_norm", "softmax_rows"]
    rec, rows = _run(tmp_path, monkeypatch, ["0", "1"], 2, ops)
    assert {g for _, g in rec.calls} == {"0", "1"}                 # both GPUs got work
    assert max(rec.peak.values()) <= 2 and rec.peak_total > 2        # two at a time on each, more than two in all
    assert {r["op"] for r in rows} == set(ops)
    by_op = {op: g for op, g in rec.calls}
    assert all(r["gpu_index"] == by_op[r["op"]] for r in rows)       # the record names the GPU that ran it


def test_without_gpus_nothing_is_pinned(tmp_path, monkeypatch):
    rec, rows = _run(tmp_path, monkeypatch, None, 2, ["vec_add", "matmul"])
    assert {g for _, g in rec.calls} == {None} and all("gpu_index" not in r for r in rows)


def test_slots_fill_the_emptiest_gpu_first():
    s = GpuSlots(["3", "5"], 2)
    assert s.size == 4
    with s.take() as a, s.take() as b, s.take() as c:
        assert {a, b} == {"3", "5"} and c in {"3", "5"}
    assert GpuSlots([], 3).size == 3


def test_the_judge_is_started_on_its_gpu(monkeypatch, tmp_path):
    import aka.evaluate.sandbox as sb
    seen = {}

    class Stop(Exception):
        pass

    def fake_popen(*a, env=None, **kw):
        seen["env"] = env
        raise Stop
    monkeypatch.setattr(sb.subprocess, "Popen", fake_popen)

    class Spec:
        device = "cuda"

        def with_(self, **kw):
            return self

        def dumps(self):
            return "{}"
    with pytest.raises(Stop):
        sb.run_worker(Spec(), "x = 1\n", [], sb.SandboxConfig(visible_devices="1"))
    assert seen["env"]["CUDA_VISIBLE_DEVICES"] == "1"


def test_scaling_report_from_a_one_gpu_and_a_two_gpu_run(tmp_path, monkeypatch):
    import json
    import subprocess
    import sys
    ops = ["vec_add", "matmul", "rms_norm", "softmax_rows"]
    _run(tmp_path / "one", monkeypatch, ["0"], 1, ops)
    _run(tmp_path / "two", monkeypatch, ["0", "1"], 1, ops)
    one, two = tmp_path / "one" / "run", tmp_path / "two" / "run"
    for d, wall in ((one, 100.0), (two, 60.0)):         # set the walls: the fake evaluations take ~no time
        meta = json.loads((d / "run.json").read_text())
        meta["segments"][-1]["wall_s"] = wall
        (d / "run.json").write_text(json.dumps(meta))
    rows = [json.loads(x) for x in (two / "records.jsonl").read_text().splitlines()]
    for r in rows:                                       # GPU 1 reads 2% slower, one shape 20%
        if r["gpu_index"] == "1":
            r["time_us"] = 10.2
    rows[-1]["time_us"], rows[-1]["gpu_index"] = 12.0, "1"
    (two / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    lib1, lib2 = tmp_path / "lib1", tmp_path / "lib2"
    for lib, jobs in ((lib1, [("a", "00:00:10", 10, "0"), ("b", "00:00:20", 10, "0")]),
                      (lib2, [("a", "00:00:10", 10, "0"), ("b", "00:00:10", 10, "1")])):
        lib.mkdir()
        (lib / "batch.jsonl").write_text("".join(json.dumps({"id": i, "at": f"2026-12-04T{t}+00:00", "wall_s": w,
                                                             "worker": f"h/1/cuda={g}"}) + "\n"
                                                 for i, t, w, g in jobs))
    out = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "scaling_report.py"), "--bench", str(one),
                          str(two), "--convert", str(lib1), str(lib2)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    t = out.stdout
    assert "| aka bench run | 2 (0,1) | 60 | 4 | 240 | 0.83 |" in t       # 100 / (2 x 60)
    assert "| aka convert | 2 (0,1) | 10 | 2 | 720 | 1.00 |" in t          # 20 s of jobs in 10 s on two GPUs
    gpu1 = next(line for line in t.splitlines() if line.startswith("| 1 |"))
    cells = [c.strip() for c in gpu1.strip("|").split("|")]
    n1 = sum(r["gpu_index"] == "1" for r in rows)
    assert cells[1] == str(n1) and cells[4].startswith("1.200 (")     # every case of GPU 1, the worst named
    assert cells[3] == f"{(n1 - 1) / n1:.0%}"                           # all but the 20% case within 5%
    # a one-GPU host: the one-GPU runs alone give their rows, the N-GPU rows say not run
    out = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "scaling_report.py"), "--bench", str(one),
                          "--convert", str(lib1)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "| aka bench run | 1 (0) | 100 | 4 | 144 | - |" in out.stdout
    assert "| aka convert | 1 (0) | 20 | 2 | 360 | - |" in out.stdout        # two 10 s jobs one after the other
    assert out.stdout.count("| N | not run |") == 2 and "time_N / time_1" not in out.stdout
    bad = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "scaling_report.py"), "--bench", str(one),
                          str(two), str(two)], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "optionally, the N-GPU run" in bad.stderr


def test_unlock_compiles_reaches_every_candidate_evaluation_and_the_judge_spec(tmp_path, monkeypatch):
    """`bench run --unlock-compiles` (trusted candidates): each evaluation's config asks for the
    runner's compile reports, and the spec the judge receives carries the setting; off by default."""
    from aka.evaluate.api import EvalConfig, build_spec
    from aka.problem import load_problem
    seen = []
    rec = Recorder()

    def spy(problem, cand=None, shapes=None, config=None):
        seen.append(config.unlock_compiles)
        return rec(problem, cand, shapes, config)
    monkeypatch.setattr(br, "resolve_device", lambda d: "cuda")
    monkeypatch.setattr(br, "evaluate", spy)
    suite = load_suite(FIX / "problems", ops=["vec_add", "matmul"])
    for flag in (False, True):
        seen.clear()
        run_bench(suite, RunOptions(impls=[str(FIX / "candidates" / "honest")], out=tmp_path / f"run{flag}",
                                    beside=False, unlock_compiles=flag))
        assert seen and set(seen) == {flag}
    prob = load_problem("rms_norm")
    for flag in (False, True):
        spec, _ = build_spec(prob, prob.select("small"), "cuda", EvalConfig(unlock_compiles=flag))
        assert spec.settings.unlock_compiles is flag
