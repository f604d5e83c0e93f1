"""The loop's memory, and how `resume` rebuilds it from a run store alone."""
from __future__ import annotations

from dataclasses import dataclass, field

from aka.agent.dropout import DropoutDecision
from aka.agent.prompts import SUMMARY_ROWS, failure_text
from aka.agent.store import Candidate, RunStore
from aka.llm import Budget
from aka.llm.budget import ModelUsage
from aka.util import fmt


@dataclass
class State:
    history: list[Candidate] = field(default_factory=list)
    incumbent: Candidate | None = None
    round: int = 0                          # rounds completed
    stall: int = 0                          # completed rounds since the last accepted improvement
    last_dropout: int | None = None         # round of the last dropout
    dropped_techniques: set[str] = field(default_factory=set)
    dropped_hints: set[str] = field(default_factory=set)
    parent_override: str | None = None      # dropout restart point, until the next acceptance or dropout
    pending_dropout: DropoutDecision | None = None
    last: list[Candidate] = field(default_factory=list)
    hints_seen: list[str] = field(default_factory=list)   # KB hit ids shown so far (dropout draws over them)
    prior_usage: dict = field(default_factory=dict)
    prior_wall_s: float = 0.0

    def get(self, cid: str | None) -> Candidate | None:
        return next((c for c in self.history if c.id == cid), None)

    def next_id(self) -> str:
        return f"c{len(self.history) + 1:04d}"

    @property
    def failure(self) -> str:
        """The most recent failure of the harness or the parser, trimmed for a prompt."""
        for c in reversed(self.history):
            if c.meta.get("llm_error"):
                continue  # the provider failed, not the model
            if c.error:
                return c.error
            if c.result is not None and c.result.status != "pass":
                return failure_text(c.result)
            if c.result is not None:
                return ""
        return ""

    def techniques(self) -> list[str]:
        seen: list[str] = []
        for c in self.history:
            for t in c.techniques:
                if t not in seen and t not in self.dropped_techniques:
                    seen.append(t)
        return seen

    def tried_lines(self) -> list[str]:
        lines = []
        for c in self.history[-SUMMARY_ROWS:]:
            techs = [t for t in c.techniques if t not in self.dropped_techniques]
            what = c.kind or "no code"
            if c.parent:
                what += f" of {c.parent}"
            if c.meta.get("offline"):
                what += f" {c.meta['offline']['family']} {c.meta['offline']['params']}"
            obj = f", objective {fmt(c.score.value)}" if c.score and c.score.value is not None else ""
            why = c.error or (c.result.reason if c.result and c.status != "pass" else "")
            decision = c.meta.get("decision", "")
            line = f"{c.id} (round {c.round}, {what}{'; ' + ', '.join(techs) if techs else ''}): {c.status}{obj}"
            line += f" [{decision}]" if decision else ""
            lines.append(line + (f" — {why[:160]}" if why else ""))
        if len(self.history) > SUMMARY_ROWS:
            lines.insert(0, f"({len(self.history) - SUMMARY_ROWS} earlier attempts not listed)")
        return lines

    def summary(self) -> dict:
        evaluated = [c for c in self.history if c.result is not None]
        fails: dict[str, int] = {}
        for c in self.history:
            if c.status != "pass":
                fails[c.status] = fails.get(c.status, 0) + 1
        best = None
        if self.incumbent is not None and self.incumbent.score is not None:
            inc = self.incumbent
            best = {"id": inc.id, "objective": inc.score.value, "kind": inc.score.kind,
                    "techniques": [t for t in inc.techniques if t not in self.dropped_techniques]}
        return {"rounds": self.round, "evaluated": len(evaluated),
                "passing": sum(c.status == "pass" for c in evaluated), "best": best, "failure_counts": fails,
                "dropped": sorted(self.dropped_techniques | self.dropped_hints)}

    @classmethod
    def from_store(cls, store: RunStore) -> "State":
        st = cls(history=store.candidates())
        for ev in store.events():
            t = ev.get("type")
            if t == "accepted":
                st.incumbent = st.get(ev["candidate"])
                st.parent_override = None
            elif t == "round_end":
                st.round, st.stall = ev["round"], ev["stall"]
            elif t == "retrieval":
                st.hints_seen += [h for h in ev.get("hits", []) if h not in st.hints_seen]
            elif t == "dropout":
                st.last_dropout = ev["round"]
                st.dropped_techniques = set(ev.get("dropped_techniques", []))
                st.dropped_hints = set(ev.get("dropped_hints", []))
                st.parent_override = ev.get("restart_parent")
        st.last = [c for c in st.history if c.round == st.round]
        totals = store.totals()
        st.prior_usage = totals.get("usage", {})
        st.prior_wall_s = float(totals.get("wall_s", 0.0))
        return st


def make_budget(cfg, prior_usage: dict, prior_wall_s: float) -> Budget:
    """A Budget whose totals start where the previous sessions of the run stopped."""
    b = cfg.budget
    wall = None if b.max_wall_s is None else max(0.0, b.max_wall_s - prior_wall_s)
    budget = Budget(b.max_calls, b.max_input_tokens, b.max_output_tokens, b.max_cost_usd, wall)
    u = budget.usage
    for k in ("calls", "cached_calls", "input_tokens", "output_tokens", "cost_usd", "wall_s"):
        if k in prior_usage:
            setattr(u, k, prior_usage[k])
    u.by_model = {m: ModelUsage(**d) for m, d in (prior_usage.get("by_model") or {}).items()}
    return budget
