"""scripts/suite_plan.py: which kernel the whole-suite run gets per op, and the folder it writes."""
import json
import subprocess
import sys

from aka.evaluate.loader import import_file
from aka.problem import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "suite_plan.py"


def _mod():
    return import_file(SCRIPT, "_suite_plan")


def test_override_then_kb_best_then_first_file_and_missing_files_fall_through():
    m = _mod()
    p = m.plan(["gemm_bf16", "rms_norm", "softmax", "layer_norm"],
               {"gemm_bf16": {"kernel": "dispatch", "why": "harness run"},
                "layer_norm": {"kernel": "no_such_kernel", "why": "stale"}},
               {"rms_norm": "rowwise", "layer_norm": "row_tile"})
    assert p["gemm_bf16"] == {"kernel": "dispatch", "why": "harness run"}
    assert p["rms_norm"]["kernel"] == "rowwise" and "kb best" in p["rms_norm"]["why"]
    first = sorted((REPO_ROOT / "knowledge_base" / "kernels" / "softmax").glob("*.py"))[0].stem
    assert p["softmax"]["kernel"] == first and "first kernel file" in p["softmax"]["why"]
    assert p["layer_norm"]["kernel"] == "row_tile"      # an override naming no file is not used


def test_committed_overrides_name_existing_kernels_with_a_reason(tmp_path):
    over = json.loads((REPO_ROOT / "scripts" / "suite_kernels.json").read_text())
    for op, e in over.items():
        if op.startswith("_"):
            continue
        assert (REPO_ROOT / "knowledge_base" / "kernels" / op / f"{e['kernel']}.py").is_file(), op
        assert len(e["why"]) > 20
    out = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "best"), str(tmp_path / "plan.json"),
                          "--ops", "gemm_bf16,awq_w4a16_gemm"], cwd=REPO_ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert set(plan) == {"gemm_bf16", "awq_w4a16_gemm"}
    for op, e in plan.items():
        assert (tmp_path / "best" / op / f"{e['kernel']}.py").is_file()
    bad = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "b2"), str(tmp_path / "p2.json"), "--ops", "nope"],
                         cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "not in the bundled suite" in bad.stderr
