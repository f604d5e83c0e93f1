"""No hollow arms: before a grid runs, check that every arm changes what its proposer sees or does.

* retrieval arms are compared on what round 1 hands the proposer, through the loop's own
  `Optimizer.context` and the proposer's own code (no LLM call, no evaluation): the LLM
  proposer's rendered prompt, or the offline proposer's first `OFFLINE_PROBE` points in order.
  Two arms that differ only in retrieval and give one operator the same view are an error.
* dropout acts only after `patience` stalled rounds: an arm with dropout on and a round budget
  that never reaches patience + 1 rounds is an error; so is best-of-N with a single round (its
  first round is the feedback arm's first round).
What each mechanism changes later in a run is shown by tests/test_exp_arms.py for both proposers.
"""
from __future__ import annotations

import tempfile

from aka.agent.config import ConfigError

OFFLINE_PROBE = 8


class HollowArm(ConfigError):
    """An arm whose mechanism changes nothing the proposer sees; the message names it."""


def round1_view(cfg, device: str | None = None) -> str:
    """What the proposer of this config is given (LLM) or proposes (offline) in round 1."""
    from aka.agent.cli import build_retriever, choose_proposer_spec
    from aka.agent.llm_proposer import LLMProposer
    from aka.agent.loop import Optimizer
    from aka.agent.offline import OfflineProposer
    from aka.agent.prompts import PromptRenderer
    from aka.agent.shapes import task_shapes
    from aka.agent.store import RunStore
    from aka.evaluate.api import resolve_device
    from aka.llm.scripted import ScriptedLLM
    from aka.problem import load_problem

    problem = load_problem(cfg.op)
    dev = device or resolve_device(None if cfg.eval.device == "auto" else cfg.eval.device)
    task = task_shapes(problem, cfg.shape, dev, cfg.eval.cpu_max_elems)
    spec, _ = choose_proposer_spec(cfg.model)
    offline = spec == "offline"
    with tempfile.TemporaryDirectory(prefix="aka-probe-") as tmp:
        store = RunStore.create(tmp, "probe")
        if offline:
            prop = OfflineProposer(problem, cfg.offline.kernels_dir, exclude_op=cfg.retrieval.exclude_op,
                                   use_records=cfg.retrieval.enabled, independent=not cfg.feedback, seed=cfg.seed)
            opt = Optimizer(cfg, problem, task, prop, store)
            try:
                props = prop.propose(opt.context(1), OFFLINE_PROBE)
            except Exception as e:  # noqa: BLE001  an empty search is a view too (it differs from a full one)
                return f"offline: {type(e).__name__}: {e}"
            return "\n".join(f"{p.meta['offline']['family']} {sorted(p.meta['offline']['params'].items())}"
                             for p in props)
        prop = LLMProposer(ScriptedLLM([]), PromptRenderer(cfg.prompts_dir), cfg.llm, target_gpu=cfg.target_gpu,
                           independent=not cfg.feedback)
        opt = Optimizer(cfg, problem, task, prop, store, retriever=build_retriever(cfg))
        text, _ = prop.build_user_message(opt.context(1))
        return text


def check_arms(ex, overrides: list | None = None, device: str | None = None, progress=print) -> dict:
    """Raises HollowArm; returns {op: {arm: view}} for the record."""
    rounds = int(ex.budget["rounds"])
    for arm in ex.arms:
        cfg = ex.optimize_config(arm, ex.operators[0], ex.seeds[0], overrides)
        if cfg.dropout.enabled and arm.dropout and rounds <= cfg.dropout.patience:
            raise HollowArm(f"arm {arm.name}: dropout.patience={cfg.dropout.patience} is never reached in "
                            f"budget.rounds={rounds}: dropout on would change nothing")
        if arm.best_of_n and rounds < 2:
            raise HollowArm(f"arm {arm.name}: best-of-N over 1 round is the feedback arm's first round")
    views: dict[str, dict[str, str]] = {}
    for op in ex.operators:
        views[op] = {}
        for arm in ex.arms:
            views[op][arm.name] = round1_view(ex.optimize_config(arm, op, ex.seeds[0], overrides), device)
        for i, a in enumerate(ex.arms):
            for b in ex.arms[i + 1:]:
                if a.retrieval != b.retrieval and _same_but_retrieval(a, b) \
                        and views[op][a.name] == views[op][b.name]:
                    raise HollowArm(f"arms {a.name} and {b.name} (retrieval {a.retrieval} vs {b.retrieval}) give "
                                    f"{op}'s proposer the same round-1 view: retrieval changes nothing there")
        progress(f"probe {op}: {len(set(views[op].values()))} distinct round-1 views over {len(ex.arms)} arms")
    return views


def _same_but_retrieval(a, b) -> bool:
    return (a.dropout, a.patience, a.p, a.best_of_n) == (b.dropout, b.patience, b.p, b.best_of_n)
