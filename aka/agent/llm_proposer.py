"""The LLM proposer: renders the round's prompt, samples `n` replies, parses them into candidates.

The conversation keeps the task message and its first reply plus the last `history_rounds`
exchanges; a dropout with fresh_context (or a context-too-long error) drops it all and starts again
from the task and a compact summary. LLM errors propagate (a sample whose retries ran out is returned as a lost sample, unless the
server could not be reached at all): the loop decides what they mean.
"""
from __future__ import annotations

from collections import deque

from aka.agent.base import Proposal, RoundContext
from aka.agent.config import LLMConfig
from aka.agent.dropout import DropoutDecision
from aka.agent.edits import parse_reply
from aka.agent.prompts import PromptRenderer, hardware_context, task_context
from aka.llm import BudgetExceeded, Message, TransientLLMError, UnreachableLLMError

SEED_STRIDE = 1_000_000   # sample indices of one seed: rounds x n stay far below it

ASK_FIRST = ("Write the kernel: one complete file in a ```python block, after a short plan and the "
             "TECHNIQUES line.")
ASK_IMPROVE = ("Improve on the parent kernel {pid}: find what the roofline signal says is limiting it and "
               "change that. Reply with SEARCH/REPLACE edits against {pid} or a whole new file.")
ASK_FIX = "No kernel passes yet. Fix what failed, or start over with a simpler correct kernel. Send a whole file."


class LLMProposer:
    def __init__(self, llm, renderer: PromptRenderer, cfg: LLMConfig, *, store=None, target_gpu: str = "",
                 independent: bool = False, seed: int = 0):
        self.llm = llm
        # The response cache keys on the sample index: without the seed in it, runs that differ only
        # in seed would replay one cached sample, and an experiment's seeds would not be replicates.
        self.sample_base = seed * SEED_STRIDE
        self.independent = independent  # best-of-N: every round a fresh conversation (no feedback)
        self.renderer = renderer
        self.cfg = cfg
        self.store = store
        self.target_gpu = target_gpu
        self.name = f"llm:{llm.name}"
        self.messages: list[Message] = []
        self._pending_fresh = False
        self._static: dict | None = None
        # KB entries the kept conversation already holds: those of the task message, which is never
        # trimmed, and those of the later user messages that survive trimming.
        self._first_hits: set[str] = set()
        self._recent_hits: deque[set[str]] = deque(maxlen=max(1, cfg.history_rounds))
        self._pending_hits: set[str] = set()

    def on_dropout(self, decision: DropoutDecision) -> None:
        if decision.fresh_context:
            self._pending_fresh = True

    def reset(self) -> None:
        """Fresh context: the next prompt carries the task and the summary, no history."""
        self._pending_fresh = True

    def _static_ctx(self, ctx: RoundContext) -> dict:
        if self._static is None:
            self._static = {"task": task_context(ctx.problem, ctx.task, ctx.task.note, ctx.device),
                            "hw": hardware_context(ctx.device, self.target_gpu)}
        return self._static

    def build_user_message(self, ctx: RoundContext) -> tuple[str, bool]:
        fresh = self._pending_fresh or not self.messages
        parent = None
        if ctx.parent is not None:
            p = ctx.parent
            parent = {"id": p.id, "source": p.source, "is_incumbent": ctx.incumbent is not None
                      and p.id == ctx.incumbent.id, "objective": p.score.value if p.score else None,
                      "kind": p.score.kind if p.score else "-"}
        if parent:
            ask = ASK_IMPROVE.format(pid=parent["id"])
        elif ctx.history:
            ask = ASK_FIX
        else:
            ask = ASK_FIRST
        last = [{"id": c.id, "status": c.status, "objective": c.score.value if c.score else None,
                 "decision": c.meta.get("decision", ""), "error": (c.error or "")[:300]} for c in ctx.last]
        if fresh:
            self._first_hits, self._recent_hits = set(), deque(maxlen=self._recent_hits.maxlen)
        present = self._first_hits.union(*self._recent_hits)
        hits = [h for h in ctx.hits if h.id not in present]
        self._pending_hits = {h.id for h in hits}
        text = self.renderer.render(
            "round.j2", first=fresh, summary=ctx.summary if (fresh and ctx.history) else None,
            last=[] if fresh else last, failure=ctx.failure, parent=parent, signals=ctx.signals,
            hits=hits, tried=ctx.tried if fresh else ctx.tried[-4:], techniques=ctx.techniques,
            ask=ask, **self._static_ctx(ctx))
        return text, fresh

    def _conversation(self, user: str, fresh: bool) -> list[Message]:
        if fresh:
            self.messages = []
        keep = self.messages
        tail = 2 * self.cfg.history_rounds
        if len(keep) > 2 + tail:
            keep = keep[:2] + keep[-tail:]
        return keep + [Message("user", user)]

    def propose(self, ctx: RoundContext, n: int) -> list[Proposal]:
        system = self.renderer.render("system.j2")
        if self.independent:
            self._pending_fresh = True
        user, fresh = self.build_user_message(ctx)
        messages = self._conversation(user, fresh)
        self._pending_fresh = False
        if self.store is not None:
            self.store.save_prompt(ctx.round, system, messages)
        parent_src = ctx.parent.source if ctx.parent else None
        out: list[Proposal] = []
        for i in range(n):
            try:
                c = self.llm.complete(messages, system=system, max_tokens=self.cfg.max_tokens,
                                      temperature=self.cfg.temperature,
                                      sample_index=self.sample_base + ctx.round * n + i)
            except BudgetExceeded:
                if not out:
                    raise
                break  # keep the samples already paid for; the loop stops before the next round
            except UnreachableLLMError:
                if not out:
                    raise  # nothing came back this round: the loop ends the run
                break  # keep the replies already in hand; the next round's first call fails the same way
            except TransientLLMError as e:  # retries exhausted: this sample is lost, the run goes on
                out.append(Proposal(None, None, error=str(e), meta={"llm_error": True}))
                continue
            parsed = parse_reply(c.text, parent_src, truncated=c.truncated)
            meta = {"input_tokens": c.input_tokens, "output_tokens": c.output_tokens, "cost_usd": c.cost_usd,
                    "cached": c.cached, "model": f"{c.provider}:{c.model}", "stop_reason": c.stop_reason,
                    "n_edits": parsed.n_edits}
            out.append(Proposal(parsed.source if parsed.ok else None, parsed.kind,
                                ctx.parent.id if (parsed.kind == "edit" and ctx.parent) else None,
                                parsed.techniques, meta, parsed.error, c.text))
        # The conversation continues from the first usable reply (or the first one at all).
        chosen = next((p for p in out if p.source), next((p for p in out if p.reply), None))
        if chosen is not None:
            if len(messages) == 1:
                self._first_hits = self._pending_hits
            else:
                self._recent_hits.append(self._pending_hits)
            self.messages = messages + [Message("assistant", chosen.reply or "")]
        return out
