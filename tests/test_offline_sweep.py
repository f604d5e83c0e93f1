"""experiments/offline_sweep.py's tables and aka/kb/best.py's per-op summary (the GPU runs that
feed them need a GPU)."""
import importlib.util

import pytest

from aka.kb.best import best_table, markdown, summarize, unverified
from aka.problem import REPO_ROOT


def _sweep():
    spec = importlib.util.spec_from_file_location("offline_sweep", REPO_ROOT / "experiments" / "offline_sweep.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def shapes(time_scale=1.0):
    # sol_us 40 and 12 are large (judged against the measured ceiling); 2 us is launch-bound: not judged
    # (id, datasheet roofline us, fraction of the measured ceiling); the measured ceiling is 1.13x
    # slower than the datasheet's, so the datasheet sol_fraction is that fraction / 1.13
    rows = [("0", 40.0, 0.93), ("1", 12.0, 0.87), ("2", 2.0, 0.10)]
    return [{"id": i, "sol_us": sol, "time_us": sol / (m / 1.13) * time_scale, "sol_fraction": m / 1.13 / time_scale,
             "sol_fraction_measured": m / time_scale, "compile_us": sol / (m / 1.13) * 1.1,
             "eager_us": sol / (m / 1.13) * 3} for i, sol, m in rows]


def test_summary_judges_large_shapes_against_the_measured_ceiling_and_compile():
    s = summarize(shapes(), {"0": 2.0, "1": 1.0, "2": 1.0})
    assert s["large_shapes"] == 2 and s["large_median"] == pytest.approx(0.90) and s["large_min"] == pytest.approx(0.87)
    assert s["vs_compile"] == pytest.approx(1.1) and s["meets"]  # 10% faster than compile on every shape
    slow = summarize(shapes(time_scale=1.2), {})
    assert not slow["meets"] and slow["vs_compile"] < 1.0
    assert summarize([dict(shapes()[0], sol_fraction=None)], {})["objective"] is None  # an untimed shape: no score
    # compile over the kernel at the large shapes (roofline >= 10 us: shapes 0 and 1), the least of them
    assert s["large_timed"] == 2 and s["large_vs_compile_min"] == pytest.approx(1.1)
    mixed = shapes()
    mixed[1]["compile_us"] = mixed[1]["time_us"] * 0.5     # a large shape compile wins
    mixed[2]["compile_us"] = mixed[2]["time_us"] * 0.1     # a small one: not counted
    assert summarize(mixed, {})["large_vs_compile_min"] == pytest.approx(0.5)


def test_best_table_picks_the_op_s_best_current_kernel(tmp_path):
    from aka.evaluate.result import EvalResult, ShapeResult
    from aka.kb.verify import verify
    from tests.test_kb import write_kb
    root = write_kb(tmp_path / "kb")
    scale = {"rows.py": 1.0, "online.py": 1.5}

    def run(op, path, shapes=None, config=None):
        from aka.problem import load_problem
        rows = globals()["shapes"](scale[path.name])
        ids = [s.id for s in load_problem(op).select(shapes)]  # a result covers every shape selected
        return EvalResult(status="pass", problem=op, device="cuda", env={"gpu": "NVIDIA H200"},
                          shapes=[ShapeResult(**dict(rows[j % len(rows)], id=i)) for j, i in enumerate(ids)])

    verify(root, "cuda", evaluate_fn=run)
    table = {r["op"]: r for r in best_table(root, "cuda")}
    assert set(table) == {"rms_norm", "softmax"} and table["rms_norm"]["meets"] and not table["softmax"]["meets"]
    # one GPU's table: the results were recorded on an H200, so an H100 table has none of them
    assert {r["op"] for r in best_table(root, "cuda", gpu="h200")} == {"rms_norm", "softmax"}
    assert best_table(root, "cuda", gpu="H100") == [] and [p.name for p in unverified(root, "cuda", gpu="H100")[0]] == ["rows.py", "online.py"]
    # verified on an H100 too: each GPU's table from its own verdicts, the H200's kept
    def on_h100(op, path, shapes=None, config=None):
        res = run(op, path, shapes, config)
        res.env = {"gpu": "NVIDIA H100 80GB HBM3"}
        res.shapes = [ShapeResult(**dict(vars(sr), time_us=(sr.time_us or 1.0) * 2)) for sr in res.shapes]
        return res
    verify(root, "cuda", evaluate_fn=on_h100, gpu="NVIDIA H100 80GB HBM3")
    h100 = {r["op"]: r for r in best_table(root, "cuda", gpu="H100")}
    h200 = {r["op"]: r for r in best_table(root, "cuda", gpu="H200")}
    assert set(h100) == set(h200) == {"rms_norm", "softmax"}
    assert {r["gpu"] for r in h100.values()} == {"NVIDIA H100 80GB HBM3"} and {r["gpu"] for r in h200.values()} == {"NVIDIA H200"}
    assert unverified(root, "cuda", gpu="H100")[0] == [] and unverified(root, "cuda", gpu="H200")[0] == []
    k = root / "kernels/softmax/online.py"
    k.write_text(k.read_text() + "\n# edited\n")  # stale results are not used
    assert {r["op"] for r in best_table(root, "cuda")} == {"rms_norm"}
    missing, ops = unverified(root, "cuda")
    assert [p.name for p in missing] == ["online.py"] and ops == ["softmax"]
    text = markdown(best_table(root, "cuda"), "", (len(missing), 3, ops))
    assert "1 of 3 kernels have no current, passing result" in text and "1 ops have none: softmax." in text
    assert "Stale verdicts" not in text
    # the stale verdict is named where it beat the op's row (here the op has none), with its figure
    from aka.kb.best import stale_leaders
    stale = stale_leaders(root, best_table(root, "cuda"), "cuda")
    assert [(d["op"], d["kernel"], d["row"]) for d in stale] == [("softmax", "online", None)]
    assert stale[0]["objective"] == pytest.approx(h200["softmax"]["objective"])
    text = markdown(best_table(root, "cuda"), "", (len(missing), 3, ops), stale=stale)
    assert "Stale verdicts above their op's row: 1 kernels" in text and "softmax/online " in text and "the row: none" in text
    h100_stale = stale_leaders(root, best_table(root, "cuda", gpu="H100"), "cuda", gpu="H100")
    assert [d["kernel"] for d in h100_stale] == ["online"] and h100_stale[0]["objective"] == pytest.approx(h100["softmax"]["objective"])
    # a current row at least as good hides it: not a lead any more
    assert stale_leaders(root, [{"op": "softmax", "objective": 1.0}], "cuda") == []
    # a verdict on the first shape only (kb verify --shapes first) is not a result over the op's
    # shapes: not ranked against whole-set results, and the kernel is still listed as unverified
    verify(root, "cuda", op="softmax", evaluate_fn=run, shapes="first")
    assert {r["op"] for r in best_table(root, "cuda")} == {"rms_norm"}
    assert [p.name for p in unverified(root, "cuda")[0]] == ["online.py"]


def test_sweep_tables(tmp_path):
    sw = _sweep()
    kb = dict(summarize(shapes(), {}), op="b_op", kernel="k1", kernels=2, shapes=3, gpu="H200", date="d")
    rows = [{"op": "b_op", "eager": 0.1, "compile": 0.50, "best_kb_untuned": 0.55, "best_kb_kernel": "k1", "kb": kb,
             "offline_tuned": 0.60, "optimize_rc": 0},
            {"op": "a_op", "eager": None, "compile": None, "best_kb_untuned": None, "best_kb_kernel": None, "kb": None,
             "offline_tuned": None, "optimize_rc": None}]  # no results, not tuned: in neither table
    sw.write_tables(rows, tmp_path, "provenance line")
    sweep = (tmp_path / "offline_sweep.md").read_text()
    assert "| b_op | 0.100 | 0.500 | 0.550 (k1) | 0.600 | 1.20 |" in sweep and "a_op" not in sweep
    best = (tmp_path / "kb_best.md").read_text()
    assert "| b_op | k1 (2) | 3 |" in best and "| 2 | 0.90, 0.87 | yes |" in best and "1 of 1 ops meet it" in best


def test_kb_best_says_what_to_run_when_nothing_was_measured(tmp_path, capsys):
    from aka.cli import main
    (tmp_path / "kernels").mkdir()
    assert main(["kb", "best", "--kb", str(tmp_path)]) == 1
    assert "run `aka kb verify --device cuda` first" in capsys.readouterr().out


def test_tune_resumes_a_run_carried_back_from_a_cut_device_call(tmp_path, monkeypatch):
    import json
    import subprocess
    from types import SimpleNamespace
    sw = _sweep()
    cmds = []

    def fake_run(cmd, **kw):
        cmds.append(cmd)
        return SimpleNamespace(returncode=0)
    monkeypatch.setattr(subprocess, "run", fake_run)
    a = SimpleNamespace(iters=4, n=2, wall_s=100)
    sw.tune("rms_norm", a, tmp_path, lambda m: None)
    assert "op=rms_norm" in cmds[0] and "run_id=sweep-rms_norm" in cmds[0] and "budget.max_wall_s=100" in cmds[0]
    run = tmp_path / "runs" / "sweep-rms_norm"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("op: rms_norm\n")
    (run / "best.json").write_text(json.dumps({"score": {"value": 0.7}}))
    row = sw.tune("rms_norm", a, tmp_path, lambda m: None)
    assert "resume=sweep-rms_norm" in cmds[1] and not any(c.startswith("op=") for c in cmds[1])
    assert row["offline_tuned"] == 0.7


def test_a_later_sweep_into_the_same_dir_keeps_the_rows_of_ops_it_does_not_cover(tmp_path):
    sw = _sweep()
    assert sw.prior_rows(tmp_path) == {}
    row = {"op": "a_op", "eager": 0.1, "compile": 0.5, "best_kb_untuned": 0.55, "best_kb_kernel": "k1", "kb": None,
           "offline_tuned": 0.6, "optimize_rc": 0}
    sw.write_tables([row], tmp_path, "first call")
    by_op = sw.prior_rows(tmp_path)
    assert by_op == {"a_op": row}
    by_op["b_op"] = dict(row, op="b_op", offline_tuned=0.7)  # what the second call adds
    sw.write_tables(list(by_op.values()), tmp_path, "second call")
    sweep = (tmp_path / "offline_sweep.md").read_text()
    assert "| a_op | 0.100 | 0.500 | 0.550 (k1) | 0.600 | 1.20 |" in sweep and "| b_op |" in sweep


def test_large_shapes_are_faster_tied_or_slower_by_their_recorded_intervals():
    """A ratio under 1 at the copy ceiling is often a tie: with the kernel's and compile's 95% CIs in
    the record, each large shape counts as faster (the kernel's interval below compile's), slower
    (above) or tied (they overlap); small shapes and records without intervals are not counted."""
    rows = shapes()
    assert summarize(rows, {})["large_vs_compile_ci"] is None        # records from before 2026-12-05
    rows[0].update(time_ci_us=[9.0, 10.0], compile_ci_us=[11.0, 12.0])   # faster beyond the intervals
    rows[1].update(time_ci_us=[9.0, 10.2], compile_ci_us=[10.0, 10.5])   # overlap: a tie
    rows[2].update(time_ci_us=[5.0, 6.0], compile_ci_us=[1.0, 2.0])      # slower, but a small shape
    s = summarize(rows, {})
    assert s["large_vs_compile_ci"] == {"faster": 1, "tie": 1, "slower": 0}
    rows[1].update(time_ci_us=[10.6, 11.0])
    s = summarize(rows, {})
    assert s["large_vs_compile_ci"] == {"faster": 1, "tie": 0, "slower": 1}
    text = markdown([dict(s, op="x_op", kernel="k", kernels=1, shapes=3)], "")
    assert "| 1 / 0 / 1 | 2 |" in text and "1 ops are slower beyond the intervals somewhere" in text
    # intervals apart, medians within MIN_APART: a tie (two runs of one kernel differ by more than
    # one run's intervals: results/h100/device-2026-12-06h/repeat_noise.md)
    from aka.kb.best import MIN_APART
    rows[0].update(time_us=100.0, compile_us=100.0 * (1 + MIN_APART / 2), time_ci_us=[99.9, 100.1],
                   compile_ci_us=[100.5, 101.5])
    assert summarize(rows, {})["large_vs_compile_ci"] == {"faster": 0, "tie": 1, "slower": 1}


def test_kb_verify_records_the_intervals_best_reads(tmp_path):
    """`aka kb verify --device cuda` keeps the kernel's and compile's 95% CIs per shape, so `aka kb
    best` can tell ties from losses."""
    import itertools

    from aka.evaluate.result import EvalResult, ShapeResult
    from aka.kb.verify import read_results, verify
    from tests.test_kb import write_kb
    root = write_kb(tmp_path / "kb")
    rows = shapes()

    def run(op, path, shapes=None, config=None):
        from aka.problem import load_problem
        ids = [s.id for s in load_problem(op).select(shapes)]
        return EvalResult(status="pass", problem=op, device="cuda", env={"gpu": "NVIDIA H200"}, shapes=[
            ShapeResult(**dict(row, id=i, time_ci_us=[9.0, 10.0], compile_ci_us=[10.5, 11.0]))
            for i, row in zip(ids, itertools.cycle(rows))])

    verify(root, "cuda", op="rms_norm", evaluate_fn=run)
    (rec,) = [read_results(p)["devices"]["cuda"] for p in (root / "kernels" / "rms_norm").glob("*.py")]
    assert all(s["time_ci_us"] == [9.0, 10.0] and s["compile_ci_us"] == [10.5, 11.0] for s in rec["shapes"])
    (row,) = [r for r in best_table(root, "cuda") if r["op"] == "rms_norm"]
    assert row["large_vs_compile_ci"]["faster"] >= 1 and row["large_vs_compile_ci"]["slower"] == 0


def test_suite_estimate_weights_each_op_s_best_and_counts_missing_ops_zero():
    from aka.kb.best import suite_estimate
    rows = [{"op": "a", "objective": 0.5, "compile": 0.25}, {"op": "b", "objective": 0.8, "compile": None}]
    est = suite_estimate(rows, {"a": 0.5, "b": 0.25, "c": 0.25})
    assert est["score"] == pytest.approx(0.5 * 0.5 + 0.25 * 0.8)      # c, with no verdict, adds 0
    assert est["compile"] == pytest.approx(0.5 * 0.25)
    assert est["missing"] == ["c"] and est["missing_weight"] == pytest.approx(0.25)
    text = markdown([], "", None, suite=est)
    assert "Suite score of these kernels: 0.450" in text and "count 0 (their weight 0.250): c" in text
    # b's record has no torch.compile times (kb verify --no-baselines): said beside the compile figure
    assert est["no_compile"] == ["b"] and "counts 0 for 1 ops whose records lack its times: b" in text
    # weights that do not sum to 1 are normalised, as aka/bench/score.py does
    assert suite_estimate(rows, {"a": 2.0, "b": 2.0})["score"] == pytest.approx(0.65)
