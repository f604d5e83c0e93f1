"""`aka convert` on a model: fallback groups of the Llama block (profile and trace), extracted
operator directories judged by the real harness, and the block patched with converted kernels."""
import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from aka.convert.apply import apply, add_apply_parser, library_entries
from aka.convert.extract import SMALL_TOKENS, extract
from aka.convert.fallbacks import FallbackGroup, find_model_fallbacks, find_trace_fallbacks, parse_factory, table
from aka.convert.trace import TraceError
from aka.evaluate.api import EvalConfig, evaluate
from aka.problem import load_problem

REPO = Path(__file__).resolve().parent.parent
FIX = Path(__file__).parent / "fixtures" / "convert"
KERNELS = FIX / "kernels"
BLOCK = "examples.llama_block:factory"
MODULE_GROUPS = {"rms_norm", "rotary_embedding", "causal_gq_attention", "silu_and_mul", "linear_self_attn_qkv_proj",
                 "linear_self_attn_o_proj", "linear_mlp_gate_up_proj", "linear_mlp_down_proj"}
CONVERTED = ("rms_norm", "silu_and_mul", "rotary_embedding")


@pytest.fixture(scope="module")
def groups():
    return find_model_fallbacks(BLOCK, "cpu", repeats=2)


@pytest.fixture(scope="module")
def extracted(groups, tmp_path_factory):
    out = tmp_path_factory.mktemp("ops")
    return out, {g.name: g for g in extract([FallbackGroup.from_json(g.to_json()) for g in groups], out, BLOCK)}


@pytest.fixture(scope="module")
def library(extracted, tmp_path_factory):
    """Three converted kernels, each judged by `aka eval` (CPU) on its extracted operator."""
    ops_dir, _ = extracted
    lib = tmp_path_factory.mktemp("library")
    results = {}
    for op in CONVERTED:
        d = lib / op
        d.mkdir()
        shutil.copy(KERNELS / f"{op}.py", d / "kernel.py")
        res = evaluate(ops_dir / op, d / "kernel.py", shapes="all", config=EvalConfig(device="cpu"))
        (d / "result.json").write_text(res.dumps())
        (d / "provenance.json").write_text(json.dumps({"problem_dir": str(ops_dir / op)}))
        results[op] = res
    return lib, results


# -- finding the fallbacks ----------------------------------------------------------------------

def test_block_profile_groups_by_module(groups):
    by = {g.name: g for g in groups}
    assert MODULE_GROUPS <= set(by)
    norm = by["rms_norm"]
    assert norm.calls == 2 and sorted(norm.modules) == ["input_layernorm", "post_attention_layernorm"]
    assert {"aten::pow", "aten::mean", "aten::rsqrt", "aten::mul"} <= set(norm.ops)
    assert norm.shapes == [{"x": [7, 64]}] and norm.dtypes == ["bfloat16"]
    assert by["rotary_embedding"].dtypes == ["int64", "bfloat16", "bfloat16"]
    assert by["silu_and_mul"].shapes == [{"x": [7, 176]}]
    # The block's residual adds are its own compute, not a child's: an ATen group.
    add = by["aten_add_in_decoder_block"]
    assert add.kind == "aten" and add.calls == 2
    shares = [g.share for g in groups]
    assert shares == sorted(shares, reverse=True) and all(s > 0 for s in shares)
    assert 0.5 < sum(shares) <= 1.0 + 1e-9
    assert all(g.time_basis == "cpu" and g.source == f"model:{BLOCK}" for g in groups)
    assert "rms_norm" in table(groups) and "fallback groups" in table(groups)


def test_trace_fixture_gives_the_same_operators():
    groups = find_trace_fallbacks(FIX / "llama_block_cpu_trace.json")
    by = {g.name: g for g in groups}
    assert MODULE_GROUPS <= set(by), sorted(by)
    assert by["rms_norm"].calls == 2 and by["rms_norm"].shapes[0]["arg0"] == [7, 64]
    assert by["linear_mlp_down_proj"].shapes[0] == {"arg0": [7, 88], "arg1": [64, 88]}
    assert abs(sum(g.share for g in groups) - 1.0) < 0.01  # only glue (views, casts) outside groups


def test_gpu_trace_charges_kernels_to_their_ops():
    groups = {g.name: g for g in find_trace_fallbacks(FIX / "gpu_trace_min.json")}
    assert all(g.time_basis == "gpu" for g in groups.values())
    # pow by correlation -> runtime event -> op; mean by External id alone (no runtime event).
    assert groups["rms_norm"].time_us == pytest.approx(6 + 5 + 3)
    assert groups["linear"].time_us == pytest.approx(40)  # the GEMM under aten::linear -> aten::mm
    assert groups["aten_add"].kind == "aten" and groups["aten_add"].time_us == pytest.approx(4)
    total = 6 + 5 + 3 + 40 + 4 + 2  # the unattributed memcpy counts in the total, in no group
    assert groups["linear"].share == pytest.approx(40 / total)


def test_trace_with_stack_module_ranges(tmp_path):
    """A foreign trace recorded with with_stack=True names modules "nn.Module: <Class>_<n>"."""
    def ev(name, cat, ts, dur, dims=(), types=()):
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 3, "ts": ts, "dur": dur,
                "args": {"Input Dims": list(dims), "Input type": list(types)}}
    events = []
    for i, t0 in enumerate((0.0, 200.0)):
        events += [ev(f"nn.Module: LlamaRMSNorm_{i}", "python_function", t0, 100.0),
                   ev("aten::pow", "cpu_op", t0 + 10, 20.0, [[3, 5], []], ["float", "Scalar"]),
                   ev("aten::mul", "cpu_op", t0 + 40, 20.0, [[3, 5], [3, 1]], ["float", "float"])]
    events.append(ev("aten::view", "cpu_op", 400.0, 5.0, [[3, 5], []], ["float", "ScalarList"]))
    path = tmp_path / "stack.json"
    path.write_text(json.dumps({"traceEvents": events}))
    (g,) = find_trace_fallbacks(path)
    assert g.name == "llama_rms_norm" and g.kind == "module" and g.calls == 2
    assert g.modules == ["LlamaRMSNorm_0", "LlamaRMSNorm_1"] and g.ops == {"aten::pow": 2, "aten::mul": 2}
    assert g.time_us == pytest.approx(80.0) and g.share == pytest.approx(80.0 / 85.0)  # the view is glue


def test_trace_errors_are_one_line(tmp_path):
    with pytest.raises(TraceError, match="not found"):
        find_trace_fallbacks(tmp_path / "none.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(TraceError, match="not a JSON trace"):
        find_trace_fallbacks(bad)
    bad.write_text(json.dumps({"events": []}))
    with pytest.raises(TraceError, match="traceEvents"):
        find_trace_fallbacks(bad)


def test_parse_factory():
    assert parse_factory("examples.llama_block:factory") == ("examples.llama_block", "factory", {})
    assert parse_factory("m:f:size=realistic,tokens=40,x=1.5") == ("m", "f", {"size": "realistic", "tokens": 40, "x": 1.5})
    for bad in ("examples.llama_block", ":f", "m:f:size"):
        with pytest.raises(ValueError):
            parse_factory(bad)


# -- extraction ---------------------------------------------------------------------------------

def test_every_block_group_extracts_and_loads(extracted):
    out, by = extracted
    assert all(g.problem_dir and g.error is None for g in by.values()), {n: g.error for n, g in by.items()}
    prob = load_problem(out / "rms_norm")
    assert prob.kind == "opdir" and prob.category == "Normalization" and list(prob.small_shapes) == ["s0"]
    assert prob.shapes["0"].init_kwargs == {"eps": 1e-5}  # the module's config, for the kernel
    meta = prob.meta
    assert meta["outliers"]["exempt_inputs"] == ["weight"] and meta["cost"] == {"bytes": "auto"}
    assert meta["tolerance"] == {"atol": 1e-2, "rtol": 1.6e-2, "rel_norm": 5e-3}
    assert meta["importance"] == pytest.approx(by["rms_norm"].share)
    weights = torch.load(out / "rms_norm" / "weights.pt", weights_only=True)
    assert weights["w:weight"].dtype == torch.bfloat16 and weights["w:weight"].shape == (64,)
    assert load_problem(out / "causal_gq_attention").meta["outliers"]["band"] == "row"
    rope = json.loads((out / "rotary_embedding" / "shapes.json").read_text())["0"]["input_kwargs"]["inputs"]
    assert rope["positions"] == {"recorded": "c0:positions"}  # indices as recorded, never random
    assert "torch.ops.aten.add.Tensor" in (out / "aten_add_in_decoder_block" / "reference.py").read_text()
    # The module's code is in the reference a proposer is shown, though it is imported to run.
    ref_lines = (out / "rms_norm" / "reference.py").read_text().splitlines()
    assert any(ln.startswith("#") and "rstd = torch.rsqrt(" in ln for ln in ref_lines)
    assert json.loads((out / "fallbacks.json").read_text())[0]["problem_dir"]


def test_large_token_count_gets_a_small_case(tmp_path):
    spec = f"{BLOCK}:tokens=40"
    groups = [g for g in find_model_fallbacks(spec, "cpu", repeats=1) if g.name in ("rms_norm", "rotary_embedding")]
    extract(groups, tmp_path, spec)
    for g in groups:
        assert g.problem_dir, g.error
        prob = load_problem(g.problem_dir)
        big, small = prob.shapes["0"].input_kwargs["inputs"], prob.small_shapes["s0"].input_kwargs["inputs"]
        assert big["q" if "q" in big else "x"]["shape"][0] == 40
        assert small["q" if "q" in small else "x"]["shape"][0] == SMALL_TOKENS
    w = torch.load(tmp_path / "rotary_embedding" / "weights.pt", weights_only=True)
    assert w["s0:positions"].tolist() == w["c0:positions"].tolist()[:SMALL_TOKENS]


def test_in_place_module_with_positional_inputs(tmp_path):
    spec = "tests.fixtures.convert.tiny_models:factory"
    (g,) = find_model_fallbacks(spec, "cpu", repeats=1)
    assert g.name == "cache_write" and g.cases[0]["mutates"] == ["cache"] and g.cases[0]["consts"] == {"scale": 3.0}
    extract([g], tmp_path, spec)
    assert g.problem_dir, g.error
    prob = load_problem(g.problem_dir)
    assert prob.meta["mutates"] == ["cache"] and prob.shapes["0"].init_kwargs == {"scale": 3.0}
    assert prob.shapes["0"].input_kwargs["inputs"]["slot"] == {"recorded": "c0:slot"}
    assert "def forward(self, cache: torch.Tensor, x: torch.Tensor, slot: torch.Tensor)" in \
        (tmp_path / "cache_write" / "reference.py").read_text()


def test_trace_groups_without_a_factory_extract_only_aten_ops(tmp_path):
    groups = find_trace_fallbacks(FIX / "llama_block_cpu_trace.json")
    extract(groups, tmp_path, None)
    by = {g.name: g for g in groups}
    assert "factory" in by["rms_norm"].error and by["rms_norm"].problem_dir is None
    assert by["aten_add_in_decoder_block"].problem_dir  # a traced ATen op rebuilds from its args


# -- the harness on extracted operators --------------------------------------------------------

@pytest.mark.slow
def test_extracted_ops_judged_by_aka_eval(extracted, library, tmp_path):
    ops_dir, _ = extracted
    _, results = library
    for op, res in results.items():
        assert res.status == "pass", (op, res.reason)
        assert all(s.correct for s in res.shapes)
    wrong = evaluate(ops_dir / "rms_norm", KERNELS / "rms_norm_wrong.py", shapes="all", config=EvalConfig(device="cpu"))
    assert wrong.status == "incorrect" and "outside" in wrong.reason


# -- apply --------------------------------------------------------------------------------------

def _apply_cli(library: Path, out: Path, *extra) -> tuple[int, dict, str]:
    """`aka convert apply` in a fresh process: on CPU the kernels need Triton's interpreter on
    before triton is imported, and this test process has imported it (torch.profiler does)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.run([sys.executable, "-m", "aka.convert.apply", BLOCK, "--library", str(library),
                           "--json", str(out), *extra], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600)
    return proc.returncode, json.loads(out.read_text()) if out.exists() else {}, proc.stdout + proc.stderr


@pytest.mark.slow
def test_apply_patches_the_block_and_it_still_matches(library, tmp_path):
    lib, _ = library
    rc, report, log = _apply_cli(lib, tmp_path / "report.json", "--remaining")
    assert rc == 0 and report["ok"], log
    assert sorted(p["module"] for p in report["patched"]) == [
        "input_layernorm", "mlp.act_fn", "post_attention_layernorm", "self_attn.rotary_emb"]
    assert sum(report["kernel_calls"].values()) == 4 and not report["original_calls"]
    assert report["max_abs_err"] <= report["tolerance"]["atol"]
    assert all(p["custom_op"].startswith("aka_convert::") for p in report["patched"])
    # The patched block no longer has the converted fallbacks; the others are still there.
    left = {g["name"] for g in report["remaining"]}
    assert not left & set(CONVERTED) and {"causal_gq_attention", "linear_mlp_down_proj"} <= left, left


@pytest.mark.slow
def test_apply_check_catches_a_wrong_kernel_with_a_forged_pass(library, tmp_path):
    """A library entry whose result.json claims a pass its kernel does not earn: the patched
    block's check must fail (exit 1)."""
    lib, _ = library
    bad = tmp_path / "lib"
    shutil.copytree(lib / "rms_norm", bad / "rms_norm")
    shutil.copy(KERNELS / "rms_norm_wrong.py", bad / "rms_norm" / "kernel.py")
    rc, report, log = _apply_cli(bad, tmp_path / "report.json")
    assert rc == 1 and report["checked"] and report["ok"] is False and "outside" in report["reason"], log


def test_apply_in_a_process_without_the_interpreter_says_so(library_stub):
    """This test process imported triton without the interpreter (torch.profiler imports it):
    applying a CPU kernel here is refused with the fix, not a Triton traceback."""
    from aka.convert.apply import ApplyError
    from examples.llama_block import factory
    import triton.language as tl
    if type(tl.sum).__name__ == "InterpretedFunction":
        pytest.skip("this process runs with TRITON_INTERPRET=1")
    model, inputs = factory()
    with pytest.raises(ApplyError, match="TRITON_INTERPRET=1"):
        apply(model, library_stub, check_inputs=inputs)


@pytest.fixture
def library_stub(extracted, tmp_path):
    """A library holding the honest RMSNorm kernel with a result.json saying pass (not judged)."""
    ops_dir, _ = extracted
    d = tmp_path / "lib" / "rms_norm"
    d.mkdir(parents=True)
    shutil.copy(KERNELS / "rms_norm.py", d / "kernel.py")
    (d / "result.json").write_text(json.dumps({"status": "pass"}))
    (d / "provenance.json").write_text(json.dumps({"problem_dir": str(ops_dir / "rms_norm")}))
    return d.parent


def test_apply_skips_what_it_cannot_use(extracted, tmp_path):
    from examples.llama_block import factory
    ops_dir, _ = extracted
    lib = tmp_path / "lib"
    for op, status, prov in [("rms_norm", "incorrect", True), ("aten_add_in_decoder_block", "pass", True),
                             ("silu_and_mul", "pass", False)]:
        (lib / op).mkdir(parents=True)
        (lib / op / "kernel.py").write_text("class ModelNew: pass\n")
        (lib / op / "result.json").write_text(json.dumps({"status": status}))
        if prov:
            (lib / op / "provenance.json").write_text(json.dumps({"problem_dir": str(ops_dir / op)}))
    reasons = {e.op: e.reason for e in library_entries(lib)}
    assert "status incorrect" in reasons["rms_norm"] and "no meta.json" in reasons["silu_and_mul"]
    model, inputs = factory()
    report = apply(model, lib, check_inputs=inputs)
    skipped = {s["op"]: s["reason"] for s in report.skipped}
    assert "no module of its own" in skipped["aten_add_in_decoder_block"]
    assert not report.patched and report.ok and report.max_abs_err == 0.0


def test_apply_cli_bad_library_is_a_user_error(tmp_path, monkeypatch):
    from aka.errors import UserError
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # the command may switch it on: not for later tests
    p = argparse.ArgumentParser()
    add_apply_parser(p.add_subparsers(dest="cmd"))
    args = p.parse_args(["apply", BLOCK, "--library", str(tmp_path / "missing")])
    with pytest.raises(UserError, match="library not found"):
        args.func(args)
    args = p.parse_args(["apply", "no_such_module:factory", "--library", str(tmp_path)])
    with pytest.raises(UserError, match="cannot import"):
        args.func(args)


def test_apply_time_on_cpu_is_a_user_error_before_any_work(tmp_path, monkeypatch):
    from aka.errors import UserError
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    p = argparse.ArgumentParser()
    add_apply_parser(p.add_subparsers(dest="cmd"))
    # a missing library would be the error if the timing check came after apply: it must come first
    args = p.parse_args(["apply", BLOCK, "--library", str(tmp_path / "missing"), "--time"])
    with pytest.raises(UserError, match="--time needs --device cuda"):
        args.func(args)
    from aka.convert.apply import ApplyError
    from aka.convert.e2e import time_model
    with pytest.raises(ApplyError, match="needs a CUDA GPU"):
        time_model(BLOCK, str(tmp_path), "cpu")


def test_exact_check_accepts_compounded_rounding_and_rejects_worse_than_the_original():
    from aka.convert.apply import exact_check
    tol = {"atol": 0.01, "rtol": 0.016, "rel_norm": 0.005}
    g = torch.Generator().manual_seed(0)
    exact = torch.randn(4096, generator=g, dtype=torch.float64)
    ref = (exact + 0.0005 * torch.randn(4096, generator=g, dtype=torch.float64)).to(torch.bfloat16)
    near = (exact + 0.0005 * torch.randn(4096, generator=g, dtype=torch.float64)).to(torch.bfloat16)
    near[7] = ref[7].double() + 0.05       # one element well past the band against ref ...
    exact[7] = (ref[7].double() + near[7].double()) / 2   # ... with the truth between the two
    res = exact_check(near, ref, lambda: exact, tol)
    assert res["ok"] and res["basis"] == "float64" and "no further" in res["reason"], res
    biased = (exact * 1.0035).to(torch.bfloat16)   # within rel_norm of ref, systematically off
    biased[7] = ref[7] + 0.05
    res = exact_check(biased, ref, lambda: exact, tol)
    assert not res["ok"] and res["basis"] == "float64", res
    res = exact_check(near, ref, None, tol)       # no float64 original: the direct check decides
    assert not res["ok"] and res["basis"] == "direct"
    same = exact_check(ref.clone(), ref, lambda: 1 / 0, tol)   # within band: float64 never made
    assert same["ok"] and same["basis"] == "direct"


def test_float64_reference_drops_the_patches_and_keeps_the_model():
    from aka.convert.apply import float64_reference
    lin = torch.nn.Linear(4, 3).to(torch.bfloat16)
    calls = []

    def patched(x):
        calls.append(1)
        return torch.zeros(x.shape[0], 3, dtype=x.dtype)
    patched._aka_original = lin.forward
    lin.forward = patched
    x = torch.randn(2, 4, dtype=torch.bfloat16)
    out = float64_reference(lin, (x,))
    assert out.dtype == torch.float64 and not calls and torch.count_nonzero(out) > 0
    assert lin.weight.dtype == torch.bfloat16 and lin.forward is patched   # the model itself untouched


def test_e2e_input_sets_keep_integers_and_draw_new_floats_of_the_same_spread():
    from aka.convert.e2e import _fresh_sets, _set_count
    x = torch.randn(64, 32) * 3 + 1
    pos = torch.arange(64)
    sets = _fresh_sets({"x": x, "positions": pos}, 4, seed=0)
    assert len(sets) == 4 and sets[0]["x"] is x
    for s in sets[1:]:
        assert s["positions"] is pos                    # shared control values, as the benchmark's sets
        assert not torch.equal(s["x"], x) and s["x"].shape == x.shape and s["x"].dtype == x.dtype
        assert abs(float(s["x"].std()) - 3.0) < 0.5 and abs(float(s["x"].mean()) - 1.0) < 0.5
    assert not torch.equal(sets[1]["x"], sets[2]["x"])
    # enough sets that together they are 3x the L2, at least 2
    assert _set_count({"x": torch.empty(1 << 20, dtype=torch.uint8)}, 50 << 20) == 150
    assert _set_count({"x": torch.empty(1 << 30, dtype=torch.uint8)}, 50 << 20) == 2
