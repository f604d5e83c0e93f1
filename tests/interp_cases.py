"""Kernel cases under the Triton interpreter, in a fresh process: `TRITON_INTERPRET` has to be
set before triton is imported, and this process has imported it already. `script` gets the
kernel's path and the JSON case list as argv[1:] and prints one JSON line a case with an "ok"
verdict; every case must be printed and every one must pass."""
import json
import os
import subprocess
import sys

from aka.problem import REPO_ROOT


def assert_cases_pass(script: str, kernel, cases: list, timeout: int = 600) -> list[dict]:
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(REPO_ROOT))
    out = subprocess.run([sys.executable, "-c", script, str(kernel), json.dumps(cases)], cwd=REPO_ROOT,
                         env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == len(cases)
    bad = [r for r in rows if not r["ok"]]
    assert not bad, bad
    return rows


# A `script` for assert_cases_pass: each case {"op", "shape" (a shape id), "cfg" (AKA_PARAMS entries),
# optional "scale" {input name: factor}, optional "max_rel_err"} runs the kernel's ModelNew on the op's
# inputs for that shape (seed 3, the named inputs multiplied first) and compares it with the op's
# reference as the harness does; it prints ok (the comparison passes, or with max_rel_err the relative
# norm error is at most that: the harness's absolute tolerance is set for unit-scale data; and the
# output is finite), rel_err and the reason.
REFERENCE_CASES = r"""
import json, sys, torch
from aka.evaluate.interp_fix import install
install()
from aka.evaluate.compare import compare_outputs
from aka.evaluate.loader import ProblemRuntime, import_file
from aka.problem import load_problem
kern = import_file(sys.argv[1], "_reference_cases")
for case in json.loads(sys.argv[2]):
    prob = load_problem(case["op"])
    rt = ProblemRuntime(prob.worker_spec(), "cpu")
    shape = prob.select(case["shape"])[0].to_json()
    torch.manual_seed(3)
    init, kw = rt.init_args(shape)
    inputs = rt.make_inputs(shape)
    for name, factor in case.get("scale", {}).items():
        inputs[name] = (inputs[name].float() * factor).to(inputs[name].dtype)
    want = rt.make_reference(shape)(**inputs)
    kern.AKA_PARAMS = dict(kern.AKA_PARAMS, **case["cfg"])
    got = kern.ModelNew(*init, **kw)(**inputs)
    worst, _ = compare_outputs(got, want, prob.meta)
    finite = bool(torch.isfinite(got.float()).all())
    ok = worst.rel_err <= case["max_rel_err"] if "max_rel_err" in case else worst.ok
    print(json.dumps({"case": case, "ok": ok and finite, "rel_err": worst.rel_err, "reason": worst.reason}),
          flush=True)
"""
