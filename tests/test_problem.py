"""Problem loading (aka/problem.py) for the three layouts, its one-line errors, and the worker-side
loader (aka/evaluate/loader.py) that builds inputs on the evaluation device."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from aka.evaluate.loader import ProblemRuntime, call
from aka.problem import ProblemError, load_problem

PROBLEMS = Path(__file__).resolve().parent / "fixtures" / "problems"


@pytest.fixture
def opdir(tmp_path):
    """A writable copy of the vec_add operator directory."""
    dst = tmp_path / "vec_add"
    shutil.copytree(PROBLEMS / "vec_add", dst)
    return dst


def test_opdir_loads_with_meta_shapes_and_small_shapes():
    p = load_problem(PROBLEMS / "rms_norm")
    assert p.kind == "opdir" and p.name == "rms_norm" and p.category == "Normalization"
    assert p.input_path == PROBLEMS / "rms_norm" / "input.py"
    assert list(p.shapes) == ["0", "1", "2"]
    assert p.shapes["1"].init_kwargs == {"eps": 1e-5}
    assert p.shapes["1"].input_kwargs == {"num_tokens": 13, "hidden": 333}
    assert p.shapes["1"].info["tokens"] == 13 and p.shapes["1"].weight == 1.0
    assert p.meta["outliers"]["exempt_inputs"] == ["weight"]
    assert [s.id for s in p.select("small")] == ["s0"]
    assert p.shapes["1"].label() == "num_tokens=13,hidden=333"


def test_every_fixture_problem_loads():
    kinds = {}
    for path in sorted(PROBLEMS.iterdir()):
        p = load_problem(path)
        kinds[path.name] = p.kind
        assert 2 <= len(p.shapes) <= 3 or p.kind in ("kernelbench", "kbx")
    assert set(kinds.values()) == {"opdir", "atrex", "kernelbench", "kbx"}


def test_atrex_layout_translates_metadata_and_roofline():
    root = PROBLEMS / "atrex_fused_add_rms_norm"
    assert not (root / "meta.json").exists()
    p = load_problem(root)
    assert p.kind == "atrex" and p.meta["source"] == "atrex-bench" and p.meta["atrex_id"] == "atrex_fixture_001"
    roof = json.loads((root / "roofline.json").read_text())["shapes"]
    for sid, shape in p.shapes.items():
        cost = p.meta["cost"]["per_shape"][sid]
        assert cost["bytes"] == roof[sid]["semantic_Q_read_bytes"] + roof[sid]["semantic_Q_write_bytes"]
        assert cost["flops"] == {"bf16": float(roof[sid]["semantic_W_flops"]["bf16"])}
        assert "fused add RMSNorm" in shape.info["description"]
    assert p.shapes["1"].input_kwargs == {"token_count": 13, "hidden_size": 333}
    assert p.small_shapes == {}
    with pytest.raises(ProblemError, match="no small_shapes"):
        p.select("small")


def test_atrex_inputs_land_on_the_evaluation_device_without_a_device_parameter():
    p = load_problem(PROBLEMS / "atrex_fused_add_rms_norm")
    rt = ProblemRuntime(p.worker_spec(), "cpu")
    assert rt._takes_device is False  # _make_inputs(token_count, hidden_size) hard-codes 'cuda'
    inputs = rt.make_inputs(p.shapes["1"].to_json())
    assert list(inputs) == ["x", "residual", "weight"]
    assert all(t.device.type == "cpu" and t.dtype == torch.bfloat16 for t in inputs.values())
    assert inputs["x"].shape == (13, 333) and inputs["weight"].shape == (333,)
    out = call(rt.make_reference(p.shapes["1"].to_json()), inputs)
    assert set(out) == {"out", "residual"} and out["out"].dtype == torch.bfloat16


def test_opdir_inputs_get_the_device_keyword():
    p = load_problem(PROBLEMS / "topk_ids")
    rt = ProblemRuntime(p.worker_spec(), "cpu")
    assert rt._takes_device is True
    a, b = rt.make_inputs(p.shapes["0"].to_json()), rt.make_inputs(p.shapes["0"].to_json())
    assert a["ids"].dtype == torch.int32 and a["scores"].shape == (5, 37)
    assert not torch.equal(a["scores"], b["scores"])  # fresh draws: the harness, not input.py, seeds


def test_recorded_weights_load_inside_the_device_redirect(tmp_path):
    """`aka convert`'s input.py loads the model's recorded weights with torch.load(map_location=
    "cpu") while inputs are built; torch.load's own empty tensors must keep their storage's device.
    On the H200 (2026-12-03) the redirect sent them to cuda and every extracted module with
    parameters (RMSNorm, rotary) crashed the judge. "meta" stands in for a second device here."""
    from aka.evaluate.loader import DeviceRedirect
    torch.save({"w": torch.arange(4.0)}, tmp_path / "weights.pt")
    with DeviceRedirect("meta"):
        w = torch.load(tmp_path / "weights.pt", map_location="cpu", weights_only=True)["w"]
        assert w.device.type == "cpu" and w.tolist() == [0.0, 1.0, 2.0, 3.0]
        assert w.to("cpu").device.type == "meta"                      # ours still redirected
        assert torch.zeros(2, device="cpu").device.type == "meta"


def test_kernelbench_single_file():
    path = PROBLEMS / "kb_linear_relu.py"
    p = load_problem(path)
    assert p.kind == "kernelbench" and p.name == "kb_linear_relu" and p.input_path is None
    assert list(p.shapes) == ["0"] and [s.id for s in p.select("small")] == ["0"]
    rt = ProblemRuntime(p.worker_spec(), "cpu")
    args, kwargs = rt.init_args({})
    assert args == [50, 37] and kwargs == {}
    inputs = rt.make_inputs({})
    assert list(inputs) == ["arg0"] and inputs["arg0"].shape == (13, 50)
    model = rt.make_reference({})
    assert isinstance(model.linear, torch.nn.Linear)
    assert (call(model, inputs) >= 0).all()  # positional call, ReLU output


def test_select_variants():
    p = load_problem(PROBLEMS / "vec_add")
    assert [s.id for s in p.select(None)] == ["0", "1", "2"]
    assert [s.id for s in p.select("all")] == ["0", "1", "2"]
    assert [s.id for s in p.select("first")] == ["0"]
    assert [s.id for s in p.select("last")] == ["2"]
    assert [s.id for s in p.select("2,0")] == ["2", "0"]
    assert [s.id for s in p.select(["1", "s0"])] == ["1", "s0"]
    with pytest.raises(ProblemError, match=r"unknown shape id\(s\) 9, x \(known: 0, 1, 2, s0\)"):
        p.select("9,x")


@pytest.mark.parametrize("missing", ["reference.py", "input.py", "shapes.json"])
def test_missing_file_is_one_clear_error(opdir, missing):
    (opdir / missing).unlink()
    with pytest.raises(ProblemError, match=f"is not an operator directory: missing {missing}") as e:
        load_problem(opdir)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("text,message", [
    ('{"0": {"input_kwargs": {"n": 5}', r"malformed shapes.json in .*: Expecting .* at line 1"),
    ('[{"input_kwargs": {"n": 5}}]', r"malformed shapes.json in .*: expected an object"),
    ('{"0": [1, 2]}', r"malformed shapes in .*: entry '0' is not an object"),
    ('{"0": {"init_kwargs": [], "input_kwargs": {}}}', r"entry '0' needs init_kwargs and input_kwargs objects"),
    ('{}', r"shapes.json has no shapes"),
])
def test_malformed_shapes_json(opdir, text, message):
    (opdir / "shapes.json").write_text(text)
    with pytest.raises(ProblemError, match=message):
        load_problem(opdir)


def test_misspelled_shape_keys_are_rejected(opdir):
    (opdir / "shapes.json").write_text('{"0": {"init_kwargs": {}, "input_kwarg": {"n": 5}}}')
    with pytest.raises(ProblemError):
        load_problem(opdir)


def test_malformed_meta_and_reference(opdir):
    (opdir / "meta.json").write_text("{not json")
    with pytest.raises(ProblemError, match="malformed meta.json"):
        load_problem(opdir)
    (opdir / "meta.json").write_text("{}")
    (opdir / "reference.py").write_text("import torch\n\nclass Reference:\n    pass\n")
    with pytest.raises(ProblemError, match="defines no class Model"):
        load_problem(opdir)
    (opdir / "reference.py").write_text("class Model(:\n")
    with pytest.raises(ProblemError, match="syntax error at line 1"):
        load_problem(opdir)


def test_kernelbench_file_errors(tmp_path):
    f = tmp_path / "kb.py"
    f.write_text("import torch\n\nclass Model(torch.nn.Module):\n    pass\n\ndef get_inputs():\n    return []\n")
    with pytest.raises(ProblemError, match="needs get_init_inputs"):
        load_problem(f)
    txt = tmp_path / "problem.txt"
    txt.write_text("x")
    with pytest.raises(ProblemError, match="KernelBench .py file or an operator directory"):
        load_problem(txt)
    with pytest.raises(ProblemError, match="problem not found"):
        load_problem(tmp_path / "nope")


def test_a_mistyped_operator_name_gets_the_closest_names():
    with pytest.raises(ProblemError, match=r"problem not found: rms_nrom .*did you mean rms_norm"):
        load_problem("rms_nrom")
    with pytest.raises(ProblemError) as err:
        load_problem("zzzz_no_such_op")
    assert "did you mean" not in str(err.value)
    from aka.bench.suite import load_suite
    with pytest.raises(ProblemError, match=r"fused_mo \(did you mean fused_moe.*\), zzz$"):
        load_suite(None, ops=["fused_mo", "zzz"])


def test_atrex_null_init_kwargs_load_as_empty_and_run():
    """Atrex-Bench writes `"init_kwargs": null` for a Model without arguments (153 of its 440 entries)."""
    p = load_problem(PROBLEMS / "atrex_silu_mul_nulls")
    assert p.kind == "atrex" and [s.init_kwargs for s in p.shapes.values()] == [{}, {}, {}]
    assert p.shapes["1"].input_kwargs == {"num_tokens": 17, "d": 333}
    rt = ProblemRuntime(p.worker_spec(), "cpu")
    inputs = rt.make_inputs(p.shapes["1"].to_json())
    out = call(rt.make_reference(p.shapes["1"].to_json()), inputs)
    assert out.shape == (17, 333) and out.dtype == torch.bfloat16


@pytest.mark.parametrize("text", ['{"0": {"init_kwargs": null, "input_kwargs": null}}',
                                  '{"0": {"input_kwargs": {"n": 5}}}'])
def test_null_or_absent_kwargs_are_empty(opdir, text):
    (opdir / "shapes.json").write_text(text)
    p = load_problem(opdir)
    assert p.shapes["0"].init_kwargs == {} and p.shapes["0"].input_kwargs in ({}, {"n": 5})


def test_atrex_ops_we_know_take_the_category_of_our_operator(tmp_path):
    from aka.problem import ATREX_OPS, BENCH_OPS
    known = json.loads(ATREX_OPS.read_text())["ops"]
    for atrex_name, ours in known.items():
        assert (BENCH_OPS / ours / "meta.json").exists(), (atrex_name, ours)
    dst = tmp_path / "silu_and_mul"  # an Atrex-Bench name, in the Atrex layout
    shutil.copytree(PROBLEMS / "atrex_silu_mul_nulls", dst)
    assert load_problem(dst).category == "Activation"
    assert load_problem(PROBLEMS / "atrex_silu_mul_nulls").category is None  # a name we do not know


# -- KernelBench: a real small shape ------------------------------------------------------------

def test_kernelbench_small_shape_scales_the_size_constants_and_says_which():
    from aka.kernelbench import SMALL_ELEMENTS
    p = load_problem(PROBLEMS / "kb_large_constants.py")  # defaults: a 4096 x 65536 fp32 input, 1 GiB
    (s,) = p.select("small")
    assert s.id == "s0" and s.input_kwargs == {"constants": {"batch_size": 1024, "dim": 1024, "groups": 4, "tail": [4]}}
    # derived constants (groups = dim // 256, tail = (groups,)) follow; reduce_dim sizes nothing
    assert s.info["scaled"] == "batch_size 4096->1024, dim 65536->1024, groups 256->4, tail (256,)->(4,)"
    rt = ProblemRuntime(p.worker_spec(), "cpu")
    inputs = rt.make_inputs(s.to_json())
    assert inputs["arg0"].shape == (1024, 1024) and inputs["arg1"].shape == (4,)
    assert max(t.numel() for t in inputs.values()) <= SMALL_ELEMENTS
    model = rt.make_reference(s.to_json())
    assert model.groups == 4 and model.reduce_dim == 1
    out = call(model, inputs)
    assert out.shape == (1024, 1024) and torch.isfinite(out).all()
    assert rt.init_args(p.shapes["0"].to_json()) == ([256, 1], {})  # the default shape gets the originals back


def _kb_file(tmp_path, get_inputs: str) -> Path:
    f = tmp_path / "kb_helper_sized.py"
    f.write_text("import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n\n"
                 "n = 1 << 30\n\ndef size():\n    return n\n\n" + get_inputs + "\n\ndef get_init_inputs():\n    return []\n")
    return f


@pytest.mark.parametrize("get_inputs,why", [
    ("def get_inputs():\n    return [torch.randn(size())]", r"line 13: the size of torch.randn\(size\(\)\) is not made of"),
    ("def get_inputs():\n    return [torch.randn(4096, 4096)]", r"keeps 16,777,216 elements .*no module-level constant"),
])
def test_kernelbench_without_a_small_shape_says_why(tmp_path, capsys, get_inputs, why):
    from aka.cli import main
    f = _kb_file(tmp_path, get_inputs)
    p = load_problem(f)
    assert p.small_shapes == {} and list(p.shapes) == ["0"]
    with pytest.raises(ProblemError, match="kb_helper_sized: no small shape exists: .*" + why):
        p.select("small")
    cand = tmp_path / "cand.py"
    cand.write_text("import torch\n")
    assert main(["eval", str(f), str(cand), "--shapes", "small", "--device", "cpu"]) == 2
    assert "no small shape exists" in capsys.readouterr().err


def test_eval_prints_the_scaled_constants(tmp_path, capsys):
    from aka.cli import main
    cand = tmp_path / "cand.py"
    cand.write_text("import torch\n\nclass ModelNew(torch.nn.Module):\n    pass\n")  # rejected statically: no kernel
    # exit 1: the candidate is rejected (no kernel); what is checked is the line about the scaled shape
    assert main(["eval", str(PROBLEMS / "kb_large_constants.py"), str(cand), "--shapes", "small", "--device", "cpu"]) == 1
    assert "shape s0: module constants scaled: batch_size 4096->1024, dim 65536->1024" in capsys.readouterr().out


# -- KernelBench-X task files -------------------------------------------------------------------

KBX = PROBLEMS / "kbx_scaled_silu.py"


def test_kbx_task_shapes_are_the_test_functions_calls():
    p = load_problem(KBX)
    assert p.kind == "kbx" and p.input_path is None and p.meta["function"] == "scaled_silu"
    assert p.meta["separator_line"] == 14 and p.meta["test"] == "test_scaled_silu"
    assert [s.label() for s in p.shapes.values()] == [
        "test_case_1", "test_case_2", "test_case_3", "L52 mode=standard",
        "L55 mode=standard,rows=3,scale=1.5", "L55 mode=standard,rows=31,scale=-0.25"]
    assert p.shapes["4"].input_kwargs == {"line": 55, "bind": {"mode": "standard", "rows": 3, "scale": 1.5}}
    # the try-block error case and the outlier iterations are no shapes; range(3) is one shape
    assert p.meta["kbx"]["skipped"] == {"in_try": 1, "outlier_mode": 2, "nested_function": 0}
    assert p.meta["mutates"] == ["out"]
    assert p.candidate_functions() == ["scaled_silu", "kernel_function", "kbx_scaled_silu"]
    assert p.small_shapes.keys() == p.shapes.keys() and p.category is None


def test_kbx_inputs_are_the_arguments_of_that_call_in_the_tasks_own_test():
    p = load_problem(KBX)
    rt = ProblemRuntime(p.worker_spec(), "cpu")
    got = {sid: rt.make_inputs(s.to_json()) for sid, s in p.shapes.items()}
    assert got["0"]["input"].tolist() == [-2.0, -0.5, 0.0, 0.5, 2.0]
    assert got["1"]["input"].shape == (7, 33) and got["1"]["scale"] == 0.5
    assert set(got["2"]) == {"input", "scale", "out"} and got["2"]["out"].shape == (5, 17)  # the 3-line call
    assert got["3"]["input"].shape == (64, 129) and set(got["3"]) == {"input"}
    assert got["5"]["input"].shape == (31, 200) and got["5"]["scale"] == -0.25  # positional, bound by name
    torch.manual_seed(3)
    a = rt.make_inputs(p.shapes["4"].to_json())["input"]
    torch.manual_seed(3)
    b = rt.make_inputs(p.shapes["4"].to_json())["input"]
    c = rt.make_inputs(p.shapes["4"].to_json())["input"]
    assert torch.equal(a, b) and not torch.equal(a, c)  # the harness's seed decides each draw
    ref = rt.make_reference(p.shapes["2"].to_json())
    out = call(ref, got["2"])
    assert out is got["2"]["out"] and torch.allclose(out, got["2"]["input"] * torch.sigmoid(got["2"]["input"]) * 2)


def test_kbx_task_in_a_category_folder_takes_its_category(tmp_path):
    dst = tmp_path / "Activation" / "scaled_silu.py"
    dst.parent.mkdir()
    shutil.copy(KBX, dst)
    p = load_problem(dst)
    assert p.category == "Activation" and p.candidate_functions() == ["scaled_silu", "kernel_function"]


@pytest.mark.parametrize("edit,message", [
    (("def test_scaled_silu", "def check_scaled_silu"), "no test_<task>\\(\\) function below the separator line 14"),
    (("def scaled_silu(input", "def other(input"), "test_scaled_silu\\(\\) calls none of the reference functions"),
    (("def scaled_silu(input: torch.Tensor,", "def scaled_silu(*input,"), "positional-only or \\*args"),
])
def test_kbx_task_errors_are_one_line(tmp_path, edit, message):
    f = tmp_path / "task.py"
    f.write_text(KBX.read_text().replace(*edit))
    with pytest.raises(ProblemError, match=message) as e:
        load_problem(f)
    assert "\n" not in str(e.value)


def test_kbx_eval_end_to_end_on_cpu(tmp_path):
    """`aka eval` on the task file: an honest Triton `kernel_function` passes every stage, a real
    Triton kernel under the task's own name that ignores `scale` is incorrect on exactly the
    shapes with a scale."""
    from aka.cli import main
    from aka.evaluate.api import EvalConfig, evaluate
    cands = Path(__file__).resolve().parent / "fixtures" / "candidates" / "kbx"
    out = tmp_path / "honest.json"
    assert main(["eval", str(KBX), str(cands / "scaled_silu_honest.py"), "--device", "cpu", "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["status"] == "pass", res["reason"]
    assert res["stages_run"] == ["static", "import", "first_call", "correctness", "outliers", "fallback"]
    assert len(res["shapes"]) == 6 and all(s["correct"] for s in res["shapes"])
    wrong = evaluate(KBX, cands / "scaled_silu_ignores_scale.py", config=EvalConfig(device="cpu"))
    assert wrong.status == "incorrect" and wrong.reason.startswith("[correctness] 4 of 6 shapes failed")
    assert [s.id for s in wrong.shapes if not s.correct] == ["1", "2", "4", "5"]


def test_kbx_device_arguments_name_the_evaluation_device(tmp_path):
    """A task whose function takes `device=` (KernelBench-X's logspace): the test passes 'cuda',
    on CPU every call, captured or passed through to the reference, gets the CPU."""
    sep = "#" * 146
    f = tmp_path / "ramp.py"
    f.write_text(f"import torch\n\ndef ramp(n, scale=1.0, device=None):\n"
                 f"    return torch.arange(n, device=device) * scale\n\n{sep}\n\nimport torch\n\n"
                 "def test_ramp():\n    results = {}\n    results['a'] = ramp(4, device='cuda')\n"
                 "    results['b'] = ramp(7, 2.0, device=torch.device('cuda'))\n    return results\n\n"
                 "test_results = test_ramp()\n")
    p = load_problem(f)
    rt = ProblemRuntime(p.worker_spec(), "cpu")
    inputs = rt.make_inputs(p.shapes["1"].to_json())
    assert inputs == {"n": 7, "scale": 2.0, "device": torch.device("cpu")}
    assert call(rt.make_reference(p.shapes["1"].to_json()), inputs).tolist() == [0, 2, 4, 6, 8, 10, 12]
