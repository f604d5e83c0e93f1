"""Adversarial candidates against the evaluation cascade.

Every cheat in tests/fixtures/candidates/cheats/ must get its status from the stage meant to catch
it, and every honest candidate must pass. A cheat the harness lets through today is an xfail(strict)
case naming the gap, so the fix turns it into an XPASS that fails the run until the mark goes.

Each evaluation starts a worker process (1.5-4 s on the 2-core CI machine), so the first test that
asks for a result submits every collected case to a small thread pool; later tests only wait.
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import torch

from aka.evaluate.api import EvalConfig, evaluate
from aka.evaluate.sandbox import SandboxConfig

HERE = Path(__file__).resolve().parent
PROBLEMS = HERE / "fixtures" / "problems"
CANDS = HERE / "fixtures" / "candidates"
SEED = 20261130
HAS_GPU = torch.cuda.is_available()


@dataclass(frozen=True)
class Case:
    name: str                  # candidate file stem (cheats/ or honest/)
    problem: str               # directory or file under fixtures/problems
    status: str                # expected status
    cause: str = ""            # text the reason must contain (stage tag or cause)
    failing: tuple = ()        # shape ids whose failed_stage must be set (others must not be)
    honest: bool = False
    device: str = "cpu"
    timeout_s: float = 900.0
    idle_s: float = 180.0
    timing: bool = False
    gap: str = ""              # non-empty: the harness lets it through today (xfail strict)

    @property
    def path(self) -> Path:
        return CANDS / ("honest" if self.honest else "cheats") / f"{self.name}.py"

    @property
    def key(self) -> tuple:
        return (self.name, self.problem, self.device, self.timeout_s, self.idle_s, self.timing)

    def run(self):
        cfg = EvalConfig(device=self.device, seed=SEED, draws=3, timing=self.timing, baselines=False,
                         sandbox=SandboxConfig(timeout_s=self.timeout_s, idle_timeout_s=self.idle_s))
        return evaluate(PROBLEMS / self.problem, self.path, config=cfg)


def H(name, problem, device="cpu"):
    return Case(name, problem, "pass", "all stages passed", honest=True, device=device)


HONEST = [H("rms_norm", "rms_norm"), H("vec_add", "vec_add"), H("softmax_rows", "softmax_rows"),
          H("matmul", "matmul"), H("topk_ids", "topk_ids"),
          H("atrex_fused_add_rms_norm", "atrex_fused_add_rms_norm"),
          H("kb_linear_relu", "kb_linear_relu.py"), H("kb_linear_relu_reordered", "kb_linear_relu.py")]


CHEATS = [
    Case("cached_output", "rms_norm", "incorrect", "[correctness]", ("0", "1", "2")),
    Case("unwritten_output", "vec_add", "incorrect", "[correctness]", ("0", "1", "2")),
    Case("constant_output", "softmax_rows", "incorrect", "[correctness]", ("0", "1", "2")),
    Case("torch_fallback_no_kernel", "rms_norm", "rejected", "[no-kernel]"),
    Case("decorative_kernel", "softmax_rows", "fallback", "aten::_softmax", ("0", "1", "2")),
    Case("partial_fallback_odd", "vec_add", "fallback", "aten::add", ("0", "2")),
    Case("masked_tail_dropped", "vec_add", "incorrect", "[correctness]", ("0", "2")),
    Case("dtype_cast_glue", "rms_norm", "fallback", "(dtype conversion)", ("0", "1", "2")),
    Case("atomic_partial_sum", "rms_norm", "incorrect", "[correctness]", ("1", "2")),
    Case("side_stream", "vec_add", "rejected", "[stream]"),
    Case("timer_patch", "vec_add", "rejected", "[monkeypatch] assignment to torch.cuda.Event.elapsed_time"),
    Case("monkeypatch_torch", "vec_add", "rejected", "[monkeypatch] assignment to torch.allclose"),
    Case("infinite_loop_forward", "vec_add", "timeout", "no progress for 8 s", idle_s=8, timeout_s=120),
    Case("infinite_loop_kernel", "vec_add", "timeout", "timed out after 10 s", timeout_s=10, idle_s=120),
    Case("illegal_memory_access", "vec_add", "crashed", "SIGSEGV"),
    Case("huge_allocation", "vec_add", "crashed", "[first_call] out of memory", ("0",)),
    Case("read_reference", "rms_norm", "rejected", "[import] import reference"),
    Case("os_subprocess", "vec_add", "rejected", "[import] import os"),
    Case("outlier_fragile", "rms_norm", "incorrect", "[outliers]"),
    Case("rng_seed", "vec_add", "rejected", "[rng] .manual_seed"),
    Case("inplace_input", "vec_add", "incorrect", "candidate modified its input 'a'", ("0", "1", "2")),
    Case("exec_getattr_import", "vec_add", "rejected", "[builtin] exec"),
    Case("input_view_identity", "rms_norm", "incorrect", "[correctness]", ("0", "1", "2")),
    Case("single_program_grid", "vec_add", "incorrect", "[correctness]", ("2",)),
    # closed gaps (each passed the harness once; see the commit that closed it)
    Case("race_program_order", "rms_norm", "incorrect", "[correctness]"),  # shuffled program order
    Case("self_alias_monkeypatch", "vec_add", "rejected", "[monkeypatch] assignment to self.T.detach"),
    Case("operator_attrgetter_escape", "vec_add", "rejected", "[import] import operator"),
    Case("typing_forwardref_eval", "vec_add", "rejected", "[string-dunder]"),
    Case("pre_run_hook_fallback", "rms_norm", "rejected", "[launch-hook]"),
    Case("vendor_named_kernels", "matmul", "rejected", "[launch-hook]"),
    Case("kernel_body_torch", "softmax_rows", "rejected", "[kernel-call]"),
    Case("python_scalar_fallback", "topk_ids", "fallback", "host scalar reads"),
]

# GPU verdicts (the same files, plus the timing-stage cheats the CPU cascade has no stage for).


def G(name, problem, status, cause="", **kw):
    return Case(name, problem, status, cause, device="cuda", **kw)


GPU_CASES = [H(c.name, c.problem, device="cuda") for c in HONEST] + [
    G("race_program_order", "rms_norm", "incorrect", "[correctness]"),
    G("atomic_partial_sum", "rms_norm", "incorrect", "[correctness]"),
    G("illegal_memory_access", "vec_add", "crashed", "illegal memory access"),
    G("huge_allocation", "vec_add", "crashed", "out of memory"),
    G("decorative_kernel", "softmax_rows", "fallback", "[fallback]"),
    G("pre_run_hook_fallback", "rms_norm", "rejected", "[launch-hook]"),
    G("kernel_body_torch", "softmax_rows", "rejected", "[kernel-call]"),
    G("side_stream", "vec_add", "rejected", "[stream]"),
    G("vendor_named_kernels", "matmul", "rejected", "[launch-hook]"),  # was caught as fallback on the H200 too
    G("python_scalar_fallback", "topk_ids", "fallback", "host scalar reads"),
    # closed by the lead's timed-output check (commit 23aaacb); not re-run on a GPU from here
    G("late_switch", "vec_add", "incorrect", "[timing]", timing=True),
    G("graph_capture_detect", "vec_add", "incorrect", "[timing]", timing=True),
]
# ... and every other cheat of the CPU suite, on the GPU with the same expected verdict: the full
# suite runs on the device. A GPU worker takes ~9 s to start, so the loop cases get limits that
# only the loop itself can exhaust.
_GPU_LIMITS = {"infinite_loop_forward": dict(idle_s=40, timeout_s=300, cause="no progress for 40 s"),
               "infinite_loop_kernel": dict(timeout_s=60, idle_s=300, cause="timed out after 60 s")}
GPU_CASES += [replace(c, device="cuda", **_GPU_LIMITS.get(c.name, {}))
              for c in CHEATS if c.name not in {g.name for g in GPU_CASES}]


class Results:
    """Evaluations shared by all tests of a session, run a few at a time in worker threads."""

    def __init__(self, items):
        self._futures, self._lock = {}, threading.Lock()
        self._pools = {"cpu": ThreadPoolExecutor(2), "cuda": ThreadPoolExecutor(4)}
        for it in items:  # prefetch every collected case, in collection order
            for v in getattr(getattr(it, "callspec", None), "params", {}).values():
                if isinstance(v, Case):
                    self._submit(v)

    def _submit(self, case: Case):
        with self._lock:
            if case.key not in self._futures:
                self._futures[case.key] = self._pools["cuda" if case.device != "cpu" else "cpu"].submit(case.run)
            return self._futures[case.key]

    def get(self, case: Case):
        return self._submit(case).result()

    def close(self):
        for p in self._pools.values():
            p.shutdown(wait=False, cancel_futures=True)


@pytest.fixture(scope="session")
def results(request):
    items = [it for it in request.session.items if it.module.__name__ == __name__
             and (HAS_GPU or "gpu" not in it.keywords)]
    r = Results(items)
    yield r
    r.close()


def _params(cases):
    out = []
    for c in cases:
        marks = [pytest.mark.xfail(strict=True, reason=c.gap)] if c.gap else []
        out.append(pytest.param(c, id=c.name, marks=marks))
    return out


def check(case: Case, res) -> None:
    where = f"{case.name} on {case.problem} ({case.device})"
    print(f"VERDICT {case.device} {case.name}: {res.status} :: {res.reason[:400]}")
    assert res.status == case.status, f"{where}: got {res.status}: {res.reason}"
    assert case.cause in res.reason, f"{where}: reason does not name {case.cause!r}: {res.reason}"
    if case.failing:
        failed = {s.id for s in res.shapes if s.failed_stage}
        assert failed == set(case.failing), f"{where}: failing shapes {sorted(failed)}: {res.reason}"


@pytest.mark.parametrize("case", _params(HONEST))
def test_honest_candidate_passes(case, results):
    res = results.get(case)
    check(case, res)
    assert all(s.correct for s in res.shapes) and all(s.draws >= 3 for s in res.shapes)
    assert res.stages_run == ["static", "import", "first_call", "correctness", "outliers", "fallback"]
    for s in res.shapes:  # the ATen log saw only glue and every call launched an own kernel
        assert s.kernels and not s.fallback_ops, (s.id, s.kernels, s.fallback_ops)


@pytest.mark.parametrize("case", _params(CHEATS))
def test_cheat_is_caught(case, results):
    check(case, results.get(case))


def test_cheat_files_are_all_exercised_and_documented():
    names = {c.name for c in CHEATS} | {c.name for c in GPU_CASES if not c.honest}
    files = {p.stem for p in (CANDS / "cheats").glob("*.py")}
    assert files == names
    caught = [c for c in CHEATS if not c.gap]
    assert len(caught) >= 18 and len({c.name for c in CHEATS}) == len(CHEATS)
    for p in (CANDS / "cheats").glob("*.py"):
        doc = p.read_text().split('"""')[1]
        assert "Expected" in doc, p.name


@pytest.mark.parametrize("name", ["infinite_loop_forward", "illegal_memory_access"])
def test_killed_worker_names_the_stage(name, results):
    case = next(c for c in CHEATS if c.name == name)
    res = results.get(case)
    assert res.status in ("timeout", "crashed")
    assert "first_call" in res.reason and any(s.failed_stage == "first_call" for s in res.shapes)


def test_kernelbench_weights_are_copied_from_the_reference(results):
    """The reordered candidate's own init differs from the reference; it passes only through the copy."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("kb_ref", PROBLEMS / "kb_linear_relu.py")
    kb = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kb)
    torch.manual_seed(0)
    ref_w = kb.Model(*kb.get_init_inputs()).linear.weight.detach().clone()
    torch.manual_seed(0)
    torch.nn.Linear(7, 5)
    own_w = torch.nn.Linear(*kb.get_init_inputs()).weight.detach()
    assert not torch.equal(ref_w, own_w)
    res = results.get(next(c for c in HONEST if c.name == "kb_linear_relu_reordered"))
    assert res.status == "pass", res.reason


@pytest.mark.parametrize("name", ["nvjet_tst_64x8_64x16_4x1_v_bz_TNN", "sm90_xmma_gemm_f32f32_f32f32_f32_tn_n",
                                  "cutlass_80_simt_sgemm_128x32_8x5_nn_align1", "ampere_sgemm_32x32_sliced1x4_nn"])
def test_vendor_kernel_names_are_not_taken_for_own_kernels(name):
    """The profiler-side half of vendor_named_kernels, checked without a GPU: vendor kernel names of
    these shapes must stay foreign even when the candidate defines jit functions named like their
    prefixes. (The fixture's tiny fp32 GEMMs got differently named cuBLAS kernels on the H200, so
    the end-to-end GPU case is caught; which shapes get kernels named like these was not measured.)"""
    from aka.evaluate.guards import classify_gpu_kernel
    own = {"matmul_kernel", "nvjet", "sm90", "cutlass", "ampere"}
    assert classify_gpu_kernel("matmul_kernel", own) == "own"
    assert classify_gpu_kernel(name, own) == "foreign"


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("case", _params(GPU_CASES))
def test_gpu_verdict(case, results):
    check(case, results.get(case))
