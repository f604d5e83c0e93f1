"""Units of aka.agent: reply parsing, prompts, dropout, objective, AKA_PARAMS, shapes, config,
run store and resume state. Nothing here starts an evaluation worker."""
from __future__ import annotations

import json
import math
import random

import jinja2
import pytest
import yaml

from aka.agent import dropout as drop
from aka.agent.cli import choose_proposer_spec
from aka.agent.config import ConfigError, DropoutConfig, OptimizeConfig, load_config, set_path
from aka.agent.edits import parse_reply, techniques_of
from aka.agent.llm_proposer import LLMProposer
from aka.agent.objective import Score, acceptable, better, confirmed, score
from aka.agent.offline import OfflineProposer, guidance, load_families, read_params, set_params
from aka.agent.prompts import PromptRenderer, hardware_context, task_context
from aka.kb.entries import split_front_matter
from aka.kb.file_retriever import FileRetriever
from aka.kb.retrieval import Signals
from aka.agent.shapes import task_shapes, match_shapes
from aka.agent.state import State, make_budget
from aka.agent.store import Candidate, RunStore, StoreError
from aka.evaluate.result import EvalResult, ShapeResult
from aka.llm import ScriptedLLM
from aka.problem import REPO_ROOT, ProblemError, load_problem

FIX = REPO_ROOT / "tests" / "fixtures" / "agent"
OP = FIX / "rms_norm_small"
KERNELS = FIX / "kernels"
GOOD = (FIX / "candidates" / "good.py").read_text()


def fence(src: str, tag: str = "python") -> str:
    return f"```{tag}\n{src}```\n"


# -- reply parsing ------------------------------------------------------------------------------

def test_whole_file_reply_picks_the_block_defining_modelnew():
    reply = ("Plan: one program per row.\nTECHNIQUES: one-pass-reduction, Row In Registers\n"
             + fence("x = 1\n") + "and the kernel:\n" + fence(GOOD))
    p = parse_reply(reply, parent=None)
    assert p.ok and p.kind == "whole" and p.source == GOOD
    assert p.techniques == ["one-pass-reduction", "row-in-registers"]


def test_search_replace_edits_apply_in_order_and_forgive_trailing_spaces():
    reply = ("TECHNIQUES: fewer-warps\n<<<<<<< SEARCH\n        y = torch.empty_like(x)   \n=======\n"
             "        y = torch.empty_like(x)  # out\n>>>>>>> REPLACE\n"
             "<<<<<<< SEARCH\n    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / H + eps)\n=======\n"
             "    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / H + eps)\n>>>>>>> REPLACE\n")
    p = parse_reply(reply, parent=GOOD)
    assert p.ok and p.kind == "edit" and p.n_edits == 2
    assert "y = torch.empty_like(x)  # out" in p.source and "tl.rsqrt(" in p.source
    assert p.source.count("\n") == GOOD.count("\n")


def test_search_text_missing_or_ambiguous_is_a_clear_error():
    missing = "<<<<<<< SEARCH\n    not in the parent\n=======\n    x\n>>>>>>> REPLACE\n"
    p = parse_reply(missing, parent=GOOD)
    assert not p.ok and "not found" in p.error
    twice = "<<<<<<< SEARCH\nimport triton\n=======\nimport triton  # again\n>>>>>>> REPLACE\n"
    assert "occurs 2 times" in parse_reply(twice, parent=GOOD + "import triton\n").error
    assert "no parent" in parse_reply(missing, parent=None).error


def test_malformed_and_codeless_replies_fail_before_anything_runs():
    assert "malformed SEARCH/REPLACE" in parse_reply("<<<<<<< SEARCH\nx = 1\n>>>>>>> REPLACE\n", GOOD).error
    p = parse_reply("I think the kernel should use more warps.", parent=GOOD)
    assert p.kind is None and "no code" in p.error
    p = parse_reply(fence("class ModelNew(:\n    pass\n"), parent=None)
    assert "does not parse" in p.error and "line 1" in p.error
    p = parse_reply(fence("class Model:\n    pass\n"), parent=None)
    assert "no class ModelNew" in p.error
    p = parse_reply("```python\nclass ModelNew:\n", parent=None, truncated=True)
    assert "cut off at max_tokens" in p.error


def test_techniques_inside_code_are_ignored():
    assert techniques_of(fence("# TECHNIQUES: hidden\n") + "Techniques: tiling; Split-K.") == ["tiling", "split-k"]


# -- prompts ------------------------------------------------------------------------------------

def _round_vars(problem, task):
    r = PromptRenderer()
    return r, dict(first=True, summary=None, last=[], failure="", parent=None, signals=Signals.from_result(None, {}, set()),
                   hits=[], tried=[], techniques=[], ask="Write it.", task=task_context(problem, task, task.note, "cpu"),
                   hw=hardware_context("cpu", "H200 SXM 141GB"))


def test_round_prompt_renders_the_task_and_fails_on_a_missing_variable():
    problem = load_problem(OP)
    task = task_shapes(problem, "a,b", "cpu", 65536)
    r, v = _round_vars(problem, task)
    text = r.render("round.j2", **v)
    assert problem.reference_path.read_text().strip() in text
    assert "| a | num_tokens=5,hidden=72 |" in text and "| 2.0 |" in text  # shape a carries weight 2
    assert "132 SMs" in text and "4.8 TB/s" in text  # H200 datasheet figures from aka.hardware
    assert "monkeypatch" in text  # the static rules are spelled out
    del v["tried"]
    with pytest.raises(jinja2.UndefinedError, match="tried"):
        r.render("round.j2", **v)
    with pytest.raises(jinja2.UndefinedError):
        r.render("summary.j2")


def test_llm_proposer_keeps_a_bounded_conversation_and_restarts_fresh_after_dropout(tmp_path):
    problem = load_problem(OP)
    task = task_shapes(problem, "a", "cpu", 65536)
    replies = [fence(GOOD)] * 4 + ["no code here"]
    llm = ScriptedLLM(replies)
    cfg = OptimizeConfig().llm
    cfg.history_rounds = 1
    prop = LLMProposer(llm, PromptRenderer(), cfg)
    st = State()
    for r in range(1, 5):
        ctx = _ctx(problem, task, st, r)
        (p,) = prop.propose(ctx, 1)
        assert p.source == GOOD and p.kind == "whole"
        st.history.append(Candidate(f"c{r:04d}", r, p.source, p.kind, techniques=p.techniques))
        st.round = r
    sent = [len(call["messages"]) for call in llm.prompts]
    assert sent == [1, 3, 5, 5]  # task + first reply + 1 exchange + the new message, at most
    assert "# Task:" in llm.prompts[0]["messages"][0].content
    assert "# Task:" not in llm.prompts[1]["messages"][-1].content
    prop.on_dropout(drop.DropoutDecision(round=4, fresh_context=True))
    (p,) = prop.propose(_ctx(problem, task, st, 5), 1)
    assert len(llm.prompts[-1]["messages"]) == 1 and "Where the search stands" in llm.prompts[-1]["messages"][0].content
    assert p.source is None and "no code" in p.error


def test_llm_proposer_samples_n_replies_and_keeps_a_budget_stop_from_losing_them():
    from aka.llm import Budget, BudgetedLLM
    problem = load_problem(OP)
    task = task_shapes(problem, "a", "cpu", 65536)
    llm = ScriptedLLM(["no code", fence(GOOD), fence(GOOD)])
    prop = LLMProposer(BudgetedLLM(llm, Budget(max_calls=2)), PromptRenderer(), OptimizeConfig().llm)
    out = prop.propose(_ctx(problem, task, State(), 1), 3)
    assert [p.source is not None for p in out] == [False, True]  # the third call hit max_calls=2
    assert [c["sample_index"] for c in llm.prompts] == [3, 4]
    assert prop.messages[-1].content == fence(GOOD)  # the conversation goes on from the usable reply


def test_kb_hits_are_sent_once_while_the_conversation_still_holds_them():
    from aka.kb.retrieval import Hit
    problem = load_problem(OP)
    task = task_shapes(problem, "a", "cpu", 65536)
    llm = ScriptedLLM([fence(GOOD)] * 4)
    cfg = OptimizeConfig().llm
    cfg.history_rounds = 1
    prop = LLMProposer(llm, PromptRenderer(), cfg)
    hit = {k: Hit(f"ops/{k}", f"Note {k}", f"text of {k}", "ops") for k in "ABCD"}
    shown = []
    for r, ids in enumerate(["AB", "AC", "CD", "C"], 1):
        ctx = _ctx(problem, task, State(), r)
        ctx.hits = [hit[k] for k in ids]
        prop.propose(ctx, 1)
        text = llm.prompts[-1]["messages"][-1].content
        shown.append("".join(k for k in "ABCD" if f"text of {k}" in text))
    # Round 4: C came in round 2's message, which history_rounds=1 has trimmed away by then.
    assert shown == ["AB", "C", "D", "C"]


def _ctx(problem, task, st: State, r: int):
    from aka.agent.base import RoundContext
    return RoundContext(r, problem, task, "cpu", None, None, list(st.history), [], Signals.from_result(None, {}, set()), [],
                        st.techniques(), st.tried_lines(), st.summary())


# -- dropout ------------------------------------------------------------------------------------

def test_dropout_draws_are_reproducible_and_respect_the_switches():
    cfg = DropoutConfig(p=0.5, restart_parent=True, restart_top_k=2)
    techs, hints = ["tiling", "split-k", "vectorize", "tiling", "swizzle", "persistent"], ["ops/a", "ops/b", "patterns/c"]
    passing = [("c0001", 0.4), ("c0002", 0.7), ("c0003", 0.9), ("c0004", 0.6)]
    a = drop.decide(cfg, random.Random(7), 5, techs, hints, passing, incumbent="c0003")
    b = drop.decide(cfg, random.Random(7), 5, list(reversed(techs)), list(reversed(hints)), passing[::-1], "c0003")
    assert a == b
    assert a.restart_parent in ("c0002", "c0004")  # best two that are not the incumbent
    seen = {drop.decide(cfg, random.Random(s), 5, techs, hints, passing, "c0003").restart_parent for s in range(40)}
    assert seen == {"c0002", "c0004"}
    none = drop.decide(DropoutConfig(p=0.0), random.Random(1), 5, techs, hints, passing, "c0003")
    assert none.dropped_techniques == [] and none.dropped_hints == [] and none.restart_parent is None
    every = drop.decide(DropoutConfig(p=1.0, drop_hints=False), random.Random(1), 5, techs, hints, passing, None)
    assert every.dropped_techniques == sorted(set(techs)) and every.dropped_hints == []


def test_dropout_is_due_after_patience_and_spaced_by_it():
    cfg = DropoutConfig(patience=3)
    assert not drop.due(cfg, 2, None) and drop.due(cfg, 3, None)
    assert not drop.due(cfg, 5, 2) and drop.due(cfg, 6, 3)
    assert not drop.due(DropoutConfig(enabled=False, patience=1), 9, None)


# -- objective ----------------------------------------------------------------------------------

def _res(status="pass", **per_shape) -> EvalResult:
    shapes = [ShapeResult(id=k, correct=v.get("correct", True), sol_fraction=v.get("sol"),
                          speedup_eager=v.get("sp"), impossible=v.get("impossible", False))
              for k, v in per_shape.items()]
    return EvalResult(status=status, shapes=shapes)


def test_objective_is_the_weighted_geomean_of_sol_fraction():
    res = _res(a={"sol": 0.31}, b={"sol": 0.77}, c={"sol": 0.05})
    w = {"a": 2.0, "b": 1.0, "c": 0.5}
    s = score(res, w, "cuda")
    expect = math.exp((2.0 * math.log(0.31) + math.log(0.77) + 0.5 * math.log(0.05)) / 3.5)
    assert s.kind == "sol_fraction" and s.value == pytest.approx(expect, rel=1e-12)
    no_sol = score(_res(a={"sp": 1.3}, b={"sp": 0.9}), {"a": 1.0, "b": 1.0}, "cuda")
    assert no_sol.kind == "speedup_eager" and no_sol.value == pytest.approx(math.sqrt(1.3 * 0.9))
    assert score(_res("incorrect", a={"sol": 0.5}), {"a": 1.0}, "cuda").value is None


def test_cpu_objective_is_the_weighted_pass_rate():
    res = _res("incorrect", a={"correct": True}, b={"correct": False}, c={"correct": True})
    s = score(res, {"a": 2.0, "b": 1.0, "c": 1.0}, "cpu")
    assert s.kind == "pass_rate" and s.value == pytest.approx(3.0 / 4.0)


def test_only_an_honest_pass_is_acceptable_and_better_needs_the_same_kind():
    assert acceptable(_res(a={"sol": 0.5}))[0]
    assert not acceptable(_res("fallback", a={"sol": 0.5}))[0]
    assert "impossible" in acceptable(_res(a={"sol": 1.4, "impossible": True}))[1]
    assert better(Score(0.52, "sol_fraction"), Score(0.5, "sol_fraction"))
    assert not better(Score(0.505, "sol_fraction"), Score(0.5, "sol_fraction"), min_rel_gain=0.02)
    assert not better(Score(0.9, "speedup_eager"), Score(0.5, "sol_fraction"))
    assert better(Score(1.0, "pass_rate"), None) and not better(Score(1.0, "pass_rate"), Score(1.0, "pass_rate"))


def test_confirmation_needs_a_gain_beyond_noise():
    assert confirmed([0.61, 0.62, 0.615], [0.50, 0.51, 0.505], 0.02)
    assert not confirmed([0.61, 0.50, 0.615], [0.50, 0.51, 0.505], 0.02)  # overlapping samples
    assert not confirmed([0.511, 0.512, 0.513], [0.50, 0.505, 0.509], 0.02)  # separated but under 2%


# -- AKA_PARAMS and the offline proposer ---------------------------------------------------------

def test_aka_params_line_is_rewritten_and_read_back():
    src = (KERNELS / "rms_norm_small" / "rowwise.py").read_text()
    assert read_params(src) == {"ROWS_PER_PROG": 1, "num_warps": 4}
    out = set_params(src, {"ROWS_PER_PROG": 4, "num_warps": 2})
    assert read_params(out) == {"ROWS_PER_PROG": 4, "num_warps": 2}
    changed = [(a, b) for a, b in zip(src.splitlines(), out.splitlines()) if a != b]
    assert len(changed) == 1 and changed[0][1].startswith("AKA_PARAMS = {'ROWS_PER_PROG': 4")
    assert len(src.splitlines()) == len(out.splitlines())
    with pytest.raises(ValueError, match="found 2"):
        set_params(src + "\nAKA_PARAMS = {}\n", {})
    with pytest.raises(ValueError, match="found 0"):
        set_params("x = 1\n", {})


def test_families_load_by_op_then_by_category_and_skip_broken_files(tmp_path):
    problem = load_problem(OP)
    fams, how, warns = load_families(KERNELS, problem)
    assert how == "op" and sorted(f.id for f in fams) == ["kernels/rms_norm_small/looped", "kernels/rms_norm_small/rowwise"]
    assert any("no_params.py" in w for w in warns)
    other = tmp_path / "other_norm"
    other.mkdir()
    (other / "k.py").write_text((KERNELS / "rms_norm_small" / "rowwise.py").read_text().replace(
        "op: rms_norm_small", "op: other_norm"))
    fams, how, _ = load_families(tmp_path, problem)
    assert how == "category" and len(fams) == 1
    prop = OfflineProposer(problem, tmp_path)
    assert "1 knowledge-base kernels of category Normalization" in prop.banner


def test_offline_guidance_follows_the_roofline_signal():
    problem = load_problem(REPO_ROOT / "bench" / "ops" / "rms_norm")
    task = task_shapes(problem, "0,9", "cuda", 65536)
    res = EvalResult("pass", shapes=[ShapeResult("0", sol_fraction=0.04, bound="memory"),
                                     ShapeResult("9", sol_fraction=0.8, bound="memory")])
    assert guidance(res, task)[0] == "small-mem"
    res.shapes[0].sol_fraction, res.shapes[1].sol_fraction = 0.9, 0.3
    assert guidance(res, task)[0] == "large-mem"
    assert guidance(EvalResult("pass", shapes=[ShapeResult("0")]), task)[0] == "none"
    fam = next(f for f in OfflineProposer(load_problem(OP), KERNELS).families if f.id.endswith("rowwise"))
    prop = OfflineProposer(load_problem(OP), KERNELS)
    first = [m for _, m in prop._moves(fam, {"ROWS_PER_PROG": 2, "num_warps": 4}, "small-mem")][:2]
    assert sorted(first) == ["ROWS_PER_PROG 2 -> 4", "num_warps 4 -> 2"]
    first = next(m for _, m in prop._moves(fam, {"ROWS_PER_PROG": 2, "num_warps": 4}, "large-mem"))
    assert first == "num_warps 4 -> 8"


# -- shapes ---------------------------------------------------------------------------------------

def test_shape_spec_matches_input_kwargs_in_order():
    rms = load_problem("rms_norm")
    assert [s.id for s in match_shapes(rms, "4096x4096")] == ["9"]
    assert [s.id for s in match_shapes(rms, "64x8192")] == ["5"]
    assert [s.id for s in match_shapes(rms, "7x96")] == ["s0"]  # small shapes are searched second
    with pytest.raises(ProblemError, match="available: 0=1x4096"):
        match_shapes(rms, "5x5")
    assert [s.id for s in match_shapes(rms, "3,9")] == ["3", "9"]


def test_cpu_runs_switch_large_shapes_to_small_ones_and_say_so():
    problem = load_problem(OP)
    t = task_shapes(problem, "all", "cpu", 65536)
    assert t.ids == ["s0", "s1"] and [s.id for s in t.requested] == ["a", "b", "big"]
    assert t.note.startswith("no GPU: correctness only through the interpreter on small shapes; timings unavailable")
    assert task_shapes(problem, "a,b", "cpu", 65536).ids == ["a", "b"]
    assert task_shapes(problem, "all", "cuda", 65536).ids == ["a", "b", "big"]
    assert task_shapes(problem, "a", "cpu", 65536).weights == {"a": 2.0}


# -- config ---------------------------------------------------------------------------------------

def test_configs_optimize_yaml_mirrors_the_defaults():
    data = yaml.safe_load((REPO_ROOT / "configs" / "optimize.yaml").read_text())
    assert data == OptimizeConfig().to_dict()


def test_yaml_layers_and_overrides_are_typed(tmp_path):
    f = tmp_path / "a.yaml"
    f.write_text("n: 3\ndropout:\n  p: 0.25\nbudget:\n  max_cost_usd: 1\n")
    cfg = load_config([f])
    assert cfg.n == 3 and cfg.dropout.p == 0.25 and cfg.budget.max_cost_usd == 1.0
    set_path(cfg, "dropout.restart-parent", "true")
    set_path(cfg, "llm.base_url", "null")
    assert cfg.dropout.restart_parent is True and cfg.llm.base_url is None
    set_path(cfg, "llm.cache_mode", "off")  # YAML would read a bare off as false
    set_path(cfg, "eval.device", "cpu")
    assert cfg.llm.cache_mode == "off" and cfg.eval.device == "cpu"
    with pytest.raises(ConfigError, match="unknown key 'pp'.*valid: "):
        set_path(cfg, "dropout.pp", "1")
    with pytest.raises(ConfigError, match="expected an integer"):
        set_path(cfg, "n", "two")
    f.write_text("dropout:\n  p: 1.5\n")
    with pytest.raises(ConfigError, match="dropout.p must be in"):
        load_config([f])


def test_missing_key_falls_back_to_offline(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    spec, note = choose_proposer_spec("anthropic:claude-opus-4-5")
    assert spec == "offline" and "ANTHROPIC_API_KEY" in note
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    assert choose_proposer_spec("openai:gpt-5.4") == ("openai:gpt-5.4", None)
    assert choose_proposer_spec("openai-compat:q@http://localhost:1/v1")[1] is None


# -- retrieval ------------------------------------------------------------------------------------

def test_file_retriever_ranks_op_then_category_and_prefers_untried_techniques(tmp_path):
    (tmp_path / "ops").mkdir()
    (tmp_path / "patterns").mkdir()
    def note(path, **fm):
        (tmp_path / path).write_text("---\n" + yaml.safe_dump(fm) + "---\n# T\nbody of " + path + "\n")
    note("ops/mine.md", id="ops/mine", title="Mine", ops=["rms_norm_small"], techniques=["a"])
    note("patterns/cat1.md", id="patterns/cat1", title="Cat1", categories=["Normalization"], techniques=["tried-one"])
    note("patterns/cat2.md", id="patterns/cat2", title="Cat2", categories=["Normalization"], techniques=["new-one"])
    note("patterns/other.md", id="patterns/other", title="Other", categories=["MatrixMultiply"])
    hits = FileRetriever(tmp_path).retrieve(load_problem(OP), Signals(), ["tried-one"], 5)
    assert [h.id for h in hits] == ["ops/mine", "patterns/cat2", "patterns/cat1"]
    assert "body of ops/mine.md" in hits[0].text and hits[0].layer == "ops"
    assert split_front_matter("no header") == ({}, "no header")


# -- run store and resume state ----------------------------------------------------------------------

def test_a_run_timed_on_one_gpu_model_does_not_resume_on_another(tmp_path, capsys):
    """Resuming compares new candidates with the incumbent's recorded times: a run timed on an H100
    must not go on where the evaluations are another device's (here the CPU), and says why."""
    from aka.cli import main
    store = RunStore.create(tmp_path, "rms-h100")
    (store.root / "config.yaml").write_text("op: rms_norm\nshape: first\nmodel: offline\n")
    assert store.measured_on() is None                   # nothing evaluated yet: nothing to compare
    res = _res(a={"correct": True, "sol": 0.5})
    res.env = {"device": "cuda", "gpu": "NVIDIA H100 80GB HBM3"}
    store.save_candidate(Candidate("c0001", 1, GOOD, "whole", result=res, score=Score(0.5, "sol_fraction", {})))
    store.event("start", op="rms_norm")
    assert store.measured_on() == "NVIDIA H100 80GB HBM3"
    assert main(["optimize", "resume=rms-h100", f"runs_dir={tmp_path}", "iters=1", "live=off",
                 "eval.device=cpu"]) == 2
    err = capsys.readouterr().err
    assert "timed on NVIDIA H100 80GB HBM3" in err and "this evaluation device is cpu" in err and "op=rms_norm" in err
    assert [e["type"] for e in store.events()] == ["start"]  # refused before anything ran
    cpu = RunStore.create(tmp_path, "rms-cpu")
    res.env = {"device": "cpu"}
    cpu.save_candidate(Candidate("c0001", 1, GOOD, "whole", result=res, score=Score(0.5, "pass_rate", {})))
    assert cpu.measured_on() == "cpu"


def test_run_store_appends_and_state_rebuilds_from_it(tmp_path):
    store = RunStore.create(tmp_path, "r1")
    store.event("start", op="x")
    with pytest.raises(StoreError, match="already exists"):
        RunStore.create(tmp_path, "r1")
    res = _res(a={"correct": True})
    c1 = Candidate("c0001", 1, GOOD, "whole", techniques=["t1"], result=res, score=Score(1.0, "pass_rate", {"a": 1.0}))
    c1.meta["decision"] = "accepted"
    c2 = Candidate("c0002", 2, None, None, error="reply contains no code")
    for c in (c1, c2):
        store.save_candidate(c)
    store.event("round_start", round=1)
    store.event("accepted", candidate="c0001")
    store.event("round_end", round=1, stall=0)
    store.event("retrieval", round=2, hits=["ops/x", "ops/y"])
    store.event("round_end", round=2, stall=1)
    store.event("dropout", round=2, dropped_techniques=["t1"], dropped_hints=["ops/y"], restart_parent=None)
    store.save_totals({"usage": {"calls": 2, "input_tokens": 70, "output_tokens": 30, "cost_usd": 0.5,
                                 "by_model": {"a:m": {"calls": 2, "cost_usd": 0.5}}}, "wall_s": 12.5})
    with open(store.events_path, "a") as f:
        f.write('{"type": "round_st')  # a line cut by a kill
    again = RunStore.open(tmp_path, "r1")
    assert [e["type"] for e in again.events()][-1] == "dropout"
    st = State.from_store(again)
    assert st.incumbent.id == "c0001" and st.incumbent.source == GOOD and st.incumbent.result.status == "pass"
    assert (st.round, st.stall, st.last_dropout) == (2, 1, 2)
    assert st.dropped_techniques == {"t1"} and st.dropped_hints == {"ops/y"} and st.hints_seen == ["ops/x", "ops/y"]
    assert st.failure == "reply contains no code" and st.next_id() == "c0003"
    assert st.techniques() == [] and "t1" not in st.summary()["best"]["techniques"]
    cfg = OptimizeConfig()
    cfg.budget.max_calls, cfg.budget.max_wall_s = 2, 100.0
    b = make_budget(cfg, st.prior_usage, st.prior_wall_s)
    assert b.usage.calls == 2 and b.usage.by_model["a:m"].cost_usd == 0.5
    assert b.exceeded() is not None and "max_calls" in str(b.exceeded())
    assert b.max_wall_s == pytest.approx(87.5)
    line = json.loads(store.events_path.read_text().splitlines()[0])
    assert line["type"] == "start" and "t" in line
    with pytest.raises(StoreError, match="no run"):
        RunStore.open(tmp_path, "missing")


def test_confirmation_remeasures_both_at_once_timing_only():
    """Optimizer.confirm: each repeat evaluates challenger and incumbent concurrently, as
    re-measurements (EvalConfig.checks=False), and promotes only beyond noise."""
    import threading
    import time as _time
    from types import SimpleNamespace

    from aka.agent.loop import Optimizer
    from aka.evaluate.result import EvalResult
    calls, live, peak, lock = [], [0], [0], threading.Lock()
    values = {"c2": iter([0.62, 0.615]), "c1": iter([0.50, 0.505])}

    def fake_eval(c, remeasure=False):
        with lock:
            live[0] += 1
            peak[0] = max(peak[0], live[0])
            calls.append((c.id, remeasure))
        _time.sleep(0.05)
        with lock:
            live[0] -= 1
        v = next(values[c.id])
        return (EvalResult("pass") if v is not None else EvalResult("incorrect", "broke")), Score(v, "sol_fraction")

    events = []
    stub = SimpleNamespace(cfg=SimpleNamespace(eval=SimpleNamespace(confirm_repeats=2, min_rel_gain=0.02)),
                           _eval=fake_eval, emit=lambda t, **d: events.append((t, d)), here={"c1", "c2"})
    ch = SimpleNamespace(id="c2", score=Score(0.61, "sol_fraction"))
    inc = SimpleNamespace(id="c1", score=Score(0.51, "sol_fraction"))
    ok, why = Optimizer.confirm(stub, ch, inc)
    assert ok and why == "accepted"
    assert sorted(calls) == [("c1", True), ("c1", True), ("c2", True), ("c2", True)]
    assert peak[0] == 2, "challenger and incumbent must be re-measured at the same time"
    assert events[-1][0] == "confirm" and events[-1][1]["challenger"] == [0.61, 0.62, 0.615]
    assert "incumbent_failed" not in events[-1][1]
    # an incumbent that fails its re-measurement is named in the confirm event (not silently dropped)
    values.update({"c2": iter([0.62, 0.615]), "c1": iter([None, 0.505])})
    ok, _ = Optimizer.confirm(stub, ch, inc)
    assert events[-1][1]["incumbent_samples"] == [0.51, 0.505]
    assert events[-1][1]["incumbent_failed"] == ["incorrect broke"]


def test_confirmation_not_worse_promotes_a_tie_and_rejects_a_steady_loss():
    """Optimizer.confirm(not_worse=True), the closing dispatcher's rule: overlapping samples (a tie)
    promote; an incumbent ahead on every sample, however slightly, does not."""
    from types import SimpleNamespace

    from aka.agent.loop import Optimizer
    from aka.evaluate.result import EvalResult
    values = {}

    def fake_eval(c, remeasure=False):
        return EvalResult("pass"), Score(next(values[c.id]), "sol_fraction")

    events = []
    stub = SimpleNamespace(cfg=SimpleNamespace(eval=SimpleNamespace(confirm_repeats=2, min_rel_gain=0.02)),
                           _eval=fake_eval, emit=lambda t, **d: events.append((t, d)), here={"c1", "c3"})
    ch = SimpleNamespace(id="c3", score=Score(0.703, "sol_fraction"))
    inc = SimpleNamespace(id="c1", score=Score(0.7028, "sol_fraction"))
    values.update({"c3": iter([0.7051, 0.7020]), "c1": iter([0.7040, 0.7035])})   # interleaved: a tie
    ok, why = Optimizer.confirm(stub, ch, inc, not_worse=True)
    assert ok and why.startswith("accepted within noise") and events[-1][1]["rule"] == "not_worse"
    values.update({"c3": iter([0.7051, 0.7020]), "c1": iter([0.7040, 0.7035])})   # the usual rule: a tie is no gain
    assert not Optimizer.confirm(stub, ch, inc)[0]
    values.update({"c3": iter([0.698, 0.699]), "c1": iter([0.7035, 0.704])})       # behind on every sample
    ok, why = Optimizer.confirm(stub, SimpleNamespace(id="c3", score=Score(0.6985, "sol_fraction")), inc,
                                not_worse=True)
    assert not ok and "c1 faster beyond noise" in why
    # ahead on every sample by less than min_rel_gain (the H100's fp8_kv_decode_attention dispatcher,
    # 2026-12-06): a gain beyond noise, not a tie
    values.update({"c3": iter([0.3972, 0.3966]), "c1": iter([0.3919, 0.3923])})
    ok, why = Optimizer.confirm(stub, SimpleNamespace(id="c3", score=Score(0.3976, "sol_fraction")),
                                SimpleNamespace(id="c1", score=Score(0.3922, "sol_fraction")), not_worse=True)
    assert ok and why.startswith("accepted, faster beyond noise") and "+1.3%" in why
    assert "under eval.min_rel_gain=0.02" in why and "within noise" not in why
    values.update({"c3": iter([0.43, 0.432]), "c1": iter([0.3919, 0.3923])})      # and by more than it
    ok, why = Optimizer.confirm(stub, SimpleNamespace(id="c3", score=Score(0.431, "sol_fraction")),
                                SimpleNamespace(id="c1", score=Score(0.3922, "sol_fraction")), not_worse=True)
    assert ok and why == "accepted"
    # after a resume the incumbent's stored score is from an earlier call (another machine, maybe
    # 1% faster: the H100 gemm run of 2026-12-06 scored 0.714 there and re-measured 0.706-0.707):
    # it is re-measured once more instead of counted
    stub.here = {"c3"}
    values.update({"c3": iter([0.7077, 0.7079]), "c1": iter([0.7070, 0.7059, 0.7064])})
    ok, why = Optimizer.confirm(stub, SimpleNamespace(id="c3", score=Score(0.7055, "sol_fraction")),
                                SimpleNamespace(id="c1", score=Score(0.7141, "sol_fraction")), not_worse=True)
    ev = events[-1][1]
    assert ev["incumbent_samples"] == [0.7070, 0.7059, 0.7064] and ev["incumbent_score_set_aside"] == 0.7141
    assert ok and why.startswith("accepted within noise")
    stub.here = {"c1", "c3"}
    stub.cfg.eval.confirm_repeats = 0                                              # no re-measurement
    assert Optimizer.confirm(stub, ch, inc, not_worse=True)[0]
    assert not Optimizer.confirm(stub, SimpleNamespace(id="c3", score=Score(0.68, "sol_fraction")), inc,
                                 not_worse=True)[0]


def test_offline_proposer_starts_from_the_best_kernel_the_knowledge_base_measured():
    """On a GPU the first proposals are the families with a current recorded result over the task's
    shapes, best objective first; on the CPU (no timings recorded) they stay in file order."""
    from types import SimpleNamespace

    from aka.agent.offline import recorded_objective
    problem = load_problem("gelu_and_mul")
    kb = REPO_ROOT / "knowledge_base" / "kernels"
    task = task_shapes(problem, "all", "cuda", 65536)
    rec = {p.stem: recorded_objective(p, "gelu_and_mul", "cuda:0", task.ids, task.weights)
           for p in sorted((kb / "gelu_and_mul").glob("*.py"))}
    measured = {k: v for k, v in rec.items() if v is not None}  # knowledge_base/KERNELS_H200.md's results
    assert len(measured) >= 3, rec
    best_first = sorted(measured, key=lambda k: -measured[k])
    assert recorded_objective(kb / "gelu_and_mul" / "rowmajor.py", "silu_and_mul", "cuda", task.ids, task.weights) is None

    def first(device, n):
        t = task_shapes(problem, "all", device, 65536)
        ctx = SimpleNamespace(problem=problem, task=t, device=device, history=[], parent=None)
        return [p.meta["offline"]["family"].rsplit("/", 1)[1] for p in OfflineProposer(problem, kb).propose(ctx, n)]
    from aka.agent.offline import recorded_sol
    order = first("cuda", len(rec))
    assert [k for k in order if k in measured] == best_first    # measured ones in objective order,
    unrecorded = [k for k in rec if not recorded_sol(kb / "gelu_and_mul" / f"{k}.py", "gelu_and_mul", "cuda")]
    assert order[len(rec) - len(unrecorded):] == sorted(unrecorded)  # kernels with no H200 result last
    assert first("cpu", len(rec)) == sorted(rec)  # file order


def _kb_copy(tmp_path, op):
    """op's knowledge-base kernels and their committed results in a temporary tree (the records
    sit beside the kernels as in the repository): (kernels root, that op's results folder)."""
    import shutil
    kb = tmp_path / "knowledge_base" / "kernels"
    res = tmp_path / "results" / "kb" / "kernels" / op
    shutil.copytree(REPO_ROOT / "knowledge_base" / "kernels" / op, kb / op)
    shutil.copytree(REPO_ROOT / "results" / "kb" / "kernels" / op, res)
    return kb, res


def test_offline_proposer_ranks_records_of_the_gpu_in_hand_before_other_models(tmp_path):
    """Datasheet fractions of two GPU models are not one scale: the families measured on the GPU in
    hand come first (by those records), the ones measured only on another model after them (by theirs),
    the unmeasured last. gelu_and_mul's committed records in a copy, each relabelled: the best one
    'GPU B', the others 'GPU A'."""
    import json
    from types import SimpleNamespace

    from aka.agent.offline import recorded_objective, recorded_sol
    problem = load_problem("gelu_and_mul")
    kb, res = _kb_copy(tmp_path, "gelu_and_mul")
    task = task_shapes(problem, "all", "cuda", 65536)
    paths = sorted((kb / "gelu_and_mul").glob("*.py"))
    obj = {p.stem: recorded_objective(p, "gelu_and_mul", "cuda", task.ids, task.weights) for p in paths}
    measured = sorted((k for k, v in obj.items() if v is not None), key=lambda k: -obj[k])
    assert len(measured) >= 3, obj
    best = measured[0]
    for p in paths:
        f = res / f"{p.stem}.results.json"
        if f.exists():
            rec = json.loads(f.read_text())
            if "cuda" in rec["devices"]:
                rec["devices"]["cuda"]["gpu"] = "GPU B" if p.stem == best else "GPU A"
                f.write_text(json.dumps(rec))
    assert recorded_sol(kb / "gelu_and_mul" / f"{best}.py", "gelu_and_mul", "cuda", gpu="GPU A") is None
    assert recorded_sol(kb / "gelu_and_mul" / f"{best}.py", "gelu_and_mul", "cuda", gpu="GPU B")
    # a GPU model's verdict kept beside the primary one ("gpus") is that model's record
    f = res / f"{best}.results.json"
    rec = json.loads(f.read_text())
    rec["gpus"] = {"GPU C": dict(rec["devices"]["cuda"], gpu="GPU C", shapes=[{"id": "0", "sol_fraction": 0.5}])}
    f.write_text(json.dumps(rec))
    assert recorded_sol(kb / "gelu_and_mul" / f"{best}.py", "gelu_and_mul", "cuda", gpu="GPU C") == {"0": 0.5}
    del rec["gpus"]
    f.write_text(json.dumps(rec))

    def order(gpu):
        ctx = SimpleNamespace(problem=problem, task=task, device="cuda", history=[], parent=None)
        props = OfflineProposer(problem, kb, gpu=gpu).propose(ctx, len(paths))
        return [p.meta["offline"]["family"].rsplit("/", 1)[1] for p in props]
    unmeasured = sorted(k for k in obj if obj[k] is None)
    assert order("GPU B")[:len(measured)] == measured            # best is B's only record: first anyway
    assert order("GPU A")[:len(measured)] == measured[1:] + [best]  # A's records first, B's after them
    assert order("GPU A")[len(measured):] == unmeasured
    assert order("GPU C")[:len(measured)] == measured            # no record of C: every other model's, by objective


def test_no_round_starts_that_would_end_past_the_wall_budget():
    """Optimizer.check_limits forecasts the next round as the longest of the last three."""
    from types import SimpleNamespace

    from aka.agent.loop import BudgetStop, Optimizer
    from aka.llm.budget import Budget
    budget = Budget(max_wall_s=100.0)
    budget._t0 -= 60.0  # 60 s used
    stub = SimpleNamespace(cfg=SimpleNamespace(budget=SimpleNamespace(iterations=10),
                                               stop=SimpleNamespace(stall_rounds=5)),
                           budget=budget, state=SimpleNamespace(stall=0, prior_wall_s=0.0), round_s=[],
                           dispatch_pending=lambda: False)
    Optimizer.check_limits(stub, 2)              # no round measured yet: nothing to forecast
    stub.round_s = [50.0, 20.0, 30.0, 35.0]      # the last three: longest 35 s -> ends at 95 s
    Optimizer.check_limits(stub, 2)
    stub.dispatch_pending = lambda: True         # a closing dispatch round needs room too: 60 + 2 * 35 > 100
    with pytest.raises(BudgetStop, match="and the closing dispatch round"):
        Optimizer.check_limits(stub, 2)
    stub.dispatch_pending = lambda: False
    stub.round_s.append(45.0)                    # 60 + 45 > 100
    with pytest.raises(BudgetStop, match=r"max_wall_s=100 would be passed by another round \(~45 s"):
        Optimizer.check_limits(stub, 2)
    # a resumed run: its Budget holds what is left of the run's max_wall_s (make_budget); the
    # message speaks of the run's limit and the run's wall so far, not of this session's share
    stub.state.prior_wall_s = 400.0
    with pytest.raises(BudgetStop, match=r"max_wall_s=500 would .* \(~45 s, .*; 460 s used, 400 s of them before"):
        Optimizer.check_limits(stub, 2)


def test_a_kernel_verified_on_some_shapes_ranks_by_its_ratio_to_a_measured_one():
    """A family whose H200 result covers one shape is ranked by its ratio to the best family measured
    over the task, on the shapes both cover, not after every all-shape result; a family sharing no
    shape with a measured one, or with no record, keeps its place after them."""
    from aka.agent.offline import estimate_partial
    records = [{"0": 0.2, "1": 0.5, "2": 0.6},   # measured over the task (shapes 1, 2): 0.548
               {"0": 0.1, "1": 0.4, "2": 0.4},   # measured: 0.4
               {"0": 0.3},                        # 1.5x family 0 at shape 0 -> 0.822
               {"0": 0.05},                       # 0.25x family 0 -> 0.137, below family 1
               {"9": 0.9},                        # shares no shape with a measured family
               None]
    scored = [0.5477, 0.4, None, None, None, None]
    est = estimate_partial(records, scored)
    assert est[0] is None and est[1] is None and est[4] is None and est[5] is None
    assert est[2][1] == 0 and est[2][3] == ["0"] and est[2][2] == pytest.approx(1.5)
    assert est[2][0] == pytest.approx(0.5477 * 1.5) and est[3][0] == pytest.approx(0.5477 * 0.25)
    rank = [s if s is not None else (e[0] if e else None) for s, e in zip(scored, est)]
    order = sorted(range(6), key=lambda i: (rank[i] is None, -(rank[i] or 0.0), i))
    assert order == [2, 0, 1, 3, 4, 5]


@pytest.mark.parametrize("ratio", [1.2, 0.5])
def test_offline_proposer_tries_a_kernel_with_a_one_shape_h200_result_first_where_it_is_faster(tmp_path, ratio):
    """gemm_bf16's kernels with their committed H200 results, except that the dispatch kernel's record
    keeps shape 0 only (as after `aka kb verify --shapes first`), at `ratio` times the record there of
    the kernel measured best over the task: it comes first exactly when it is the faster of the two on
    that shape, and the proposal says why. (Built
    in a copy: the committed records changed under an earlier form of this test, which then skipped.)"""
    import json
    from types import SimpleNamespace

    from aka.agent.offline import recorded_sol
    problem = load_problem("gemm_bf16")
    kb, res = _kb_copy(tmp_path, "gemm_bf16")
    from aka.agent.offline import _over
    t = task_shapes(problem, "last", "cuda", 65536)
    full = {p.stem: recorded_sol(p, "gemm_bf16", "cuda") for p in sorted((kb / "gemm_bf16").glob("*.py"))
            if p.stem != "dispatch"}
    full = {k: v for k, v in full.items() if v and set(t.ids) <= set(v) and "0" in v}
    assert full, "the committed H200 records of gemm_bf16's kernels are gone"
    # the estimate scales the best kernel over the task by the two kernels' ratio on shape 0
    ref = max(full, key=lambda k: _over(full[k], t.ids, t.weights))
    best0 = full[ref]["0"]
    rec = json.loads((res / "dispatch.results.json").read_text())
    cuda = rec["devices"]["cuda"]
    (zero,) = [dict(s, sol_fraction=best0 * ratio) for s in cuda["shapes"] if str(s["id"]) == "0"]
    cuda["shapes"], cuda["shapes_spec"] = [zero], "first"
    # the record speaks for the kernel as it is now (its code moved on after its H200 verify: this test
    # is about how a one-shape record ranks, not about staleness)
    from aka.kb.verify import source_hash
    cuda["source_hash"] = source_hash(kb / "gemm_bf16" / "dispatch.py")
    (res / "dispatch.results.json").write_text(json.dumps(rec))
    assert recorded_sol(kb / "gemm_bf16" / "dispatch.py", "gemm_bf16", "cuda") == {"0": best0 * ratio}
    ctx = SimpleNamespace(problem=problem, task=t, device="cuda", history=[], parent=None)
    props = OfflineProposer(problem, kb).propose(ctx, 3)
    first = props[0].meta["offline"]
    assert (first["family"] == "kernels/gemm_bf16/dispatch") == (ratio > 1)
    if ratio > 1:
        assert "partial record" in first["why"]


def test_a_gpu_run_measures_the_ceilings_once_when_the_cache_has_none(tmp_path, monkeypatch):
    """aka.agent.cli.ensure_calibration: with no cached calibration for the GPU model it runs
    `aka hw calibrate` (here a stand-in: no GPU in CI) under the GPU lock and records it; with one
    cached it measures nothing; a failure is a notice and the run goes on."""
    import torch
    from rich.console import Console

    from aka import hardware
    from aka.agent.cli import ensure_calibration
    from aka.agent.store import RunStore
    monkeypatch.setenv("AKA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *_a: "NVIDIA H200")
    monkeypatch.setattr("aka.evaluate.gpulock.gpu_key", lambda device: "fake-gpu")
    calls = []

    def fake_calibrate(device="cuda", save=True, **_kw):
        calls.append(device)
        got = {"copy_tbps": 4.3, "bf16_tflops": 850.0, "warnings": []}
        if save:
            hardware.save_calibration("NVIDIA H200", got)
        return got

    monkeypatch.setattr(hardware, "calibrate", fake_calibrate)
    store = RunStore.create(tmp_path / "runs", "cal")
    console = Console(file=open(tmp_path / "out.txt", "w"))
    got = ensure_calibration("cuda", console, store)
    assert got["copy_tbps"] == 4.3 and calls == ["cuda"]
    assert hardware.load_calibration("NVIDIA H200")["bf16_tflops"] == 850.0
    assert (tmp_path / "cache" / "locks").is_dir()   # it took the GPU lock's files
    ev = [e for e in store.events() if e["type"] in ("notice", "calibration")]
    assert ev[0]["type"] == "notice" and "measuring them once" in ev[0]["message"] and ev[-1]["copy_tbps"] == 4.3
    assert ensure_calibration("cuda", console, store)["copy_tbps"] == 4.3 and calls == ["cuda"]  # cached: no second
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *_a: "NVIDIA H100 80GB HBM3")

    def broken(device="cuda", save=True, **_kw):
        raise RuntimeError("CUDA error: out of memory")

    monkeypatch.setattr(hardware, "calibrate", broken)
    assert ensure_calibration("cuda", console, store) is None
    assert "calibration failed: RuntimeError" in [e for e in store.events() if e["type"] == "notice"][-1]["message"]


def test_offline_guidance_takes_a_dot_computed_twice_before_the_roofline():
    """A parent whose offline compile report names a dot computed by both warpgroups (compile_check:
    a 64-row attention score on 8 warps) is moved to fewer warps first, then to a larger M tile, on a
    GPU run or a CPU one; a report without it leaves the roofline's mode."""
    problem = load_problem(REPO_ROOT / "bench" / "ops" / "rms_norm")
    task = task_shapes(problem, "0,9", "cuda", 65536)
    dots = [{"m": 64, "n": 64, "dup": 2, "warps": [8, 1], "instr": [16, 32, 16]},
            {"m": 64, "n": 128, "dup": 1, "warps": [4, 2], "instr": [16, 64, 16]}]
    report = {"available": True, "ok": True, "launches": [{"kernel": "_attn", "num_warps": 8, "dots": dots}]}
    res = EvalResult("pass", shapes=[ShapeResult("0", sol_fraction=0.04, bound="memory"),
                                     ShapeResult("9", sol_fraction=0.8, bound="memory", compile=report)])
    mode, why = guidance(res, task)
    assert mode == "dup-dot" and why.startswith("_attn: dot 64x64 computed 2x")
    assert guidance(EvalResult("pass", shapes=[ShapeResult("0", compile=report)]), task)[0] == "dup-dot"
    report["launches"][0]["dots"] = dots[1:]
    assert guidance(res, task)[0] == "small-mem"
    fam = next(f for f in OfflineProposer(load_problem(OP), KERNELS).families if f.id.endswith("rowwise"))
    fam.params = {"num_stages": [1, 2, 3], "BM": [32, 64, 128], "num_warps": [2, 4, 8]}
    prop = OfflineProposer(load_problem(OP), KERNELS)
    moves = [m for _, m in prop._moves(fam, {"num_stages": 2, "BM": 64, "num_warps": 8}, "dup-dot")]
    assert moves[:2] == ["num_warps 8 -> 4", "BM 64 -> 128"]
