"""The bundled benchmark on CPU: every reference runs, tolerances are validated, the suite lists,
and the committed weights are reproduced by the command that wrote them."""
import json
import math

import pytest
import torch

from aka.bench.suite import load_suite
from aka.evaluate import compare as cmp
from aka.evaluate.loader import ProblemRuntime, call
from aka.problem import BENCH_OPS, REPO_ROOT, load_problem

OPS = sorted(p.name for p in BENCH_OPS.iterdir() if (p / "meta.json").exists())
CATEGORIES = {"Fusion", "Math", "LinearAlgebra", "Activation", "MatrixMultiply", "Reduce", "Index", "Loss",
              "Quantization", "Normalization", "Optimizer", "SpatialOps", "Convolution", "Random", "Pooling"}


def _upcast(inputs: dict) -> dict:
    out = {}
    for k, v in inputs.items():
        if isinstance(v, torch.Tensor) and v.dtype in (torch.bfloat16, torch.float16, torch.float32):
            out[k] = v.to(torch.float64)
        elif isinstance(v, torch.Tensor):
            out[k] = v.clone()
        else:
            out[k] = v
    return out


def _run(op: str, shape_id: str, seed: int):
    p = load_problem(op)
    shape = {**p.small_shapes, **p.shapes}[shape_id]
    rt = ProblemRuntime(p.worker_spec(), "cpu")
    torch.manual_seed(seed)
    inputs = rt.make_inputs(shape.to_json())
    model = rt.make_reference(shape.to_json())
    with torch.no_grad():
        out = call(model, {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()})
        out64 = call(model, _upcast(inputs))
    return p, out, out64


def test_suite_lists_30_ops_400_shapes_categorised_and_weighted():
    suite = load_suite()
    assert len(suite.problems) >= 30
    assert sum(len(p.shapes) for p in suite.problems) >= 400
    for p in suite.problems:
        assert p.category in CATEGORIES, (p.name, p.category)
        phases = {s.info.get("phase") for s in p.shapes.values()}
        assert phases <= {"decode", "prefill"} and phases, p.name
        assert len(p.small_shapes) >= 1, p.name
    assert math.isclose(sum(suite.weights.values()), 1.0, rel_tol=1e-9)
    assert "weights.json" in suite.weights_source


@pytest.mark.parametrize("op", OPS)
def test_reference_runs_and_tolerance_holds_with_margin(op):
    """Reference in its own dtype vs the same reference on float64-upcast inputs: within the
    tolerance, with at most half the relative-norm budget used; every small shape, 2 draws."""
    p = load_problem(op)
    for sid in p.small_shapes:
        for seed in (0, 1):
            _, out, out64 = _run(op, sid, seed)
            worst, checks = cmp.compare_outputs(out, out64, p.meta)
            assert worst.ok, f"{op}/{sid}: {worst.reason}"
            for name, c in checks:
                tensors = dict(cmp.flatten_outputs(out))
                t = tensors[name]
                if t.is_floating_point() or t.dtype in cmp.FP8_DTYPES:
                    limit = cmp.output_rule(p.meta, name, t.dtype)[1]["rel_norm"]
                    assert c.rel_err <= 0.5 * limit + 1e-12, f"{op}/{sid} output {name}: {c.rel_err:.3g} vs {limit:g}"


@pytest.mark.parametrize("op", OPS)
def test_perturbed_output_fails(op):
    """A systematic error of 3x the relative tolerance on every element (floats), or one changed
    element (integers), must fail: the tolerance is not so loose that it accepts anything."""
    p = load_problem(op)
    sid = next(iter(p.small_shapes))
    _, out, _ = _run(op, sid, 0)
    outs = cmp.flatten_outputs(out)
    for name, t in outs:
        if t.numel() == 0:
            continue
        bad = {k: v.clone() for k, v in outs}
        _, tol = cmp.output_rule(p.meta, name, t.dtype)
        if t.is_floating_point() or t.dtype in cmp.FP8_DTYPES:
            f = t.to(torch.float32)
            finite = torch.isfinite(f)
            if not bool((finite & (f != 0)).any()):
                continue
            rtol = tol["rtol"]
            big = f.abs().max()
            shifted = torch.where(finite, f * (1 + 3 * rtol) + 3 * rtol * big * (f >= 0), f)
            bad[name] = shifted.to(t.dtype)
        else:
            flat = bad[name].view(-1)
            flat[0] = flat[0] + 1
        rebuilt = _rebuild(out, bad)
        worst, _ = cmp.compare_outputs(rebuilt, out, p.meta)
        assert not worst.ok, f"{op}: perturbed output {name} passed"


def _rebuild(like, named: dict):
    if isinstance(like, torch.Tensor):
        return named["0"]
    if isinstance(like, dict):
        return {k: named[str(k)] for k in like}
    return type(like)(named[str(i)] for i in range(len(like)))


@pytest.mark.parametrize("committed_file", ["bench/weights.json", "results/h200/bench/weights_measured.json"])
def test_weights_reproduce_from_committed_workload(tmp_path, committed_file):
    """The command a committed weights file names in its provenance (the workload alone: roofline
    estimate; with --times: the H200 run's measured times) recomputes those weights exactly."""
    import shlex

    from aka.cli import main
    committed = json.loads((REPO_ROOT / committed_file).read_text())
    argv = shlex.split(committed["provenance"]["command"])
    assert argv[:3] == ["aka", "bench", "weigh"]
    argv = [str(REPO_ROOT / a) if "/" in a else a for a in argv[1:]]  # paths are repo-relative
    out = tmp_path / "w.json"
    assert main(argv + ["--out", str(out)]) == 0
    again = json.loads(out.read_text())
    assert again["weights"].keys() == committed["weights"].keys()
    for k, v in committed["weights"].items():
        assert math.isclose(again["weights"][k], v, rel_tol=1e-9, abs_tol=1e-12), k
    assert again["provenance"]["inputs"] == committed["provenance"]["inputs"]
    assert not committed["provenance"]["ops_with_zero_weight"], "every suite operator has a share of serving time"


def test_workload_names_only_suite_operators_and_known_architectures(tmp_path):
    import yaml

    from aka.bench import weigh
    wl = yaml.safe_load((REPO_ROOT / "bench/workloads/serving_mix.yaml").read_text())
    wl["architectures"]["llama3_dense_32"]["rms_nrom"] = 1
    bad = tmp_path / "typo.yaml"
    bad.write_text(yaml.safe_dump(wl))
    with pytest.raises(ValueError, match="rms_nrom"):
        weigh.weights_from_workload(load_suite(), bad, None)


def test_weights_from_measured_times_refuse_a_partial_run(tmp_path, capsys):
    """`aka bench weigh --times RUN` on a run that timed only some operators (a device call cut
    off by its deadline) must not rewrite the weights with zero for the rest; a run covering every
    operator is accepted, and its times move the weights."""
    import yaml

    from aka.cli import main
    suite = load_suite()
    stated = yaml.safe_load((REPO_ROOT / "bench/workloads/serving_mix.yaml").read_text()).get("stated") or {}
    derived = [p for p in suite.problems if p.name not in stated]
    run = tmp_path / "run"
    run.mkdir()
    some = [dict(impl="reference", op=p.name, shape=s.id, device="cuda", correct=True, time_us=10.0)
            for p in derived[:2] for s in p.shapes.values()]
    (run / "records.jsonl").write_text("\n".join(json.dumps(r) for r in some) + "\n")
    args = ["bench", "weigh", "--workload", str(REPO_ROOT / "bench/workloads/serving_mix.yaml"), "--times", str(run),
            "--out", str(tmp_path / "w.json")]
    assert main(args) == 2
    assert f"2 of {len(derived)} operators" in capsys.readouterr().err and not (tmp_path / "w.json").exists()
    got = []
    for slow in (1.0, 10.0):
        every = [dict(impl="reference", op=p.name, shape=s.id, device="cuda", correct=True,
                      time_us=10.0 * (slow if p.name == "rms_norm" else 1.0))
                 for p in suite.problems for s in p.shapes.values()]
        (run / "records.jsonl").write_text("\n".join(json.dumps(r) for r in every) + "\n")
        assert main(args) == 0
        got.append(json.loads((tmp_path / "w.json").read_text())["weights"])
    assert all(math.isclose(sum(w.values()), 1.0) for w in got)
    assert got[1]["rms_norm"] > 2 * got[0]["rms_norm"] > 0


def test_stated_weights_are_kept_and_the_derived_share_the_rest(tmp_path):
    """An operator of the workload's `stated:` section gets exactly its weight, with no times
    needed; the derived operators keep their proportions within 1 - sum(stated); a stated
    operator that an architecture also calls, or one without a reason, is refused."""
    import yaml

    from aka.bench import weigh
    suite = load_suite()
    wl = yaml.safe_load((REPO_ROOT / "bench/workloads/serving_mix.yaml").read_text())
    path = tmp_path / "wl.yaml"
    path.write_text(yaml.safe_dump(wl))
    w, summary = weigh.weights_from_workload(suite, path, None)
    stated = {op: e["weight"] for op, e in wl["stated"].items()}
    assert stated and all(math.isclose(w[op], v) for op, v in stated.items())
    assert set(summary["stated"]) == set(stated)
    assert math.isclose(sum(w.values()), 1.0)
    # Doubling one stated weight leaves the derived operators' ratios unchanged.
    op = next(iter(stated))
    wl2 = yaml.safe_load(path.read_text())
    wl2["stated"][op]["weight"] = 2 * stated[op]
    path2 = tmp_path / "wl2.yaml"
    path2.write_text(yaml.safe_dump(wl2))
    w2, _ = weigh.weights_from_workload(suite, path2, None)
    assert math.isclose(w2[op], 2 * stated[op])
    assert math.isclose(w2["rms_norm"] / w2["gemm_bf16"], w["rms_norm"] / w["gemm_bf16"], rel_tol=1e-9)
    for bad in ({"rms_norm": {"weight": 0.01, "why": "called by every architecture"}},
                {op: {"weight": 0.01}}, {"no_such_op": {"weight": 0.01, "why": "x"}}):
        wl3 = yaml.safe_load(path.read_text())
        wl3["stated"] = bad
        path3 = tmp_path / "wl3.yaml"
        path3.write_text(yaml.safe_dump(wl3))
        with pytest.raises(ValueError):
            weigh.weights_from_workload(suite, path3, None)


def _suite_with_a_broken_op(tmp_path):
    import shutil
    fixtures = REPO_ROOT / "tests" / "fixtures" / "problems"
    root = tmp_path / "data"
    for name in ("atrex_silu_mul_nulls", "vec_add"):
        shutil.copytree(fixtures / name, root / name)
    shutil.copytree(fixtures / "atrex_silu_mul_nulls", root / "broken_op")
    (root / "broken_op" / "shapes.json").write_text('{"0": {"init_kwargs": [1], "input_kwargs": {}}}')
    return root


def test_a_broken_operator_is_named_and_the_rest_of_the_suite_loads(tmp_path, capsys):
    from aka.cli import main
    from aka.problem import ProblemError
    root = _suite_with_a_broken_op(tmp_path)
    suite = load_suite(root)
    assert [p.name for p in suite.problems] == ["atrex_silu_mul_nulls", "vec_add"]
    assert [n for n, _ in suite.failed] == ["broken_op"] and "needs init_kwargs" in suite.failed[0][1]
    assert main(["bench", "list", "--suite", str(root)]) == 0
    out = capsys.readouterr()
    assert "skipped broken_op, it does not load" in out.err and "2 operators, 6 shapes" in out.out
    with pytest.raises(ProblemError, match="requested op broken_op does not load"):
        load_suite(root, ["broken_op"])
    assert load_suite(root, ["vec_add"]).failed == []


def test_a_kernelbench_x_checkout_lists_its_tasks_by_category(tmp_path, capsys):
    """The suite finds `data/kernelbenchx/<Category>/<task>.py` from the checkout, `data/` or the
    category root; a task that does not load is named, the rest list."""
    import shutil
    from aka.cli import main
    task = REPO_ROOT / "tests" / "fixtures" / "problems" / "kbx_scaled_silu.py"
    cats = tmp_path / "KernelBenchX" / "data" / "kernelbenchx"
    for cat, name in (("Activation", "scaled_silu"), ("Fusion", "scaled_silu_again")):
        (cats / cat).mkdir(parents=True)
        shutil.copy(task, cats / cat / f"{name}.py")
    (cats / "Math").mkdir()
    (cats / "Math" / "broken.py").write_text(task.read_text().replace("def test_scaled_silu", "def check_it"))
    (cats / "Math" / "helper.py").write_text("import torch\n")  # no separator: not a task, not listed
    for root in (tmp_path / "KernelBenchX", tmp_path / "KernelBenchX" / "data", cats):
        suite = load_suite(root)
        assert [(p.name, p.kind, p.category) for p in suite.problems] == [
            ("scaled_silu", "kbx", "Activation"), ("scaled_silu_again", "kbx", "Fusion")]
        assert [n for n, _ in suite.failed] == ["broken"]
    assert main(["bench", "list", "--suite", str(tmp_path / "KernelBenchX")]) == 0
    out = capsys.readouterr()
    assert "2 operators, 12 shapes, 2 categories, 2 categorised" in out.out and "skipped broken" in out.err
