"""Every knowledge-base kernel passes `aka eval` on its operator's small shapes (CPU interpreter).
A kernel that stops passing fails CI. GPU verification over the benchmark shapes is
`aka kb verify --device cuda` (results in results/kb/kernels/<op>/<name>.results.json)."""
from concurrent.futures import ThreadPoolExecutor

import pytest

from aka.evaluate.api import EvalConfig, evaluate
from aka.evaluate.static import check_source
from aka.problem import REPO_ROOT

KERNELS = sorted((REPO_ROOT / "knowledge_base" / "kernels").glob("*/*.py"))


@pytest.fixture(scope="module")
def verdicts():
    def run(path):
        return path, evaluate(path.parent.name, path, shapes="small", config=EvalConfig(device="cpu", seed=7))
    with ThreadPoolExecutor(2) as pool:
        return dict(pool.map(run, KERNELS))


def test_there_are_kernels():
    assert len(KERNELS) >= 3


@pytest.mark.parametrize("path", KERNELS, ids=[f"{p.parent.name}/{p.stem}" for p in KERNELS])
def test_kernel_passes_on_cpu(path, verdicts):
    res = verdicts[path]
    assert res.status == "pass", f"{path.relative_to(REPO_ROOT)}: {res.status}: {res.reason}"


@pytest.mark.parametrize("path", KERNELS, ids=[f"{p.parent.name}/{p.stem}" for p in KERNELS])
def test_kernel_front_matter_follows_the_contract(path):
    """id, op (= its folder), params whose keys are all in the one-line AKA_PARAMS dict."""
    import ast

    import yaml
    src = path.read_text()
    doc = ast.get_docstring(ast.parse(src)) or ""
    assert doc.startswith("---"), "front matter must open the module docstring"
    meta = yaml.safe_load(doc.split("---")[1])
    assert meta["id"] == f"kernels/{path.parent.name}/{path.stem}" and meta["op"] == path.parent.name
    params_line = [ln for ln in src.splitlines() if ln.startswith("AKA_PARAMS = {")]
    assert len(params_line) == 1, "one single-line AKA_PARAMS dict"
    defaults = ast.literal_eval(params_line[0].split("=", 1)[1].strip())
    assert set((meta.get("params") or {})) <= set(defaults)
    for k, values in (meta.get("params") or {}).items():
        assert defaults[k] in values, f"default {k}={defaults[k]} not in its declared range"
    assert check_source(src).ok


@pytest.mark.parametrize("path", KERNELS, ids=[f"{p.parent.name}/{p.stem}" for p in KERNELS])
def test_kernel_compiles_for_hopper(path):
    """Every launch on the small shapes compiles for sm_90a (no GPU needed): the interpreter
    cannot see what only the GPU compiler refuses. Spills are reported by `aka kb compile-check`."""
    from aka.kb.compile_check import compile_check
    r = compile_check(path.parent.name, str(path))
    bad = [f"{lr.kernel} (warps {lr.num_warps}, {lr.constants}): {lr.error}" for lr in r.launches if lr.error]
    assert r.ok, r.error or "; ".join(bad)


@pytest.fixture(scope="module")
def param_verdicts():
    """Every declared parameter value of every kernel (aka.kb.param_check, one interpreter
    process per kernel, two at a time)."""
    import json
    import os
    import subprocess
    import sys

    def run(path):
        env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(REPO_ROOT))
        p = subprocess.run([sys.executable, "-m", "aka.kb.param_check", str(path)], capture_output=True,
                           text=True, env=env, timeout=600, cwd=REPO_ROOT)
        rows = [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]
        return path, (p.returncode, rows, p.stderr[-1500:])
    with ThreadPoolExecutor(2) as pool:
        return dict(pool.map(run, KERNELS))


@pytest.mark.parametrize("path", KERNELS, ids=[f"{p.parent.name}/{p.stem}" for p in KERNELS])
def test_every_declared_param_value_is_correct(path, param_verdicts):
    rc, rows, err = param_verdicts[path]
    bad = [f"{r['param']}={r['value']}: {r['reason']}" for r in rows if not r["ok"]]
    assert rc == 0 and not bad, "; ".join(bad) or err
