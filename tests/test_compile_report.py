"""The offline compile report of an untrusted candidate (aka/evaluate/compile_report.py): compiled in a
confined child process for sm_90a without a GPU, parsed as bounded data, shown to the agent as
compiler evidence and read for symptoms (spills, a launch the GPU compiler refuses)."""
import os
import uuid

import pytest

from aka.evaluate.compile_report import MAX_LAUNCHES, _clean, compile_report, summary_lines
from aka.problem import REPO_ROOT

ROWWISE = (REPO_ROOT / "knowledge_base" / "kernels" / "rms_norm" / "rowwise.py").read_text()

# Runs under the interpreter (which takes tl.dot of 8 x 8 tiles), refused by the GPU compiler (tl.dot
# needs every dimension >= 16): the failure the report exists to show on a CPU-only machine.
SMALL_DOT = '''
import torch, torch.nn as nn, triton, triton.language as tl

@triton.jit
def _tiny_dot(x_ptr, y_ptr, n):
    i = tl.arange(0, 8)
    a = tl.load(x_ptr + i[:, None] * 8 + i[None, :])
    tl.store(y_ptr + i[:, None] * 8 + i[None, :], tl.dot(a, a))

class ModelNew(nn.Module):
    def __init__(self, eps=1e-6):
        super().__init__()
    def forward(self, x, weight):
        y = torch.empty(64, device=x.device, dtype=torch.float32)
        _tiny_dot[(1,)](x.float().contiguous(), y, 64)
        return x
'''


def test_report_of_a_knowledge_base_kernel():
    r = compile_report("rms_norm", ROWWISE, ["s0"])
    assert r["available"] and r["ok"], r
    (lr,) = r["launches"]
    assert lr["kernel"] == "_rms_norm_rows" and lr["error"] is None
    assert 0 < lr["registers"] <= 255 and lr["spill_bytes"] == 0 and lr["ctas_per_sm"] >= 1
    line = summary_lines(r)[0]
    assert "registers" in line and "no spills" in line and "per SM" in line
    assert lr["sass_instructions"] > 0 and "SASS instructions" in line   # nvdisasm ships in Triton's wheel


def test_a_launch_the_gpu_compiler_refuses_is_reported_and_becomes_a_symptom():
    from aka.evaluate.result import ShapeResult
    from aka.kb.retrieval import Signals, shape_signal, symptoms
    r = compile_report("rms_norm", SMALL_DOT, ["s0"])
    assert r["available"] and not r["ok"]
    (lr,) = r["launches"]
    assert lr["kernel"] == "_tiny_dot" and lr["error"]
    assert "does not compile for sm_90a" in summary_lines(r)[0]
    sig = Signals((shape_signal(ShapeResult(id="s0", label="s0", correct=True, compile=r), {}, set()),))
    assert sig.shapes[0].compile_failed and sig.shapes[0].compile
    assert any("CompilationError" in s.phrase for s in symptoms(sig))


@pytest.mark.skipif(os.geteuid() != 0, reason="confinement needs root (unshare, setpriv)")
def test_the_child_is_confined():
    """A candidate that writes into the repository at import: the child's filesystem is read-only
    there, so the file never appears, and the report still comes back."""
    target = REPO_ROOT / f".aka-escape-{uuid.uuid4().hex[:8]}"
    src = f"open({str(target)!r}, 'w').write('x')\n" + ROWWISE
    r = compile_report("rms_norm", src, ["s0"])
    try:
        assert not target.exists()
        assert r["confinement"]["filesystem"] == "read-only but its own directory"
        assert r["available"] and not r["ok"] and "Read-only file system" in (r["error"] or "")
    finally:
        target.unlink(missing_ok=True)


def test_report_text_is_bounded_data():
    junk = {"available": True, "ok": 1, "error": "e" * 5000,
            "launches": [{"kernel": "k" * 500, "registers": "lots", "spill_bytes": -3, "num_warps": 4.0,
                          "shared_bytes": 2 ** 50, "ctas_per_sm": True, "extra": "dropped"}] * (MAX_LAUNCHES + 10)
            + ["not a dict"]}
    out = _clean(junk)
    assert len(out["launches"]) == MAX_LAUNCHES and len(out["error"]) == 300
    lr = out["launches"][0]
    assert len(lr["kernel"]) == 80 and "extra" not in lr
    assert lr["registers"] is None and lr["spill_bytes"] is None and lr["shared_bytes"] is None
    assert lr["ctas_per_sm"] is None and lr["num_warps"] == 4
    assert lr["sass_instructions"] is None and lr["largest_loop"] is None
    sass = _clean({"launches": [{"kernel": "k", "sass": {"instructions": 900, "loops": [12, "x", -1, 400],
                                                         "ops": {"POPC": 256}}}]})["launches"][0]
    assert sass["sass_instructions"] == 900 and sass["largest_loop"] == 400 and "ops" not in sass
    assert summary_lines({"available": True, "launches": [dict(sass, num_warps=4, registers=40)]})[0].endswith(
        "900 SASS instructions (largest loop body 400)")
    assert summary_lines({"available": False, "reason": "no Triton CUDA backend"}) == [
        "offline compile unavailable: no Triton CUDA backend"]


def test_the_round_prompt_shows_the_compile_report():
    from aka.agent.prompts import PromptRenderer
    from aka.evaluate.result import EvalResult, ShapeResult
    from aka.kb.retrieval import Signals, symptoms
    rep = {"available": True, "ok": True, "capability": 90, "launches": [
        {"kernel": "_row_kernel", "num_warps": 8, "registers": 255, "spill_bytes": 248, "shared_bytes": 147456,
         "ctas_per_sm": 1, "error": None}]}
    s = ShapeResult("3", "num_tokens=512", correct=True, time_us=40.0, sol_us=20.0, sol_fraction=0.5, bound="memory",
                    compile=rep)
    sig = Signals.from_result(EvalResult(status="pass", problem="rms_norm", device="cpu", shapes=[s]), {}, set())
    parent = {"id": "c0002", "is_incumbent": True, "objective": 0.5, "kind": "sol_fraction", "source": "pass"}
    text = PromptRenderer().render("round.j2", first=False, summary=None, last=[], failure="", parent=parent,
                                   signals=sig, hits=[], tried=[], techniques=[], ask="Improve it.")
    assert ("shape 3 offline sm_90a compile (ptxas, no GPU run): _row_kernel (8 warps): 255 registers, "
            "248 B spilled, 144 KB shared, 1 program(s) per SM.") in text
    assert any(x.phrase.startswith("register spills") for x in symptoms(sig))


def test_a_child_that_cannot_build_the_inputs_is_not_a_compile_failure():
    """A candidate that insists on a CUDA device fails in the CPU-only child before any launch: the
    report says so, and no 'does not compile' symptom follows from it."""
    from aka.evaluate.result import ShapeResult
    from aka.kb.retrieval import Signals, shape_signal, symptoms
    src = ROWWISE.replace("class ModelNew(nn.Module):", "torch.cuda.init()\n\nclass ModelNew(nn.Module):", 1)
    r = compile_report("rms_norm", src, ["s0"])
    assert r["available"] and not r["ok"] and r["error"] and not r["launches"]
    assert summary_lines(r)[0].startswith("sm_90a compile not completed:")
    sig = Signals((shape_signal(ShapeResult(id="s0", label="s0", correct=True, compile=r), {}, set()),))
    assert not sig.shapes[0].compile_failed
    assert not any("CompilationError" in s.phrase for s in symptoms(sig))


def test_a_cpu_run_does_not_promote_a_kernel_the_gpu_compiler_refuses():
    from aka.agent.objective import acceptable, compiles_for_gpu
    from aka.evaluate.result import EvalResult, ShapeResult
    refused = {"available": True, "ok": False, "capability": 90, "launches": [
        {"kernel": "_tiny_dot", "error": "AssertionError: dims must be >= 16"}]}
    res = EvalResult(status="pass", device="cpu", shapes=[ShapeResult("s0", "s0", correct=True, compile=refused)])
    assert acceptable(res)[0]
    ok, why = compiles_for_gpu(res)
    assert not ok and "_tiny_dot does not compile for sm_90a" in why
    fine = dict(refused, ok=True, launches=[{"kernel": "_k", "error": None, "registers": 40}])
    for rep in (fine, {"available": False, "reason": "no Triton CUDA backend"}, None):
        assert compiles_for_gpu(EvalResult(status="pass", shapes=[ShapeResult("s0", "s0", compile=rep)]))[0]
