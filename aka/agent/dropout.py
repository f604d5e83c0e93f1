"""Optimization dropout: when the search stalls, forget part of what it knows.

After `patience` rounds without an accepted improvement (and at least `patience` rounds after the
previous dropout) the loop draws one decision. Each ingredient has its own switch so ablations can
turn them off one at a time:

* fresh_context: the conversation restarts from a compact summary instead of the long history;
* drop_techniques / drop_hints: every technique used so far, and every KB hint retrieved so far,
  is withheld from later prompts with probability p (independent coin flips, seeded RNG);
* restart_parent: the next round edits a passing candidate that is not the incumbent, drawn
  uniformly from the best `restart_top_k` of them (no such candidate: no restart).
"""
from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field

from aka.agent.config import DropoutConfig


@dataclass
class DropoutDecision:
    round: int
    fresh_context: bool = False
    dropped_techniques: list[str] = field(default_factory=list)
    dropped_hints: list[str] = field(default_factory=list)
    restart_parent: str | None = None

    def to_json(self) -> dict:
        return asdict(self)


def due(cfg: DropoutConfig, stall: int, rounds_since_dropout: int | None) -> bool:
    if not cfg.enabled or stall < cfg.patience:
        return False
    return rounds_since_dropout is None or rounds_since_dropout >= cfg.patience


def decide(cfg: DropoutConfig, rng: random.Random, round_no: int, techniques: list[str], hints: list[str],
           passing: list[tuple[str, float]], incumbent: str | None) -> DropoutDecision:
    """`passing`: (candidate id, objective) of every passing candidate. Sorted inputs keep the
    draws reproducible for a given seed whatever order the caller collected them in."""
    d = DropoutDecision(round=round_no, fresh_context=cfg.fresh_context)
    if cfg.drop_techniques:
        d.dropped_techniques = [t for t in sorted(set(techniques)) if rng.random() < cfg.p]
    if cfg.drop_hints:
        d.dropped_hints = [h for h in sorted(set(hints)) if rng.random() < cfg.p]
    if cfg.restart_parent:
        others = sorted((c for c in passing if c[0] != incumbent), key=lambda c: (-c[1], c[0]))
        pool = [cid for cid, _ in others[: max(1, cfg.restart_top_k)]]
        if pool:
            d.restart_parent = rng.choice(pool)
    return d
