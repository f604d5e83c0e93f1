"""scripts/gpu_tune_rowops.py on CPU: every kernel of an op, its parameter grid in order, checked
against the reference (the interpreter's wall clock is no timing; the device run is the measurement)."""
import json
import os
import subprocess
import sys

from aka.evaluate.loader import import_file
from aka.problem import REPO_ROOT

TUNER = REPO_ROOT / "scripts" / "gpu_tune_rowops.py"


def _tuner():
    return import_file(TUNER, "_tune_rowops")


def test_configs_start_at_the_default_and_stay_inside_the_declared_grid():
    t = _tuner()

    class K:
        AKA_PARAMS = {"TILE": 4096, "max_warps": 8, "fixed": 1}
    cfgs = t.configs(K, {"params": {"TILE": [2048, 4096], "max_warps": [4, 8, 16], "other": [1, 2]}}, cap=4)
    assert cfgs[0] == K.AKA_PARAMS and len(cfgs) == 4
    assert all(c["fixed"] == 1 and c["TILE"] in (2048, 4096) and c["max_warps"] in (4, 8, 16) for c in cfgs)
    assert all(sum(c[k] != K.AKA_PARAMS[k] for k in ("TILE", "max_warps")) == 1 for c in cfgs[1:])  # one change first
    assert len({json.dumps(c, sort_keys=True) for c in cfgs}) == 4
    assert t.configs(K, {}, cap=5) == [K.AKA_PARAMS]        # no grid: the default alone


def test_cpu_run_checks_every_kernel_and_config_against_the_reference(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), HF_HUB_OFFLINE="1")
    out = subprocess.run([sys.executable, str(TUNER), str(tmp_path), "--ops", "fused_add_rms_norm,awq_w4a16_gemm",
                          "--max-configs", "2", "--device", "cpu"], cwd=REPO_ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    doc = json.loads((tmp_path / "rowops_tune.json").read_text())
    assert not doc["errors"] and doc["provenance"]["device"] == "cpu"
    recs = doc["records"]
    kernels = {(r["op"], r["kernel"]) for r in recs}
    on_disk = {(op, f.stem) for op in ("fused_add_rms_norm", "awq_w4a16_gemm")
               for f in (REPO_ROOT / "knowledge_base" / "kernels" / op).glob("*.py")}
    assert kernels == on_disk                                   # every kernel of both ops ran
    assert all(r["correct"] for r in recs), [r for r in recs if not r["correct"]][:2]
    assert all("vs_peer" not in r for r in recs)                # no ratio from interpreter wall clocks
    only = subprocess.run([sys.executable, str(TUNER), str(tmp_path / "one"), "--ops", "awq_w4a16_gemm",
                           "--kernels", "word_tiles", "--max-configs", "1", "--device", "cpu"], cwd=REPO_ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    assert only.returncode == 0, only.stderr[-2000:]
    one = json.loads((tmp_path / "one" / "rowops_tune.json").read_text())["records"]
    assert {r["kernel"] for r in one} == {"word_tiles"} and len(one) == 3   # three small shapes, one config
    nope = subprocess.run([sys.executable, str(TUNER), str(tmp_path / "nope"), "--ops", "awq_w4a16_gemm",
                           "--kernels", "no_such", "--device", "cpu"], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert nope.returncode == 2 and "no kernel named" in nope.stderr
