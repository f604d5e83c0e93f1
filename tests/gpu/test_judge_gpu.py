"""The trusted judge on a GPU: the CPU escape fixtures with the static check bypassed, a runner that
forges its sample times, and the honest control timed end to end through judge and runner
(CUDA IPC inputs, runner-side samples, the judge's baselines and checked call)."""
import pytest

from aka.evaluate.api import EvalConfig, _finish, build_spec
from aka.evaluate.sandbox import SandboxConfig, run_worker
from aka.evaluate.static import check_source
from aka.problem import load_problem
from tests.test_judge import ESC, EXPECTED, HERE, HONEST

PROBLEM = HERE / "fixtures" / "problems" / "vec_add"
FORGE = HERE / "fixtures" / "candidates" / "escapes_gpu" / "forge_samples.py"


def unchecked_gpu(path, timing=False, shapes="0,2"):
    prob = load_problem(PROBLEM)
    cfg = EvalConfig(device="cuda", seed=7, timing=timing, baselines=timing, fresh_baselines=timing,
                     sandbox=SandboxConfig(timeout_s=600, idle_timeout_s=300))
    src = path.read_text()
    rep = check_source(src, path.name)
    selected = prob.select(shapes)
    spec, files = build_spec(prob, selected, "cuda", cfg, candidate_name=str(path), model_class=rep.model_class,
                             kernels=rep.kernels)
    return _finish(run_worker(spec, src, files, cfg.sandbox), prob, selected)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_escape_fails_on_the_gpu_with_the_static_check_bypassed(name, record):
    res = unchecked_gpu(ESC / f"{name}.py")
    record("judge_escape", name=name, status=res.status, reason=res.reason[:300], runner=res.env.get("runner"))
    statuses, _ = EXPECTED[name]
    assert res.status != "pass", res.reason
    assert res.status in statuses | {"rejected"}, res.reason


def test_honest_candidate_timed_through_judge_and_runner(record):
    res = unchecked_gpu(HONEST, timing=True)
    record("judge_honest_timed", status=res.status, reason=res.reason[:300], runner=res.env.get("runner"),
           shapes=[{"id": s.id, "time_us": s.time_us, "eager_us": s.eager_us, "method": s.timing_method}
                   for s in res.shapes], wall=res.wall_s)
    assert res.status == "pass", res.reason
    assert all(s.time_us and s.eager_us for s in res.shapes)


def test_forged_samples_are_rejected_by_the_judges_clock(record):
    res = unchecked_gpu(FORGE, timing=True, shapes="2")
    record("judge_forged_samples", status=res.status, reason=res.reason[:400])
    assert res.status == "rejected", res.reason


@pytest.mark.parametrize("op,shape", [("silu_and_mul", "14"), ("gelu_and_mul", "12")])
def test_large_inputs_reach_the_runner_whole(op, shape, record):
    """The judge's input copies and NaN fills of ~0.9 GB finish before the runner reads or writes:
    on the H200 (2026-12-02) these two honest kernels were judged incorrect on their second draw
    at these shapes, the runner having read buffers the judge was still filling."""
    from aka.evaluate.api import evaluate
    from aka.problem import REPO_ROOT
    path = REPO_ROOT / "knowledge_base" / "kernels" / op / "grid2d.py"
    res = evaluate(op, path, shapes=shape, config=EvalConfig(device="cuda", seed=7, timing=False))
    record("judge_large_inputs", op=op, shape=shape, status=res.status, reason=res.reason[:300])
    assert res.status == "pass", res.reason


def test_a_second_candidates_runner_starts_with_the_judges_driver_module(tmp_path, monkeypatch, record):
    """After one evaluation the judge's own Triton cache holds Triton's driver module; the runner of
    the next, different candidate finds a copy in its own (fresh) cache instead of compiling it, and
    both candidates pass."""
    import hashlib
    from aka.evaluate.api import evaluate
    monkeypatch.setenv("AKA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    src = HONEST.read_text()
    walls, tails = [], []
    for k in (1, 2):
        path = tmp_path / f"honest{k}.py"
        path.write_text(src + f"\n# copy {k}: another source, so another runner cache\n")
        res = evaluate(PROBLEM, path, shapes="0", config=EvalConfig(device="cuda", seed=7, timing=False))
        assert res.status == "pass", res.reason
        walls.append(res.wall_s)
        tails.append(res.stderr_tail[-400:])
    judge_has = sorted((tmp_path / "cache" / "triton").glob("*/cuda_utils*"))
    h2 = hashlib.sha256((tmp_path / "honest2.py").read_bytes()).hexdigest()[:16]
    runner_has = sorted((tmp_path / "cache" / "runner-triton" / h2).glob("*/cuda_utils*"))
    record("judge_seeded_driver", judge=[p.name for p in judge_has], runner=[p.name for p in runner_has], walls=walls,
           judge_stderr=tails)
    assert judge_has and {p.parent.name for p in judge_has} & {p.parent.name for p in runner_has}
