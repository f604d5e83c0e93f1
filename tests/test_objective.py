"""One objective for the agent, `aka kb best`, the offline proposer and `aka bench`; bench rows
keep the figures the harness computed for a candidate's time."""
from __future__ import annotations

import json
import math

import pytest

from aka.agent.objective import score
from aka.bench.run import _rows
from aka.bench.score import op_scores
from aka.bench.suite import Suite
from aka.evaluate.result import EvalResult, ShapeResult
from aka.kb.best import summarize
from aka.objective import fraction, impossible, objective
from aka.problem import load_problem
from aka.roofline import IMPOSSIBLE_MARGIN

# odd values and weights: shape id -> (sol_us, time_us, weight)
SHAPES = {"0": (3.1, 17.3, 0.125), "4": (41.0, 52.9, 2.5), "7": (0.37, 6.1, 1.0)}


def _result(status="pass"):
    shapes = [ShapeResult(i, f"n={i}", correct=True, sol_us=sol, time_us=t, sol_fraction=sol / t, eager_us=2.5 * t,
                          compile_us=1.5 * t, speedup_eager=2.5, speedup_compile=1.5)
              for i, (sol, t, _) in SHAPES.items()]
    return EvalResult(status=status, reason="", problem="rms_norm", device="cuda", shapes=shapes)


def test_objective_is_the_weighted_geomean_and_none_when_a_shape_is_not_scored():
    vals, w = [0.5, 0.125, 0.9], [1.0, 3.0, 0.5]
    want = math.exp(sum(wi * math.log(v) for v, wi in zip(vals, w)) / sum(w))
    assert objective(vals, w) == pytest.approx(want)
    assert objective([0.5, None], [1, 1]) is None and objective([0.5, 0.0], [1, 1]) is None
    assert objective([], []) is None
    with pytest.raises(ValueError):
        objective([0.5], [1.0, 2.0])


def test_agent_kb_best_and_bench_score_one_kernel_the_same():
    weights = {i: w for i, (_, _, w) in SHAPES.items()}
    want = objective([sol / t for sol, t, _ in SHAPES.values()], list(weights.values()))
    agent = score(_result(), weights, "cuda")
    assert agent.kind == "sol_fraction" and agent.value == pytest.approx(want)
    kb = summarize([{"id": i, "sol_fraction": sol / t, "sol_us": sol, "compile_us": 1.5 * t, "eager_us": 2.5 * t}
                    for i, (sol, t, _) in SHAPES.items()], weights)
    assert kb["objective"] == pytest.approx(want)
    assert kb["compile"] == pytest.approx(want / 1.5) and kb["eager"] == pytest.approx(want / 2.5)
    rows = [{"op": "rms_norm", "correct": True, "sol_fraction": sol / t, "shape_weight": w}
            for sol, t, w in SHAPES.values()]
    assert op_scores(rows)["rms_norm"]["score"] == pytest.approx(want)


def test_bench_rows_keep_the_harness_figures_and_score_baselines_with_its_margin():
    prob = load_problem("rms_norm")
    suite = Suite("test", prob.root.parent, [prob], {"rms_norm": 1.0}, "test")
    res = _result()
    res.shapes[0].impossible = True            # the harness's verdict stands, whatever the numbers say
    res.shapes[1].sol_fraction = 0.6127        # as the harness computed it (its own rounding)
    cand = _rows(res, "cand", prob, suite)
    assert cand[0]["impossible"] and cand[1]["sol_fraction"] == 0.6127
    assert [r["speedup_compile"] for r in cand] == [1.5, 1.5, 1.5]
    eager = _rows(res, "reference", prob, suite, which="reference")
    assert eager[2]["sol_fraction"] == pytest.approx(0.37 / (2.5 * 6.1)) and eager[2]["speedup_eager"] == 1.0
    assert not any(r["impossible"] for r in eager)
    json.dumps(cand + eager)  # records stay plain JSON
    sol = 10.0
    assert impossible(sol, sol * (1 - IMPOSSIBLE_MARGIN) * 0.999) and not impossible(sol, sol * (1 - IMPOSSIBLE_MARGIN))
    assert fraction(sol, 40.0) == 0.25 and fraction(None, 40.0) is None and not impossible(sol, None)
