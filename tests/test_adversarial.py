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
from dataclasses import dataclass, field
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
    extra: dict = field(default_factory=dict, compare=False, hash=False)

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

# Gaps: what the harness misses today and why (see the report for the proposed fixes).
GAP_SELF_ALIAS = ("harness gap: static monkeypatch rule exempts any target rooted at a name 'self', "
                  "so self.T = torch.Tensor; self.T.detach = f patches torch; Tensor.detach is not guarded")
GAP_OPERATOR = ("harness gap: operator.attrgetter/methodcaller give attribute access by string, "
                "bypassing the builtin and dunder rules; the worker's compare module is not guarded")
GAP_TYPING = "harness gap: typing.get_type_hints evals string annotations (code in a string constant)"
GAP_HOOK = ("harness gap: ATen log is muted for the whole Triton launch, and pre-run hooks run "
            "inside it; on CPU nothing else looks for fallbacks")
GAP_BODY = "harness gap: interpreter runs kernel bodies as Python; calls to torch inside are muted"
GAP_SCALAR = ("harness gap: .item() reads and scalar fill_ writes are all glue ops, so a Python "
              "scalar fallback has no compute op to flag")
GAP_ORDER = ("harness gap: the interpreter runs programs in grid order, so a cross-program race "
             "is always won on CPU; no shuffled program order")

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
    # gaps: these pass today
    Case("race_program_order", "rms_norm", "incorrect", "[correctness]", gap=GAP_ORDER),
    Case("self_alias_monkeypatch", "vec_add", "rejected", "[monkeypatch]", gap=GAP_SELF_ALIAS),
    Case("operator_attrgetter_escape", "vec_add", "rejected", "[static]", gap=GAP_OPERATOR),
    Case("typing_forwardref_eval", "vec_add", "rejected", "[static]", gap=GAP_TYPING),
    Case("pre_run_hook_fallback", "rms_norm", "fallback", "[fallback]", gap=GAP_HOOK),
    Case("vendor_named_kernels", "matmul", "fallback", "[fallback]", gap=GAP_HOOK),
    Case("kernel_body_torch", "softmax_rows", "fallback", "[fallback]", gap=GAP_BODY),
    Case("python_scalar_fallback", "topk_ids", "fallback", "[fallback]", gap=GAP_SCALAR),
]

# GPU verdicts (the same files, plus the timing-stage cheats the CPU cascade has no stage for).
GAP_TIMING = ("harness gap: nothing checks outputs during or after timing, so a candidate can "
              "behave while checked and do nothing while timed")
GAP_VENDOR = ("harness gap: profiler accepts any kernel named <own kernel>_..., so jit functions "
              "named after cuBLAS prefixes make cuBLAS 'own'; the GEMM itself hides in a pre-run hook")


def G(name, problem, status, cause="", **kw):
    return Case(name, problem, status, cause, device="cuda", **kw)


GPU_CASES = [H(c.name, c.problem, device="cuda") for c in HONEST] + [
    G("race_program_order", "rms_norm", "incorrect", "[correctness]"),
    G("atomic_partial_sum", "rms_norm", "incorrect", "[correctness]"),
    G("illegal_memory_access", "vec_add", "crashed", "illegal memory access"),
    G("huge_allocation", "vec_add", "crashed", "out of memory"),
    G("decorative_kernel", "softmax_rows", "fallback", "[fallback]"),
    G("pre_run_hook_fallback", "rms_norm", "fallback", "kernel "),
    G("kernel_body_torch", "softmax_rows", "compile_error", "[first_call]"),
    G("side_stream", "vec_add", "rejected", "[stream]"),
    G("vendor_named_kernels", "matmul", "fallback", "[fallback]"),  # caught on the H200 (2026-11-30): cuBLAS kernels listed
    G("python_scalar_fallback", "topk_ids", "fallback", "[fallback]", gap=GAP_SCALAR),
    G("late_switch", "vec_add", "incorrect", "[timing]", timing=True, gap=GAP_TIMING),
    G("graph_capture_detect", "vec_add", "incorrect", "[timing]", timing=True, gap=GAP_TIMING),
]


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
@pytest.mark.xfail(strict=True, reason="harness gap: a worker killed by the sandbox (timeout, signal) "
                   "reports no stage: the last progress message is dropped")
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


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("case", _params(GPU_CASES))
def test_gpu_verdict(case, results):
    check(case, results.get(case))
