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
