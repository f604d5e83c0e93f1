"""No hollow arms: each arm's mechanism changes what the proposer sees (LLM: the prompt) or does
(offline: the candidate set or order), shown for both proposers; an arm that changes nothing is an
error. The LLM loop runs for real with codeless scripted replies, so nothing is evaluated."""
from __future__ import annotations

import pytest
import yaml

from aka.agent.base import RoundContext
from aka.agent.config import ConfigError, OptimizeConfig, merge, validate
from aka.agent.llm_proposer import LLMProposer
from aka.agent.loop import Optimizer
from aka.agent.objective import Score
from aka.agent.offline import OfflineProposer
from aka.agent.prompts import PromptRenderer
from aka.kb.retrieval import Signals
from aka.kb.entries import read_entry
from aka.kb.file_retriever import FileRetriever
from aka.agent.shapes import task_shapes
from aka.agent.store import Candidate, RunStore
from aka.exp.config import load_exp
from aka.exp.probe import HollowArm, check_arms, round1_view
from aka.llm.scripted import ScriptedLLM
from aka.evaluate.result import EvalResult
from aka.problem import REPO_ROOT, load_problem

KB = REPO_ROOT / "knowledge_base"
CODELESS = "I would try more warps next; no code this time."


def cfg_for(op: str, model: str = "offline", **layer) -> OptimizeConfig:
    c = OptimizeConfig()
    merge(c, {"op": op, "model": model, "shape": "small", "eval": {"device": "cpu"},
              "retrieval": {"backend": "files"}, **layer})
    validate(c)
    return c


def run_prompts(tmp_path, name: str, rounds: int, **layer) -> list[dict]:
    """The real loop over `rounds` rounds of codeless replies: what the LLM was sent each round."""
    cfg = cfg_for("rms_norm", "scripted", **{"budget": {"iterations": rounds}, "stop": {"stall_rounds": 100},
                                            **layer})
    problem = load_problem("rms_norm")
    task = task_shapes(problem, cfg.shape, "cpu", cfg.eval.cpu_max_elems)
    llm = ScriptedLLM([CODELESS] * rounds)
    prop = LLMProposer(llm, PromptRenderer(), cfg.llm, independent=not cfg.feedback)
    from aka.agent.cli import build_retriever
    opt = Optimizer(cfg, problem, task, prop, RunStore.create(tmp_path, name), retriever=build_retriever(cfg))
    out = opt.run()
    assert out.stop_kind == "budget" and len(llm.prompts) == rounds
    return llm.prompts


def test_llm_retrieval_off_full_and_leave_op_out_send_different_prompts():
    views = {r: round1_view(cfg_for("rms_norm", "scripted", retrieval={
        "enabled": r != "off", "exclude_op": r == "leave_op_out", "backend": "files"}))
        for r in ("off", "full", "leave_op_out")}
    assert len(set(views.values())) == 3
    own = [meta for meta, _ in (read_entry(p) for p in [KB / "ops" / "rms_norm.md"])][0]
    assert "rms_norm" in (own.get("ops") or [own.get("op")])
    assert own["title"] in views["full"] and own["title"] not in views["leave_op_out"]
    assert "## From the knowledge base" not in views["off"] or own["title"] not in views["off"]


def test_leave_op_out_withholds_every_entry_listing_the_op():
    problem = load_problem("rms_norm")
    full = FileRetriever(KB).retrieve(problem, Signals(), [], 50)
    held = FileRetriever(KB, exclude_op=True).retrieve(problem, Signals(), [], 50)
    listed = {str(m.get("id") or "") for m, _, _ in FileRetriever(KB).entries()
              if "rms_norm" in (m.get("ops") or []) + ([m["op"]] if m.get("op") else [])}
    assert {h.id for h in full} & listed, "the full arm retrieves the op's own entries"
    assert not {h.id for h in held} & listed and held, "leave-op-out keeps only category entries"


def test_llm_dropout_on_restarts_the_conversation_and_off_keeps_it(tmp_path):
    on = run_prompts(tmp_path, "on", 3, dropout={"enabled": True, "patience": 1, "p": 1.0})
    off = run_prompts(tmp_path, "off", 3, dropout={"enabled": False})
    assert on[0]["messages"] == off[0]["messages"]          # round 1 is the same task
    assert [len(p["messages"]) for p in off] == [1, 3, 5]   # the conversation grows
    assert len(on[1]["messages"]) == 1                      # dropout after round 1: fresh context
    assert "Where the search stands" in on[1]["messages"][0].content


def test_llm_best_of_n_sends_the_first_prompt_every_round(tmp_path):
    bon = run_prompts(tmp_path, "bon", 3, feedback=False, dropout={"enabled": False})
    fb = run_prompts(tmp_path, "fb", 3, dropout={"enabled": False})
    assert [len(p["messages"]) for p in bon] == [1, 1, 1]
    assert bon[0]["messages"][0].content == bon[1]["messages"][0].content == bon[2]["messages"][0].content
    assert [p["sample_index"] for p in bon] == [1, 2, 3]    # distinct samples of the one prompt
    assert bon[1]["messages"] != fb[1]["messages"] and CODELESS in fb[1]["messages"][1].content


def _offline_ctx(problem, task, history, parent=None, r=1):
    return RoundContext(r, problem, task, "cpu", parent, parent, history, [], Signals.from_result(None, {}, set()), [], [], [],
                        {})


def _points(props):
    return [(p.meta["offline"]["family"], tuple(sorted(p.meta["offline"]["params"].items()))) for p in props]


def test_offline_leave_op_out_searches_other_kernels_of_the_category():
    problem = load_problem("rms_norm")
    task = task_shapes(problem, "small", "cpu", 65536)
    full = OfflineProposer(problem)
    held = OfflineProposer(problem, exclude_op=True)
    assert full.how == "op" and held.how == "category"
    assert all("/rms_norm/" in f.id for f in full.families)
    assert held.families and not any("/rms_norm/" in f.id for f in held.families)
    assert _points(full.propose(_offline_ctx(problem, task, []), 4)) != \
        _points(held.propose(_offline_ctx(problem, task, []), 4))


def test_offline_retrieval_off_drops_the_recorded_order_on_a_gpu_and_is_hollow_on_the_cpu(tmp_path):
    # The GPU results in results/kb cover the op's full shape list, not the small one.
    on = round1_view(cfg_for("softmax", retrieval={"enabled": True}, shape="all"), "cuda")
    off = round1_view(cfg_for("softmax", retrieval={"enabled": False}, shape="all"), "cuda")
    from aka.agent.offline import recorded_objective
    problem = load_problem("softmax")
    ids = list(problem.shapes)
    weights = {i: s.weight for i, s in problem.shapes.items()}
    kernels = sorted((KB / "kernels" / "softmax").glob("*.py"))
    scored = {k.stem: recorded_objective(k, "softmax", "cuda", ids, weights) for k in kernels}
    best = max((k for k in scored if scored[k] is not None), key=lambda k: scored[k])
    assert on != off and on.splitlines()[0].startswith(f"kernels/softmax/{best}")  # the best measured
    assert round1_view(cfg_for("softmax", retrieval={"enabled": True}), "cpu") == \
        round1_view(cfg_for("softmax", retrieval={"enabled": False}), "cpu")
    cfg = tmp_path / "exp.yaml"
    cfg.write_text(yaml.safe_dump({"name": "x", "operators": ["softmax"], "seeds": [0], "budget": {"rounds": 4},
                                   "optimize": {"model": "offline", "shape": "all"},
                                   "arms": {"r_on": {"retrieval": "full"}, "r_off": {"retrieval": "off"}}}))
    ex = load_exp(cfg)
    with pytest.raises(HollowArm, match="retrieval changes nothing"):
        check_arms(ex, device="cpu", progress=lambda m: None)
    assert check_arms(ex, device="cuda", progress=lambda m: None)  # on the H200 the same arms differ


def _passing(cid: str, family: str, params: dict, value: float, r: int) -> Candidate:
    c = Candidate(cid, r, "src", "offline", meta={"offline": {"family": family, "params": params}})
    c.score = Score(value, "sol_fraction", {})
    c.result = EvalResult(status="pass", device="cuda")
    return c


def test_offline_dropout_moves_the_focus_to_another_family():
    problem = load_problem("softmax")
    task = task_shapes(problem, "small", "cpu", 65536)
    base = OfflineProposer(problem)
    fams = base.families
    hist = [_passing(f"c{i + 1:04d}", f.id, dict(f.defaults), 0.5 - 0.1 * i, 1) for i, f in enumerate(fams)]
    ctx = _offline_ctx(problem, task, hist, parent=hist[0], r=2)
    stay = _points(OfflineProposer(problem).propose(ctx, 3))
    moved = OfflineProposer(problem)
    moved.on_dropout(None)
    jump = _points(moved.propose(ctx, 3))
    assert {f for f, _ in stay} == {fams[0].id}    # moves around the incumbent's family
    assert jump != stay and jump[0][0] != fams[0].id


def test_offline_best_of_n_samples_the_grid_without_looking_at_results():
    problem = load_problem("softmax")
    task = task_shapes(problem, "small", "cpu", 65536)
    fb = OfflineProposer(problem)
    hist = [_passing("c0001", fb.families[0].id, dict(fb.families[0].defaults), 0.5, 1)]
    a = OfflineProposer(problem, independent=True, seed=3)
    r2_blank = _points(a.propose(_offline_ctx(problem, task, [], r=2), 2))
    r2_hist = _points(OfflineProposer(problem, independent=True, seed=3).propose(
        _offline_ctx(problem, task, hist, parent=hist[0], r=2), 2))
    assert r2_blank == r2_hist                                  # results do not steer it
    r1 = _points(a.propose(_offline_ctx(problem, task, [], r=1), 2))
    assert not set(r1) & set(r2_blank)                          # round 2 draws the next points
    assert r1 != _points(fb.propose(_offline_ctx(problem, task, []), 2))
    assert _points(OfflineProposer(problem, independent=True, seed=4).propose(
        _offline_ctx(problem, task, [], r=1), 2)) != r1        # the seed picks the sample


def _write(tmp_path, name, data) -> str:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data))
    return str(p)


def test_configs_compose_and_settings_that_change_nothing_are_errors(tmp_path):
    _write(tmp_path, "base.yaml", {"name": "b", "operators": ["rms_norm"], "seeds": [0, 1],
                                   "budget": {"rounds": 5}, "optimize": {"model": "offline", "shape": "small"},
                                   "factors": {"dropout": [True, False]}, "arms": {"bon": {"best_of_n": True}}})
    ex = load_exp(_write(tmp_path, "child.yaml", {"extends": "base.yaml", "name": "c", "seeds": [2],
                                                  "arms": {"bon": None, "p3": {"dropout": "on", "p": 0.3}}}))
    assert [a.name for a in ex.arms] == ["dropout=on", "dropout=off", "p3"] and ex.seeds == [2]
    assert len(ex.files) == 2 and ex.files[0].endswith("base.yaml")
    c = ex.optimize_config(ex.arm("p3"), "rms_norm", 2)
    assert c.dropout.enabled and c.dropout.p == 0.3 and c.budget.iterations == 5 and c.seed == 2
    for bad, msg in [({"arms": {"x": {"dropout": "off", "patience": 2}}}, "change nothing"),
                     ({"arms": {"same": {"dropout": True}}}, "resolve to the same config"),
                     ({"arms": {"x": {"retrieval": "some"}}}, "not one of"),
                     ({"arms": {"x": {"best_of_n": True, "dropout": True}}}, "best_of_n with dropout"),
                     ({"arms": {"x": {"colour": 1}}}, "unknown key"),
                     ({"optimize": {"op": "softmax"}}, "set per cell"),
                     ({"extends": "child2.yaml"}, "extends itself")]:
        with pytest.raises(ConfigError, match=msg):
            load_exp(_write(tmp_path, "child2.yaml", {"extends": "base.yaml", **bad}))
    short = load_exp(_write(tmp_path, "short.yaml", {"extends": "base.yaml", "budget": {"rounds": 3},
                                                     "arms": {"bon": None}}))
    with pytest.raises(HollowArm, match="never reached"):  # patience 3 in 3 rounds: no dropout ever
        check_arms(short, device="cpu", progress=lambda m: None)


def test_cli_errors_are_one_line_and_exit_2(tmp_path, capsys):
    from aka.cli import main
    assert main(["exp", "run", str(tmp_path / "missing.yaml")]) == 2
    assert main(["exp", "run", _write(tmp_path, "bad.yaml", {"name": "b", "operators": ["rms_norm"], "seeds": [0],
                                                            "budget": {"rounds": 2}, "arms": {"only": {}}})]) == 2
    assert main(["exp", "report", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(e.startswith("aka: error: ") for e in err)
    assert "not found" in err[0] and "at least two arms" in err[1] and "no table.csv" in err[2]


def test_seeds_draw_distinct_samples_through_the_response_cache(tmp_path):
    """Seeds are replicates only if they do not replay one cached completion: the seed offsets the
    sample index the cache keys on (seed 0 keeps the indices `aka optimize` always used)."""
    from aka.llm.cache import CachedLLM
    problem = load_problem("rms_norm")
    task = task_shapes(problem, "small", "cpu", 65536)
    inner = ScriptedLLM(["first sample", "second sample", "never needed"])
    cached = CachedLLM(inner, tmp_path / "cache")
    ctx = RoundContext(1, problem, task, "cpu", None, None, [], [], Signals.from_result(None, {}, set()), [], [], [], {})
    replies = {}
    for seed in (0, 1, 0):
        prop = LLMProposer(cached, PromptRenderer(), OptimizeConfig().llm, seed=seed)
        replies.setdefault(seed, []).append(prop.propose(ctx, 1)[0].reply)
    assert replies == {0: ["first sample", "first sample"], 1: ["second sample"]}
    assert cached.hits == 1 and inner.remaining == 1
    assert [p["sample_index"] for p in inner.prompts] == [1, 1_000_001]
