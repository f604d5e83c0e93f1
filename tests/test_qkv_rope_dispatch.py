"""kernels/fused_qkv_rope/dispatch picks, per token count, between the head-block and the
token-loop designs. Its rule is checked against what the H200 measured for the two kernels it
merges (results/kb/kernels/fused_qkv_rope/*.results.json, `aka kb verify --device cuda`), and both
of its paths are checked against the reference under the interpreter."""
from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys

from aka.problem import REPO_ROOT

KB = REPO_ROOT / "knowledge_base" / "kernels" / "fused_qkv_rope"
RESULTS = REPO_ROOT / "results" / "kb" / "kernels" / "fused_qkv_rope"


def _load():
    spec = importlib.util.spec_from_file_location("qkv_rope_dispatch", KB / "dispatch.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _h200(kernel: str) -> dict:
    data = json.loads((RESULTS / f"{kernel}.results.json").read_text())
    entries = [data["devices"].get("cuda")] + list(data.get("gpus", {}).values())
    e = next(e for e in entries if e and "H200" in str(e.get("gpu")))
    return {s["label"]: s["time_us"] for s in e["shapes"]}


def test_the_rule_picks_the_kernel_the_h200_measured_faster():
    mod = _load()
    heads, tokens = _h200("head_block"), _h200("token_loop")
    clear = 0
    for label in heads.keys() & tokens.keys():
        n = int(re.search(r"num_tokens=(\d+)", label).group(1))
        if max(heads[label], tokens[label]) < 1.05 * min(heads[label], tokens[label]):
            continue  # within 5%: either is fine
        clear += 1
        assert mod.use_token_loop(n, mod.AKA_PARAMS["MIN_TOKENS"]) == (tokens[label] < heads[label]), \
            (label, heads[label], tokens[label])
    assert clear >= 10   # the measurements cover the rule on most of the 14 shapes


PATHS_SCRIPT = r"""
import json, sys, torch
from aka.evaluate.interp_fix import install
install()
from aka.evaluate.compare import compare_outputs
from aka.evaluate.loader import import_file
from aka.problem import load_problem
prob = load_problem("fused_qkv_rope")
sys.path.insert(0, "bench/ops/fused_qkv_rope")
from input import _make_inputs
from reference import Model
kern = import_file(sys.argv[1], "_qkv_dispatch_under_test")
for min_tokens in (1, 1 << 30):   # every small shape down each path
    kern.AKA_PARAMS["MIN_TOKENS"] = min_tokens
    for sid, case in sorted(prob.meta["small_shapes"].items()):
        torch.manual_seed(0)
        inputs = _make_inputs(**case["input_kwargs"], device="cpu")
        want = Model(**case["init_kwargs"])(**inputs)
        got = kern.ModelNew(**case["init_kwargs"])(**inputs)
        worst, _ = compare_outputs(got, want, prob.meta)
        print(json.dumps({"shape": sid, "min_tokens": min_tokens, "ok": worst.ok, "reason": worst.reason}), flush=True)
"""


def test_both_paths_match_the_reference_under_the_interpreter():
    p = subprocess.run([sys.executable, "-c", PATHS_SCRIPT, str(KB / "dispatch.py")], capture_output=True, text=True,
                       env=dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(REPO_ROOT)), cwd=REPO_ROOT,
                       timeout=600)
    rows = [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]
    assert p.returncode == 0 and len(rows) == 6, p.stderr[-2000:]
    assert {r["min_tokens"] for r in rows} == {1, 1 << 30}
    bad = [r for r in rows if not r["ok"]]
    assert not bad, bad


def test_dispatch_oracle_takes_each_shapes_fastest_kernel():
    """scripts/dispatch_oracle.py: per shape the fastest record, and its summary over those."""
    spec = importlib.util.spec_from_file_location("dispatch_oracle", REPO_ROOT / "scripts" / "dispatch_oracle.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)

    def entry(times):
        return {"shapes": [{"id": i, "time_us": t, "sol_us": 20.0, "sol_fraction": 20.0 / t, "compile_us": 25.0}
                           for i, t in enumerate(times)]}
    out = mod.oracle([("a", entry([10.0, 40.0, 30.0])), ("b", entry([20.0, 25.0, 30.0]))], {})
    assert out["picks"] == {"0": "a", "1": "b", "2": "a"}   # a tie keeps the first
    assert abs(out["summary"]["large_vs_compile_min"] - 25.0 / 30.0) < 1e-9
    single_a = mod.summarize(entry([10.0, 40.0, 30.0])["shapes"], {})
    assert out["summary"]["objective"] > single_a["objective"]
