"""What the loop and its parts agree on: the proposer protocol, a round's context, typed exits."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from aka.agent.dropout import DropoutDecision
from aka.agent.shapes import TaskShapes
from aka.agent.store import Candidate
from aka.kb.retrieval import Hit, Signals
from aka.problem import Problem


class Stop(Exception):
    """Ends the run; `kind` goes into the stop event."""
    kind = "stop"

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class BudgetStop(Stop):
    kind = "budget"


class TargetReached(Stop):
    kind = "target"


class Stalled(Stop):
    kind = "stall"


class ProposerExhausted(Stop):
    kind = "exhausted"


class FatalStop(Stop):
    """An error no retry can fix (bad key, unknown model): the run stops and says why."""
    kind = "fatal"


@dataclass
class Proposal:
    source: str | None                 # None: the reply gave no usable candidate (see error)
    kind: str | None                   # whole | edit | offline
    parent: str | None = None
    techniques: list[str] = field(default_factory=list)
    meta: dict = field(default_factory=dict)
    error: str | None = None
    reply: str | None = None           # the model's raw text, kept beside the candidate


@dataclass
class RoundContext:
    round: int
    problem: Problem
    task: TaskShapes
    device: str
    parent: Candidate | None           # what this round should improve (the incumbent unless restarted)
    incumbent: Candidate | None
    history: list[Candidate]           # every candidate so far, oldest first
    last: list[Candidate]              # the previous round's candidates
    signals: Signals                   # roofline signal of the parent (aka.kb.retrieval.Signals)
    hits: list[Hit]
    techniques: list[str]              # used so far, minus those dropped
    tried: list[str]                   # one line per recent attempt
    summary: dict                      # compact state, for a fresh context
    failure: str = ""                  # the latest failure, trimmed
    dropout: DropoutDecision | None = None  # drawn at the end of the previous round


class Proposer(Protocol):
    name: str

    def propose(self, ctx: RoundContext, n: int) -> list[Proposal]: ...

    def on_dropout(self, decision: DropoutDecision) -> None: ...
