"""`aka convert` over a small suite on CPU: the real harness through the interpreter, optimize in
executor jobs (local and a real local Ray cluster), the library, a worker killed mid-batch, re-runs,
and the report's arithmetic."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from aka.cli import main
from aka.convert.library import Library
from aka.convert.report import rows, speedups, totals, write_report
from aka.executors import JobResult
from aka.problem import REPO_ROOT
from tests.fakes.ray_cluster import ray_cluster  # noqa: F401  (the session fixture)

FIX = REPO_ROOT / "tests" / "fixtures"
HONEST_VEC_ADD = (FIX / "candidates" / "honest" / "vec_add.py").read_text()
GOOD_RMS = (FIX / "agent" / "candidates" / "good.py").read_text()

VEC_ADD_FAMILY = '''"""
---
id: kernels/vec_add/blocked
op: vec_add
category: Math
dtypes: [float32]
techniques: [masked-blocks]
params:
  BLOCK: [256, 1024]
summary: test fixture, masked blocks over the vector.
---
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

AKA_PARAMS = {"BLOCK": 1024}


@triton.jit
def add_kernel(a_ptr, b_ptr, c_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(c_ptr + offs, tl.load(a_ptr + offs, mask=mask) + tl.load(b_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def forward(self, a, b):
        c = torch.empty_like(a)
        add_kernel[(triton.cdiv(a.numel(), AKA_PARAMS["BLOCK"]),)](a, b, c, a.numel(), BLOCK=AKA_PARAMS["BLOCK"])
        return c
'''


def make_suite(tmp_path: Path) -> tuple[Path, Path]:
    """Three operators: two that convert, one that cannot run on CPU (huge shapes, no small ones:
    its job raises, the batch goes on). Weights 0.6 / 0.3 / 0.1."""
    suite, kernels = tmp_path / "suite", tmp_path / "kernels"
    shutil.copytree(FIX / "agent" / "rms_norm_small", suite / "rms_norm_small")
    shutil.copytree(FIX / "problems" / "vec_add", suite / "vec_add")
    huge = suite / "vec_add_huge"
    shutil.copytree(FIX / "problems" / "vec_add", huge)
    meta = json.loads((huge / "meta.json").read_text())
    meta.pop("small_shapes")
    meta["name"] = "vec_add_huge"
    (huge / "meta.json").write_text(json.dumps(meta))
    (huge / "shapes.json").write_text(json.dumps({"0": {"init_kwargs": {}, "input_kwargs": {"n": 123_456_789}}}))
    (suite / "weights.json").write_text(json.dumps({"weights": {"rms_norm_small": 6, "vec_add": 3, "vec_add_huge": 1},
                                                    "provenance": {"method": "test weights"}}))
    shutil.copytree(FIX / "agent" / "kernels" / "rms_norm_small", kernels / "rms_norm_small")
    (kernels / "vec_add").mkdir()
    (kernels / "vec_add" / "blocked.py").write_text(VEC_ADD_FAMILY)
    return suite, kernels


def kill_when_running(lib: Path, op: str, *, parent: bool) -> threading.Thread:
    """Kill the process running `op`'s job once its optimize run exists: the job's own process
    (its pid ends the run id), or its parent (the Ray worker)."""
    def go():
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            runs = list((lib / "runs").glob(f"{op}-*")) if (lib / "runs").is_dir() else []
            if runs and (runs[0] / "events.jsonl").exists():
                pid = int(runs[0].name.rsplit("-", 1)[1])
                if parent:
                    with open(f"/proc/{pid}/stat") as f:
                        pid = int(f.read().split(")")[-1].split()[1])
                os.kill(pid, signal.SIGKILL)
                return
            time.sleep(0.05)
    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t


def states(lib: Path) -> dict[str, str]:
    return {e.name: e.state for e in Library(lib).entries()}


COMMON = ["device=cpu", "shape=small", "iters=1", "eval.draws=3", "retrieval.backend=files", "llm.cache_mode=off"]


def test_convert_suite_offline_local_kill_mid_batch_and_rerun(tmp_path, capsys):
    suite, kernels = make_suite(tmp_path)
    lib = tmp_path / "lib"
    args = ["convert", str(suite), f"library={lib}", "workers=2", f"offline.kernels_dir={kernels}", *COMMON]
    killer = kill_when_running(lib, "vec_add", parent=False)
    assert main(args) == 0
    killer.join(1)
    out = capsys.readouterr().out
    # the ranked table comes before any work, largest share first
    table = out.index("fallbacks by time share")
    assert table < out.index("operator(s) to convert") < out.index("[1/3]")
    assert out.index("rms_norm_small", table) < out.index("vec_add ", table) < out.index("vec_add_huge", table)
    assert "60.00%" in out and "30.00%" in out and "10.00%" in out
    assert states(lib) == {"rms_norm_small": "pass", "vec_add": "failed", "vec_add_huge": "failed"}
    L = Library(lib)
    assert "crashed" in L.status("vec_add")["why"] and "signal 9" in L.status("vec_add")["why"]
    assert "ProblemError: vec_add_huge: meta.json has no small_shapes" in L.status("vec_add_huge")["why"]
    rms = L.op_dir("rms_norm_small")
    assert (rms / "kernel.py").read_text().startswith('"""\n---\nid: kernels/rms_norm_small/')
    res = json.loads((rms / "result.json").read_text())
    assert res["status"] == "pass" and [s["id"] for s in res["shapes"]] == ["s0", "s1"]
    prov = json.loads((rms / "provenance.json").read_text())
    assert prov["device"] == "cpu" and prov["model"] == "offline" and prov["torch"] and prov["triton"]
    assert prov["worker"].endswith("cuda=") and prov["cost_usd"] == 0.0
    assert (rms / "problem" / "reference.py").is_file()
    first_rms_run = prov["run_id"]

    # the re-run skips what is done and completes the killed operator
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "2 operator(s) to convert, 1 done before (skipped)" in out
    assert states(lib) == {"rms_norm_small": "pass", "vec_add": "pass", "vec_add_huge": "failed"}
    assert json.loads((rms / "provenance.json").read_text())["run_id"] == first_rms_run
    log = [json.loads(x) for x in (lib / "batch.jsonl").read_text().splitlines()]
    assert [r["name"] for r in log].count("rms_norm_small") == 1 and [r["name"] for r in log].count("vec_add") == 2

    md, png = write_report(lib)
    text = md.read_text()
    assert "No kernel in this library was timed" in text
    assert "| correctness only (no GPU timings) | 2 |" in text
    assert "| time share converted | 0.0% |" in text and png.stat().st_size > 5000


def test_convert_suite_scripted_llm_through_ray_retries_a_killed_worker(tmp_path, capsys, ray_cluster):
    suite, _ = make_suite(tmp_path)
    lib = tmp_path / "lib"
    script = tmp_path / "replies.json"

    def reply(src: str) -> str:
        return f"One program per block.\nTECHNIQUES: blocked\n```python\n{src}```\n"
    script.write_text(json.dumps({"rms_norm_small": [reply(GOOD_RMS)], "vec_add": [reply(HONEST_VEC_ADD)]}))
    args = ["convert", str(suite), f"library={lib}", "executor=ray", "retries=1", f"model=scripted:{script}",
            "ops=rms_norm_small,vec_add", *COMMON]
    killer = kill_when_running(lib, "rms_norm_small", parent=True)
    assert main(args) == 0
    killer.join(1)
    out = capsys.readouterr().out
    assert "executor: RayExecutor" in out
    assert states(lib) == {"rms_norm_small": "pass", "vec_add": "pass"}
    L = Library(lib)
    assert L.status("rms_norm_small")["attempts"] == 2 and L.status("vec_add")["attempts"] == 1
    for op, src in (("rms_norm_small", GOOD_RMS), ("vec_add", HONEST_VEC_ADD)):
        assert (L.op_dir(op) / "kernel.py").read_text() == src
        prov = json.loads((L.op_dir(op) / "provenance.json").read_text())
        assert prov["model"] == f"scripted:{script}" and prov["llm_calls"] == 1 and "child" in prov["worker"]
    assert main(args) == 0
    assert "0 operator(s) to convert, 2 done before (skipped)" in capsys.readouterr().out


# -- the library and the report's arithmetic, on recorded results -------------------------------------

def shape(sid, t, eager, comp, sol=0.5):
    return {"id": sid, "correct": True, "time_us": t, "eager_us": eager, "compile_us": comp, "sol_fraction": sol}


def job(name, best_shapes=None, *, ok=True, gpu="NVIDIA H200", error=None):
    if not ok:
        return JobResult(name, False, None, error or "boom", 3.0, "host/1/cuda=0", 1)
    best = None if best_shapes is None else {
        "candidate": "c0002", "source": f"# kernel for {name}\n", "objective": 0.5, "objective_kind": "sol",
        "result": {"status": "pass", "shapes": best_shapes, "env": {"gpu": gpu, "torch": "2.13", "triton": "3.6"}},
        "meta": {}, "techniques": []}
    summary = {"run_id": f"{name}-r", "run_dir": "/x", "device": "cuda", "model": "offline", "stop_kind": "budget",
               "reason": "iterations", "rounds": 4, "best": best, "usage": {"cost_usd": 0.25}, "shapes": ["a"]}
    return JobResult(name, True, summary, None, 10.0, "host/1/cuda=0", 1)


def test_report_coverage_share_and_saving_from_recorded_results(tmp_path):
    lib = Library(tmp_path / "lib")
    shares = {"fast": 0.4, "eager_only": 0.2, "beats_eager_not_compile": 0.15, "cpu_only": 0.1, "nothing": 0.08,
              "broken": 0.05, "untried": 0.02}
    lib.write_fallbacks([{"name": n, "share": s} for n, s in shares.items()], "test")
    lib.record("fast", job("fast", [shape("a", 10, 30, 20), shape("b", 30, 50, 40)]), tmp_path)  # 2x, 1.5x
    lib.record("eager_only", job("eager_only", [shape("a", 25, 100, None)]), tmp_path)           # 4x, no compile
    lib.record("beats_eager_not_compile", job("beats_eager_not_compile", [shape("a", 10, 12, 9)]), tmp_path)
    lib.record("cpu_only", job("cpu_only", [shape("s0", None, None, None, None)], gpu=None), tmp_path)
    lib.record("nothing", job("nothing", None), tmp_path)
    lib.record("broken", job("broken", ok=False, error="crashed: signal 9"), tmp_path)
    assert speedups({"shapes": [shape("a", 10, 30, 20), shape("b", 30, 50, 40)]})[:2] == (2.0, 1.5)
    rs = {r.name: r for r in rows(lib)}
    assert {n: r.verdict for n, r in rs.items()} == {
        "fast": "converted", "eager_only": "converted", "beats_eager_not_compile": "slower",
        "cpu_only": "correct_only", "nothing": "no_kernel", "broken": "failed", "untried": "not_attempted"}
    t = totals(list(rs.values()))
    assert t["converted"] == 2 and t["passing"] == 4 and t["correct_only"] == 1 and t["attempted"] == 6
    assert t["share_converted"] == pytest.approx(0.6)
    assert t["saving"] == pytest.approx(0.4 * (1 - 1 / 2.0) + 0.2 * (1 - 1 / 4.0))
    assert t["cost_usd"] == pytest.approx(0.25 * 5)
    md, png = write_report(lib.root)
    text = md.read_text()
    assert "| time share converted | 60.0% |" in text
    assert f"| estimated serving-time saving, sum share x (1 - 1/speedup) | {100 * t['saving']:.1f}% |" in text
    assert "No kernel in this library was timed" not in text and png.is_file()


def test_library_states_and_a_failed_rerun_drops_the_stale_kernel(tmp_path):
    lib = Library(tmp_path)
    assert lib.record("op1", job("op1", [shape("a", 1, 2, 2)]), tmp_path) == "pass"
    assert lib.is_done("op1") and (lib.op_dir("op1") / "kernel.py").is_file()
    assert lib.record("op1", job("op1", ok=False), tmp_path) == "failed"
    assert not lib.is_done("op1") and not (lib.op_dir("op1") / "kernel.py").exists()
    assert lib.record("op2", job("op2", None), tmp_path) == "no_kernel" and lib.is_done("op2")
    (lib.op_dir("op3")).mkdir(parents=True)  # a kill between the files and status.json: not done
    assert not lib.is_done("op3") and [e.name for e in lib.entries()] == ["op1", "op2"]
    with pytest.raises(ValueError):
        lib.op_dir("../escape")


def test_convert_cli_errors_are_one_line(tmp_path, capsys):
    assert main(["convert", str(tmp_path / "nowhere"), f"library={tmp_path / 'l'}"]) == 2
    assert "unknown source" in capsys.readouterr().err
    assert main(["convert", "report", str(tmp_path)]) == 2
    assert "not a kernel library" in capsys.readouterr().err
    assert main(["convert", "bench", f"library={tmp_path / 'l'}", "ops=no_such_op", "--dry-run"]) == 2
    assert "unknown operator(s): no_such_op" in capsys.readouterr().err
    assert main(["convert", "bench", f"library={tmp_path / 'l'}", "top=3", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "dry run: 3 operator(s) would be converted" in out and "fused_moe" in out


def test_convert_trace_source_ranks_groups_and_says_what_cannot_be_extracted(tmp_path, capsys):
    trace = FIX / "convert" / "llama_block_cpu_trace.json"
    lib = tmp_path / "lib"
    assert main(["convert", str(trace), f"library={lib}", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.index("causal_gq_attention") < out.index("rms_norm") < out.index("aten_add_in_decoder_block")
    assert "not extracted (8): a module group needs the model factory" in out
    assert "dry run: 1 operator(s) would be converted" in out
    rows = json.loads((lib / "fallbacks.json").read_text())["fallbacks"]
    assert rows[0]["name"] == "causal_gq_attention" and rows[0]["problem"] is None
    assert sum(r["share"] for r in rows) == pytest.approx(1.0, abs=0.01)


def test_llama_block_profiled_converted_and_patched_through_aka_convert(tmp_path, capsys):
    """The whole use on CPU at the small size: profile the block, extract its groups, convert three
    with the scripted LLM (replying the Llama kernels of tests/fixtures/convert), then patch the
    block with the library and check it against the original."""
    kernels = FIX / "convert" / "kernels"
    ops = ("rms_norm", "rotary_embedding", "silu_and_mul")
    script = tmp_path / "replies.json"
    script.write_text(json.dumps({op: [f"Plan.\nTECHNIQUES: rowwise\n```python\n{(kernels / f'{op}.py').read_text()}```\n"]
                                  for op in ops}))
    lib = tmp_path / "lib"
    factory = "examples.llama_block:factory"
    assert main(["convert", f"model:{factory}", f"library={lib}", "workers=2", f"model=scripted:{script}",
                 f"ops={','.join(ops)}", *COMMON]) == 0
    out = capsys.readouterr().out
    assert out.index("fallbacks by time share") < out.index("[1/3]")
    for name in ("causal_gq_attention", "rms_norm", "silu_and_mul", "aten_add_in_decoder_block"):
        assert name in out
    assert states(lib) == {op: "pass" for op in ops}
    assert (lib / "problems" / "rms_norm" / "reference.py").is_file()
    # a fresh process, as a user runs it: on CPU the kernels need the interpreter switched on before
    # triton is first imported, and this test process imported it long ago
    proc = subprocess.run([sys.executable, "-m", "aka.cli", "convert", "apply", factory, "--library", str(lib),
                           "--json", str(tmp_path / "patch.json")], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "check PASS" in proc.stdout
    patch = json.loads((tmp_path / "patch.json").read_text())
    assert patch["ok"] and {p["op"] for p in patch["patched"]} == set(ops)
    assert sum(patch["kernel_calls"].values()) >= 3
