"""Every knowledge-base kernel passes `aka eval` on its operator's small shapes (CPU interpreter).
A kernel that stops passing fails CI. GPU verification over the benchmark shapes is
`aka kb verify --device cuda` (results in results/kb/kernels/<op>/<name>.results.json)."""
from concurrent.futures import ThreadPoolExecutor

import pytest

from aka.evaluate.api import EvalConfig, evaluate
from aka.evaluate.static import check_source
from aka.problem import REPO_ROOT

KERNELS = sorted((REPO_ROOT / "knowledge_base" / "kernels").glob("*/*.py"))
# The kernels are dealt round-robin into CHUNKS test classes: `pytest -n 2 --dist loadscope`
# (scripts/test.sh) hands each class to one worker, so this file, the suite's heaviest (one
# sandboxed evaluation and one compile per kernel, every declared parameter value), spreads over both workers
# and each chunk's batched work runs once, on the worker holding it.
CHUNKS = 4


def chunk_kernels(chunk: int) -> list:
    return KERNELS[chunk::CHUNKS]


def pytest_generate_tests(metafunc):
    if "path" in metafunc.fixturenames and metafunc.cls is not None:
        paths = chunk_kernels(metafunc.cls.CHUNK)
        metafunc.parametrize("path", paths, ids=[f"{p.parent.name}/{p.stem}" for p in paths])


def test_there_are_kernels():
    assert len(KERNELS) >= 3


@pytest.fixture(scope="class")
def verdicts(request):
    def run(path):
        return path, evaluate(path.parent.name, path, shapes="small", config=EvalConfig(device="cpu", seed=7))
    with ThreadPoolExecutor(2) as pool:
        return dict(pool.map(run, chunk_kernels(request.cls.CHUNK)))


@pytest.fixture(scope="class")
def param_verdicts(request):
    """Every declared parameter value of the chunk's kernels (aka.kb.param_check): two interpreter
    processes at a time, each checking half the chunk's kernels one after another (a process per
    kernel spent ~4.6 s of CPU starting Python with torch and triton, 69 times)."""
    import json
    import os
    import subprocess
    import sys

    def run(paths):
        env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(REPO_ROOT))
        p = subprocess.run([sys.executable, "-m", "aka.kb.param_check", *map(str, paths)], capture_output=True,
                           text=True, env=env, timeout=1800, cwd=REPO_ROOT)
        rows = [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]
        return {path: (p.returncode, [r for r in rows if r["kernel"] == str(path)], p.stderr[-1500:]) for path in paths}
    paths = chunk_kernels(request.cls.CHUNK)
    with ThreadPoolExecutor(2) as pool:
        return {k: v for part in pool.map(run, (paths[0::2], paths[1::2])) for k, v in part.items()}


class KernelChecks:
    CHUNK = 0

    def test_kernel_passes_on_cpu(self, path, verdicts):
        res = verdicts[path]
        assert res.status == "pass", f"{path.relative_to(REPO_ROOT)}: {res.status}: {res.reason}"

    def test_kernel_front_matter_follows_the_contract(self, path):
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

    def test_kernel_compiles_for_hopper(self, path):
        """Every launch on the small shapes compiles for sm_90a (no GPU needed): the interpreter
        cannot see what only the GPU compiler refuses. Spills are reported by `aka kb compile-check`."""
        from aka.kb.compile_check import compile_check
        r = compile_check(path.parent.name, str(path))
        bad = [f"{lr.kernel} (warps {lr.num_warps}, {lr.constants}): {lr.error}" for lr in r.launches if lr.error]
        assert r.ok, r.error or "; ".join(bad)

    def test_every_declared_param_value_is_correct(self, path, param_verdicts):
        rc, rows, err = param_verdicts[path]
        done = [r for r in rows if "variants" in r]
        assert done, f"param_check died before finishing this kernel (exit {rc}): {err}"
        assert done[0]["error"] is None, done[0]["error"]
        bad = [f"{r['param']}={r['value']}: {r['reason']}" for r in rows if "param" in r and not r["ok"]]
        assert not bad and done[0]["failed"] == 0, "; ".join(bad) or err


class TestChunk0(KernelChecks):
    CHUNK = 0


class TestChunk1(KernelChecks):
    CHUNK = 1


class TestChunk2(KernelChecks):
    CHUNK = 2


class TestChunk3(KernelChecks):
    CHUNK = 3


def test_chunks_cover_every_kernel_once():
    dealt = [p for c in range(CHUNKS) for p in chunk_kernels(c)]
    assert sorted(dealt) == KERNELS and len(set(dealt)) == len(KERNELS)

TAIL_FAMILY = '''"""
---
id: kernels/vec_add/tail
op: vec_add
params:
  TAIL: [true, false]
  BLOCK: [128, 512]
---
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"TAIL": True, "BLOCK": 256}


@triton.jit
def add_kernel(a_ptr, b_ptr, c_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(c_ptr + offs, tl.load(a_ptr + offs, mask=mask) + tl.load(b_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def forward(self, a, b):
        c = torch.empty_like(a)
        n = a.numel() if AKA_PARAMS["TAIL"] else a.numel() // AKA_PARAMS["BLOCK"] * AKA_PARAMS["BLOCK"]
        add_kernel[(triton.cdiv(n, AKA_PARAMS["BLOCK"]),)](a, b, c, n, BLOCK=AKA_PARAMS["BLOCK"])
        return c
'''


def test_one_param_check_process_reports_each_kernel_on_its_own(tmp_path):
    """Several kernels in one param_check process: a declared value that drops the tail fails
    with its reason, a kernel whose op cannot be found gets its error line, and the kernels after
    both are still checked (the vec_add fixture's small shape has n = 999, not a multiple of 128)."""
    import json
    import os
    import subprocess
    import sys
    paths = [tmp_path / "vec_add" / "tail.py", tmp_path / "no_such_op" / "tail.py", tmp_path / "vec_add" / "ok.py"]
    for p in paths:
        p.parent.mkdir(exist_ok=True)
        p.write_text(TAIL_FAMILY if p.stem == "tail" else TAIL_FAMILY.replace("TAIL: [true, false]", "TAIL: [true]"))
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(REPO_ROOT))
    proc = subprocess.run([sys.executable, "-m", "aka.kb.param_check", *map(str, paths)], capture_output=True,
                          text=True, env=env, timeout=900, cwd=REPO_ROOT / "tests" / "fixtures" / "problems")
    rows = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert proc.returncode == 1, proc.stderr[-2000:]
    done = {r["kernel"]: r for r in rows if "variants" in r}
    assert list(done) == [str(p) for p in paths]
    tail, lost, ok = (done[str(p)] for p in paths)
    assert (tail["variants"], tail["failed"], tail["error"]) == (3, 1, None)
    (wrong,) = [r for r in rows if r["kernel"] == str(paths[0]) and "param" in r and not r["ok"]]
    assert (wrong["param"], wrong["value"]) == ("TAIL", False) and "shape s0" in wrong["reason"]
    assert "problem not found: no_such_op" in lost["error"] and lost["variants"] == 0
    assert (ok["variants"], ok["failed"], ok["error"]) == (2, 0, None)
