"""`aka bench run/report` end to end on CPU, over an external-format suite: our operator layout,
an Atrex-Bench directory and a KernelBench file side by side (tests/fixtures/problems)."""
import json

from aka.bench.run import load_records
from aka.bench.score import by_impl
from aka.cli import main
from aka.problem import REPO_ROOT

FIX = REPO_ROOT / "tests" / "fixtures"


def test_bench_run_candidates_over_mixed_suite_and_resume(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["bench", "run", "--suite", str(FIX / "problems"), "--impl", str(FIX / "candidates" / "honest"),
            "--device", "cpu", "--out", str(out), "--ops", "vec_add,atrex_fused_add_rms_norm,kb_linear_relu"]
    assert main(args) == 0
    rows = load_records(out)
    assert {r["op"] for r in rows} == {"vec_add", "atrex_fused_add_rms_norm", "kb_linear_relu"}
    assert all(r["correct"] and r["status"] == "pass" for r in rows), [r["reason"] for r in rows if not r["correct"]]
    assert all(r["device"] == "cpu" and r["time_us"] is None for r in rows)  # no GPU: no timings, none invented
    for key in ("impl", "op", "shape", "status", "time_us", "sol_fraction", "speedup_eager", "gpu", "torch",
                "triton", "git_sha", "date"):
        assert key in rows[0]
    s = by_impl(rows)["honest"]
    assert s["pass_rate"] == 1.0 and s["fallback_rate"] == 0.0
    assert s["score"] == 0.0  # untimed shapes score nothing: correctness alone is not speed
    report = (out / "REPORT.md").read_text()
    assert "| honest |" in report and "atrex_fused_add_rms_norm" in report
    assert "Wall time: " in report and "invocation(s)" in report
    # resume: a second run adds nothing, and its invocation is on the record with its wall time
    n = len(rows)
    assert main(args) == 0
    assert len(load_records(out)) == n
    segs = json.loads((out / "run.json").read_text())["segments"]
    assert len(segs) == 2 and all(s["wall_s"] >= 0 for s in segs) and segs[1]["records_after"] == n


def test_bench_list_runs_on_a_fresh_tree(capsys):
    assert main(["bench", "list"]) == 0
    text = capsys.readouterr().out
    import re
    m = re.search(r"(\d+) operators, (\d+) shapes", text)
    assert m and int(m.group(1)) >= 30 and int(m.group(2)) >= 400
    weights = json.loads((REPO_ROOT / "bench" / "weights.json").read_text())
    assert abs(sum(weights["weights"].values()) - 1.0) < 1e-9 and weights["provenance"]["method"]


def test_bench_run_parallel_jobs_give_the_sequential_records(tmp_path):
    """--jobs 2: ops evaluated at once write the same (impl, op, shape) records, none twice."""
    base = ["bench", "run", "--suite", str(FIX / "problems"), "--impl", str(FIX / "candidates" / "honest"),
            "--device", "cpu", "--ops", "vec_add,atrex_fused_add_rms_norm,kb_linear_relu"]
    assert main(base + ["--out", str(tmp_path / "seq")]) == 0
    assert main(base + ["--out", str(tmp_path / "par"), "--jobs", "2"]) == 0
    key = lambda r: (r["impl"], r["op"], r["shape"], r["status"], r["correct"])  # noqa: E731
    seq, par = load_records(tmp_path / "seq"), load_records(tmp_path / "par")
    assert sorted(map(key, par)) == sorted(map(key, seq)) and len({k[:3] for k in map(key, par)}) == len(par)


def test_baseline_that_could_not_be_timed_is_a_failed_case_with_its_reason():
    """On the H200 torch.compile of the fused_moe reference raised inside dynamo; eager still timed.
    The compile rows say so (status untimed, the harness's reason), the eager rows stay good."""
    from aka.bench.run import _rows
    from aka.bench.suite import load_suite
    from aka.evaluate.result import EvalResult, ShapeResult
    suite = load_suite()
    prob = next(p for p in suite.problems if p.name == "rms_norm")
    sid = next(iter(prob.shapes))
    sr = ShapeResult(id=sid, label="x", eager_us=10.0, compile_us=None, sol_us=5.0, sol_us_measured=6.0,
                     baseline_methods={"eager": "cuda_graph"})
    res = EvalResult(status="pass", reason="baselines timed", problem="rms_norm", device="cuda", shapes=[sr],
                     notes=[f"shape {sid}: compile not timed (TorchRuntimeError: dynamo failed)"])
    eager = _rows(res, "reference", prob, suite, which="reference")[0]
    comp = _rows(res, "compile", prob, suite, which="compile")[0]
    assert eager["correct"] and eager["status"] == "pass" and eager["sol_fraction"] == 0.5
    assert eager["sol_fraction_measured"] == 0.6 and comp["sol_fraction_measured"] is None  # measured ceiling, per impl
    assert not comp["correct"] and comp["status"] == "untimed" and "dynamo failed" in comp["reason"]
    assert eager["timing_method"] == "cuda_graph" and comp["timing_method"] is None  # each record says how it was timed
    res.device = "cpu"  # no GPU: nothing is timed and nothing is a failure
    assert _rows(res, "compile", prob, suite, which="compile")[0]["correct"]


def test_a_host_bound_timing_note_reaches_the_record_of_the_implementation_it_names():
    from aka.bench.run import _rows
    from aka.bench.suite import load_suite
    from aka.evaluate.result import EvalResult, ShapeResult
    suite = load_suite()
    prob = next(p for p in suite.problems if p.name == "fused_moe")
    sid = next(iter(prob.shapes))
    sr = ShapeResult(id=sid, label="x", time_us=2562.0, correct=True, peer_us=671.8, peer_status="pass", sol_us=341.0,
                     timing_method="cuda_events", baseline_methods={"peer": "cuda_events"})
    note = "host-bound timing: a call took 2700 us on the host, 2486 us more than the 214 us GPU head start"
    res = EvalResult(status="pass", reason="", problem="fused_moe", device="cuda", shapes=[sr],
                     notes=[f"shape {sid}: candidate: {note}", f"shape {sid}: peer: timed with CUDA events: x"])
    assert _rows(res, "kb-best", prob, suite)[0]["timing_note"] == note
    assert _rows(res, "peer", prob, suite, which="peer")[0]["timing_note"] is None


def test_resume_measures_again_what_failed_for_want_of_gpu_memory(tmp_path):
    """An OOM (several evaluations sharing one GPU) is the machine's failure, not the
    implementation's: a resumed run does not count it as done, and its later record wins."""
    import json

    from aka.bench.run import load_records, retryable
    from aka.evaluate.timing import BASELINE_METHOD
    base = {"impl": "reference", "op": "x", "shape": "0", "device": "cuda", "timing": BASELINE_METHOD}
    oom = dict(base, status="runtime_error", reason="OutOfMemoryError: CUDA out of memory. Tried to allocate 448 MiB")
    bad = dict(base, shape="1", status="runtime_error", reason="RuntimeError: shape mismatch")
    (tmp_path / "records.jsonl").write_text("\n".join(json.dumps(r) for r in (oom, bad, dict(base, status="pass"))) + "\n")
    assert retryable(oom) and not retryable(bad) and not retryable(dict(oom, status="pass"))
    # timed under an older timing method (or before records named it): measured again on resume
    assert retryable(dict(base, status="pass", timing="v3")) and retryable({k: v for k, v in base.items() if k != "timing"})
    assert not retryable(dict(base, status="pass", device="cpu", timing=None))
    rows = load_records(tmp_path)
    assert len(rows) == 2 and {r["shape"]: r["status"] for r in rows} == {"0": "pass", "1": "runtime_error"}


def test_a_records_file_from_another_gpu_model_is_not_resumed(tmp_path, monkeypatch):
    """A suite run carried from an H100 to an H200 would report both cards' times side by side:
    `aka bench run` names the other card and stops before it evaluates anything."""
    import json

    import pytest
    import torch

    import aka.bench.run as run_mod
    from aka.bench.suite import load_suite
    from aka.errors import UserError
    recs = [{"impl": "reference", "op": "x", "shape": "0", "device": "cuda", "gpu": "NVIDIA H100 80GB HBM3"},
            {"impl": "reference", "op": "x", "shape": "1", "device": "cpu", "gpu": None}]
    (tmp_path / "records.jsonl").write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    assert run_mod.other_gpus(tmp_path, "NVIDIA H100 80GB HBM3") == set()
    assert run_mod.other_gpus(tmp_path, "NVIDIA H200") == {"NVIDIA H100 80GB HBM3"}
    monkeypatch.setattr(run_mod, "resolve_device", lambda d: "cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H200")
    with pytest.raises(UserError, match="timed on NVIDIA H100 80GB HBM3, and this GPU is NVIDIA H200"):
        run_mod.run_bench(load_suite(ops=["rms_norm"]), run_mod.RunOptions(impls=["reference"], out=tmp_path))
    assert len((tmp_path / "records.jsonl").read_text().splitlines()) == 2   # nothing written


def test_split_op_baselines_run_as_chunks_first_and_resume_only_missing_shapes(tmp_path, monkeypatch):
    """meta.json `bench.split` spreads an op's baseline shapes over several jobs, started before the
    other ops; the records are those of one unsplit run, and a resumed run evaluates only the shapes
    it has no record for."""
    import aka.bench.run as run_mod
    from aka.problem import load_problem
    calls = []
    real = run_mod.evaluate_baselines

    def spy(problem, *, shapes=None, config=None, on_progress=None):
        calls.append((problem.name, list(shapes) if isinstance(shapes, list) else shapes))
        return real(problem, shapes=shapes, config=config, on_progress=on_progress)

    monkeypatch.setattr(run_mod, "evaluate_baselines", spy)
    moe = load_problem("fused_moe")
    assert moe.meta["bench"]["split"] > 1 and len(moe.small_shapes) >= 2
    out = tmp_path / "run"
    args = ["bench", "run", "--impl", "reference,compile", "--device", "cpu", "--ops", "rms_norm,fused_moe",
            "--out", str(out)]
    assert main(args) == 0
    k = min(moe.meta["bench"]["split"], len(moe.small_shapes))
    assert [c[0] for c in calls] == ["fused_moe"] * k + ["rms_norm"]  # the split op first, in k chunks
    assert sorted(s for c in calls[:k] for s in c[1]) == sorted(moe.small_shapes)
    rows = load_records(out)
    keys = [(r["impl"], r["op"], r["shape"]) for r in rows]
    assert len(keys) == len(set(keys)) == 2 * (len(moe.small_shapes) + len(load_problem("rms_norm").small_shapes))
    # drop one fused_moe shape's records: the resumed run evaluates that shape alone
    lost = sorted(moe.small_shapes)[0]
    lines = (out / "records.jsonl").read_text().splitlines()
    (out / "records.jsonl").write_text("\n".join(ln for ln in lines if not (json.loads(ln)["op"] == "fused_moe"
                                                                             and json.loads(ln)["shape"] == lost)) + "\n")
    calls.clear()
    assert main(args) == 0
    assert calls == [("fused_moe", [lost])]
    assert len(load_records(out)) == len(rows)


def test_wall_time_line_counts_cut_off_segments():
    """A device call's deadline kills `aka bench run` mid-op: that segment's wall time, written
    every op and every 15 s, still counts, and the line says it was cut off."""
    from aka.bench.report import _wall_line
    meta = {"segments": [{"wall_s": 540.2, "jobs": 8, "ops_finished": 21},
                         {"wall_s": 300.0, "jobs": 8, "records_before": 700, "records_after": 904}]}
    line = _wall_line(meta)
    assert line.startswith("Wall time: 840 s in 2 invocation(s)")
    assert "21 ops finished, then cut off" in line and "204 records" in line


def test_report_rescored_with_a_weights_file_and_large_shapes_apart(tmp_path, capsys):
    """`aka bench report --weights FILE` scores recorded records with FILE's weights (a run outlives
    a re-weighting) and says so; the large-shape column is the geomean over shapes whose roofline
    time is at least 10 us, the ones where a fraction of the ceiling means something."""
    run = tmp_path / "run"
    run.mkdir()
    rec = dict(impl="reference", device="cuda", correct=True, status="pass", category="Math", shape_weight=1.0,
               op_weight=0.5, gpu="NVIDIA H200", git_sha="abc", date="2026-11-30")
    rows = [dict(rec, op="a", shape="0", sol_us=0.01, sol_fraction=0.001, time_us=10.0),
            dict(rec, op="a", shape="1", sol_us=40.0, sol_fraction=0.8, time_us=50.0),
            dict(rec, op="b", shape="0", sol_us=20.0, sol_fraction=0.5, time_us=40.0)]
    (run / "records.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    w = tmp_path / "w.json"
    w.write_text(json.dumps({"weights": {"a": 1.0, "b": 0.0}, "provenance": {"method": "test mix"}}))
    assert main(["bench", "report", str(run), "--weights", str(w)]) == 0
    text = (run / "REPORT.md").read_text()
    # score = 1.0 x geomean(0.001, 0.8) + 0 x 0.5
    assert f"| reference | {(0.001 * 0.8) ** 0.5:.4f} |" in text
    assert "test mix (applied by `aka bench report --weights`" in text
    assert "| a | Math | 1.000 | 2 | 0.028 | 1 | 0.800 |" in text
    w.write_text(json.dumps({"weights": {"a": 1.0}}))
    assert main(["bench", "report", str(run), "--weights", str(w)]) == 2
    assert "no weight for b" in capsys.readouterr().err


def test_split_op_candidate_runs_in_chunks_and_resumes_only_missing_shapes(tmp_path, monkeypatch):
    """A candidate of a `bench.split` op is evaluated in chunks of its shapes too: a device call's
    deadline that cuts one chunk keeps the others' records, and the resumed run evaluates only the
    shapes still missing (not the op's whole shape list again)."""
    import aka.bench.run as run_mod
    from aka.bench.run import RunOptions, run_bench
    from aka.bench.suite import load_suite
    from aka.evaluate.result import EvalResult, ShapeResult
    calls = []

    def fake(problem, cand=None, shapes=None, config=None):
        ids = [s.id for s in problem.select(shapes)]
        calls.append((problem.name, ids))
        return EvalResult(status="pass", reason="ok", problem=problem.name, device="cuda",
                          shapes=[ShapeResult(id=i, label=i, correct=True, time_us=1.0) for i in ids])

    monkeypatch.setattr(run_mod, "resolve_device", lambda d: "cuda")
    monkeypatch.setattr(run_mod, "evaluate", fake)
    cands = tmp_path / "best"
    for op in ("fused_moe", "rms_norm"):
        (cands / op).mkdir(parents=True)
        (cands / op / "best.py").write_text("# a candidate\n")
    suite = load_suite(ops=["rms_norm", "fused_moe"])
    moe = next(p for p in suite.problems if p.name == "fused_moe")
    k, n = moe.meta["bench"]["split"], len(moe.shapes)
    out = tmp_path / "run"
    run_bench(suite, RunOptions(impls=[str(cands)], out=out, jobs=1, beside=False))
    assert [c[0] for c in calls] == ["fused_moe"] * k + ["rms_norm"]
    assert sorted(s for c in calls[:k] for s in c[1]) == sorted(moe.shapes) and all(len(c[1]) < n for c in calls[:k])
    lines = (out / "records.jsonl").read_text().splitlines()
    lost = sorted(moe.shapes)[:2]
    (out / "records.jsonl").write_text("\n".join(ln for ln in lines if not (
        json.loads(ln)["op"] == "fused_moe" and json.loads(ln)["shape"] in lost)) + "\n")
    calls.clear()
    run_bench(suite, RunOptions(impls=[str(cands)], out=out, jobs=1, beside=False))
    assert sorted(s for c in calls for s in c[1]) == sorted(lost) and {c[0] for c in calls} == {"fused_moe"}
    assert len(load_records(out)) == len(lines)
