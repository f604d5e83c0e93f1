"""The measure-revise loop: `run()` repeats `step()`; a step is propose -> evaluate -> decide.

Exits are typed (aka.agent.base.Stop and its kinds). Every event is appended to the run store as it
happens, and the totals are rewritten in `finally:` after every step, so a crash or a kill loses at
most the candidate being evaluated; `aka optimize resume=<id>` picks up from the store.
"""
from __future__ import annotations

import dataclasses
import random
import statistics
import time
import traceback
from dataclasses import dataclass

from aka.agent import dispatch
from aka.agent import dropout as drop
from aka.agent.base import BudgetStop, FatalStop, Proposal, RoundContext, Stalled, Stop, TargetReached
from aka.agent.config import OptimizeConfig
from aka.agent.objective import acceptable, better, compiles_for_gpu, confirmed, score
from aka.agent.shapes import elements
from aka.agent.state import State, make_budget
from aka.agent.store import Candidate, RunStore
from aka.evaluate.api import EvalConfig, evaluate
from aka.evaluate.sandbox import SandboxConfig
from aka.kb.retrieval import Signals
from aka.llm import (BudgetExceeded, ContextTooLongError, FatalLLMError, LLMError, TransientLLMError,
                     UnreachableLLMError)
from aka.util import fmt


# how a decision that promotes a candidate only as fast as the incumbent (a dispatcher tie) begins
TIE = "accepted within noise"
# The closing dispatcher re-measured ahead of the incumbent on every sample: an improvement beyond
# noise, though it may be smaller than eval.min_rel_gain (which other candidates need). On the H100
# (2026-12-06) fp8_kv_decode_attention's dispatcher measured 0.3966-0.3976 against 0.3919-0.3923,
# +1.3%, and was reported as a tie, "not an improvement", because this rule only asked whether the
# incumbent was ahead.
AHEAD = "accepted, faster beyond noise"


@dataclass
class Outcome:
    run_id: str
    stop_kind: str
    reason: str
    incumbent: Candidate | None
    rounds: int


def past_round_walls(events: list[dict]) -> list[float]:
    """Wall seconds of each finished search round in a run's events (round_start to round_end;
    the closing dispatch round is not a search round), in order."""
    import datetime as dt
    out, start = [], None
    for ev in events:
        t = ev.get("type")
        if t == "round_start":
            start = None if ev.get("dispatch") else ev.get("t")
        elif t == "round_end" and start is not None:
            try:
                out.append((dt.datetime.fromisoformat(ev["t"]) - dt.datetime.fromisoformat(start)).total_seconds())
            except (KeyError, TypeError, ValueError):
                pass
            start = None
    return out


class Optimizer:
    def __init__(self, cfg: OptimizeConfig, problem, task, proposer, store: RunStore, *, retriever=None,
                 state: State | None = None, budget=None, view=None):
        self.cfg, self.problem, self.task, self.proposer, self.store = cfg, problem, task, proposer, store
        self.retriever, self.view = retriever, view
        self.state = state or State()
        self.device = task.device
        self.budget = budget or make_budget(cfg, self.state.prior_usage, self.state.prior_wall_s)
        self.rng = random.Random(f"{cfg.seed}:{self.state.round}")  # a resume draws on from where it is
        sizes = sorted(elements(s) for s in task.shapes)
        median = sizes[(len(sizes) - 1) // 2] if sizes else 0  # lower median: two shapes split
        self.small_ids = {s.id for s in task.shapes if elements(s) <= median}
        self.eval_cfg = EvalConfig(device=self.device, draws=cfg.eval.draws, ncu=cfg.eval.ncu,
                                   ncu_stalls=cfg.eval.ncu_stalls, peer=cfg.eval.peer,
                                   compile_report=cfg.eval.compile_report,
                                   sandbox=SandboxConfig(timeout_s=cfg.eval.timeout_s,
                                                         idle_timeout_s=cfg.eval.idle_timeout_s))
        self.t0 = time.monotonic()
        # wall seconds of the run's rounds (the wall budget's forecast): a resumed run starts from
        # those its store recorded, so its first round is forecast too
        self.round_s: list[float] = past_round_walls(store.events())
        # candidates evaluated by this process: after a resume, an incumbent scored in an earlier call
        # (often another machine of the same model) is not one of them, and its stored score is not
        # a sample to set beside today's re-measurements (confirm)
        self.here: set[str] = set()

    # -- events -----------------------------------------------------------------------------
    def emit(self, type_: str, **data) -> dict:
        ev = self.store.event(type_, **data)
        if self.view is not None:
            self.view.on_event(ev, self)
        return ev

    def totals(self) -> dict:
        return {"usage": self.budget.usage.as_dict(), "wall_s": self.state.prior_wall_s + time.monotonic() - self.t0,
                "rounds": self.state.round, "candidates": len(self.state.history),
                "evaluations": sum(c.result is not None for c in self.state.history),
                "incumbent": self.state.incumbent.id if self.state.incumbent else None}

    # -- the loop ---------------------------------------------------------------------------
    def run(self) -> Outcome:
        self.budget.start()
        try:
            self.recover()
            while True:
                try:
                    self.step()
                finally:
                    self.store.save_totals(self.totals())
        except Stop as e:
            if not isinstance(e, FatalStop):
                self.dispatch_round(e)
            if isinstance(e, BudgetStop):
                self.emit("budget", reason=e.reason, usage=self.budget.usage.as_dict())
            if isinstance(e, FatalStop):
                self.emit("fatal", error=e.reason)
            inc = self.state.incumbent
            self.emit("stop", kind=e.kind, reason=e.reason, rounds=self.state.round,
                      incumbent=inc.id if inc else None, objective=inc.score.value if inc and inc.score else None)
            return Outcome(self.store.run_id, e.kind, e.reason, inc, self.state.round)
        except BaseException as e:  # a crash or ^C: on the record, then up
            self.emit("crash", error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc()[-4000:])
            raise
        finally:
            self.store.save_totals(self.totals())

    def recover(self) -> None:
        """After a crash: finish the round that was cut off (evaluate and decide what it left
        undone) before starting a new one."""
        st = self.state
        cut = [c for c in st.history if c.round > st.round]
        if not cut:
            return
        self.emit("recover", round=max(c.round for c in cut), candidates=[c.id for c in cut])
        for c in cut:
            if c.source is not None and c.result is None:
                self.evaluate(c)
            if c.result is not None and "decision" not in c.meta and c is not st.incumbent:
                self.progress(c)
        self.finish_round(max(c.round for c in cut), cut, any(c.accepted or c is st.incumbent for c in cut))

    def check_limits(self, r: int) -> None:
        if r > self.cfg.budget.iterations:
            raise BudgetStop(f"iterations={self.cfg.budget.iterations} reached")
        over = self.budget.exceeded()
        if over is not None:
            raise BudgetStop(str(over))
        limit = self.budget.max_wall_s
        if limit is not None and self.round_s:
            # A round is not started when it would end past the wall budget: the longest of the
            # last three (rounds of 8 ops sharing one GPU took 100+ s, and a budget checked only
            # between rounds overran 320 s by up to 127 s in the H200 sweep, results/h200/agent/).
            need, used = max(self.round_s[-3:]), self.budget.elapsed_s()
            closing = self.dispatch_pending()  # room for the closing dispatch round: about one more round
            if used + need * (2 if closing else 1) > limit:
                then = " and the closing dispatch round" if closing else ""
                # in the run's terms: after a resume the Budget holds only what is left of max_wall_s
                prior = self.state.prior_wall_s
                raise BudgetStop(f"budget: max_wall_s={limit + prior:g} would be passed by another round{then} "
                                 f"(~{need:.0f} s, the longest recent one; {used + prior:.0f} s used"
                                 + (f", {prior:.0f} s of them before this resume)" if prior else ")"))
        if self.state.stall >= self.cfg.stop.stall_rounds:
            raise Stalled(f"no accepted improvement in {self.state.stall} rounds (stop.stall_rounds)")

    def step(self) -> None:
        st = self.state
        r = st.round + 1
        self.check_limits(r)
        t_round = time.monotonic()
        ctx = self.context(r)
        self.emit("round_start", round=r, parent=ctx.parent.id if ctx.parent else None,
                  dropout=ctx.dropout.to_json() if ctx.dropout else None)
        try:
            proposals = self.proposer.propose(ctx, self.cfg.n)
        except BudgetExceeded as e:
            raise BudgetStop(str(e)) from None
        except ContextTooLongError as e:
            self.emit("llm_error", round=r, error=str(e), action="fresh context next round")
            getattr(self.proposer, "reset", lambda: None)()
            proposals = []
        except FatalLLMError as e:
            raise FatalStop(str(e)) from None
        except UnreachableLLMError as e:  # retries spent on a server that never answered: later rounds cannot fare better
            raise FatalStop(f"the LLM server could not be reached: {e}") from None
        except TransientLLMError as e:
            self.emit("llm_error", round=r, error=str(e))
            proposals = []
        except LLMError as e:  # neither transient nor fatal by type (e.g. a scripted model ran dry)
            raise FatalStop(f"{type(e).__name__}: {e}") from None
        st.pending_dropout = None
        for p in [p for p in proposals if p.meta.get("llm_error")]:
            # A sample the provider never delivered is on the record but is no candidate: there is no
            # reply, code or verdict to count.
            self.emit("llm_error", round=r, error=p.error)
        proposals = [p for p in proposals if not p.meta.get("llm_error")]
        improved, this_round = False, []
        if len(proposals) > 1 and self.cfg.eval.parallel > 1:
            # Several candidates: all on the record first, evaluated at once (on one GPU their checks
            # overlap and their timed rounds take turns, aka/evaluate/gpulock.py), then decided in order.
            this_round = [self.admit(p, r) for p in proposals]
            self.evaluate_many([c for c in this_round if c.source is not None])
            for c in this_round:
                if c.source is not None:
                    improved = self.progress(c) or improved
                self.store.save_candidate(c)
        else:
            for p in proposals:
                c = self.admit(p, r)
                this_round.append(c)
                if c.source is not None:
                    self.evaluate(c)
                    improved = self.progress(c) or improved
                self.store.save_candidate(c)
        self.round_s.append(time.monotonic() - t_round)
        self.finish_round(r, this_round, improved)

    def finish_round(self, r: int, this_round: list[Candidate], improved: bool) -> None:
        st = self.state
        st.last, st.round = this_round, r
        st.stall = 0 if improved else st.stall + 1
        inc = st.incumbent
        self.emit("round_end", round=r, improved=improved, stall=st.stall, incumbent=inc.id if inc else None,
                  objective=inc.score.value if inc and inc.score else None,
                  cost_usd=self.budget.usage.cost_usd, tokens=self.budget.usage.input_tokens + self.budget.usage.output_tokens)
        self.check_target()
        since = None if st.last_dropout is None else r - st.last_dropout
        if drop.due(self.cfg.dropout, st.stall, since):
            self.dropout(r)

    def context(self, r: int) -> RoundContext:
        st = self.state
        if not self.cfg.feedback:
            return self.blank_context(r)
        parent = st.get(st.parent_override) or st.incumbent
        sig = Signals.from_result(parent.result if parent else None, self.task.weights, self.small_ids, st.failure)
        hits = []
        if self.retriever is not None and self.cfg.retrieval.enabled:
            k = self.cfg.retrieval.k
            got = self.retriever.retrieve(self.problem, sig, st.techniques(), k + len(st.dropped_hints))
            hits = [h for h in got if h.id not in st.dropped_hints][:k]
            st.hints_seen += [h.id for h in hits if h.id not in st.hints_seen]
            self.emit("retrieval", round=r, hits=[h.id for h in hits], dropped=sorted(st.dropped_hints))
        return RoundContext(r, self.problem, self.task, self.device, parent, st.incumbent, list(st.history),
                            list(st.last), sig, hits, st.techniques(), st.tried_lines(), st.summary(),
                            st.failure, st.pending_dropout)

    def blank_context(self, r: int) -> RoundContext:
        """The best-of-N control: what round 1 sees, every round (no parent, results, history or
        failure), so samples are independent; the incumbent is still kept as the best of them."""
        sig = Signals.from_result(None, self.task.weights, self.small_ids)
        hits = []
        if self.retriever is not None and self.cfg.retrieval.enabled:
            hits = self.retriever.retrieve(self.problem, sig, [], self.cfg.retrieval.k)
            self.emit("retrieval", round=r, hits=[h.id for h in hits], dropped=[])
        return RoundContext(r, self.problem, self.task, self.device, None, None, [], [], sig, hits, [], [], {})

    def admit(self, p: Proposal, r: int) -> Candidate:
        c = Candidate(self.state.next_id(), r, p.source, p.kind, p.parent, p.techniques, dict(p.meta), p.error)
        self.state.history.append(c)
        self.store.save_candidate(c)
        if p.reply is not None:
            self.store.write_text(f"candidates/{c.id}.reply.md", p.reply)
        usage = {k: p.meta.get(k) for k in ("input_tokens", "output_tokens", "cost_usd") if k in p.meta}
        if c.source is None:
            self.emit("invalid_proposal", round=r, candidate=c.id, error=c.error, **usage)
        else:
            self.emit("proposal", round=r, candidate=c.id, kind=c.kind, parent=c.parent, techniques=c.techniques,
                      offline=p.meta.get("offline"), **usage)
        return c

    def _eval(self, c: Candidate, remeasure: bool = False):
        cfg = dataclasses.replace(self.eval_cfg, checks=False) if remeasure else self.eval_cfg
        res = evaluate(self.problem, self.store.candidate_path(c.id), shapes=self.task.ids,
                       config=cfg, source=c.source)
        return res, score(res, self.task.weights, self.device)

    def evaluate_many(self, cands: list[Candidate]) -> None:
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(max(1, min(len(cands), self.cfg.eval.parallel))) as pool:
            done = list(pool.map(self._eval, cands))
        for c, got in zip(cands, done):  # events and files written from this thread only
            self.evaluate(c, got)

    def evaluate(self, c: Candidate, got=None) -> None:
        c.result, c.score = got if got is not None else self._eval(c)
        self.here.add(c.id)
        res = c.result
        self.emit("evaluation", round=c.round, candidate=c.id, status=res.status, reason=res.reason[:400],
                  objective=c.score.value, kind=c.score.kind, per_shape=c.score.per_shape,
                  speedup_eager={s.id: s.speedup_eager for s in res.shapes}, wall_s=res.wall_s.get("total_s"))
        self.store.save_candidate(c)

    def decide(self, c: Candidate, tie_ok: bool = False) -> bool:
        """Promote `c` when it passes and beats the incumbent (beyond noise on a GPU). tie_ok (the
        closing dispatcher, dispatch.accept_within_noise): a GPU candidate within eval.min_rel_gain
        below the incumbent goes to the re-measurement too, and is promoted unless the incumbent is
        faster beyond noise there."""
        inc = self.state.incumbent
        ok, why = acceptable(c.result)
        if ok and self.device.startswith("cpu"):
            ok, why = compiles_for_gpu(c.result)
        tie = tie_ok and inc is not None and not self.device.startswith("cpu")
        if ok and not better(c.score, inc.score if inc else None) and not (
                tie and better(c.score, inc.score, -self.cfg.eval.min_rel_gain)):
            ok, why = False, f"not better than {inc.id}: {fmt(c.score.value)} vs {fmt(inc.score.value)}"
        if ok and inc is not None and not self.device.startswith("cpu"):
            ok, why = self.confirm(c, inc, not_worse=tie)
        tie_won = ok and why.startswith(TIE)
        c.meta["decision"] = (why if tie_won or why.startswith(AHEAD) else "accepted") if ok else why
        c.accepted = ok
        self.store.save_candidate(c)  # the decision is on disk before the event that announces it
        if not ok:
            self.emit("rejected", round=c.round, candidate=c.id, reason=why)
            return False
        self.state.incumbent, self.state.parent_override = c, None
        self.store.save_best(c)
        self.emit("accepted", round=c.round, candidate=c.id, objective=c.score.value, kind=c.score.kind,
                  previous=inc.id if inc else None, previous_objective=inc.score.value if inc else None,
                  **({"within_noise": True} if tie_won else {}))
        return True

    def progress(self, c: Candidate) -> bool:
        """Whether `c` moves the run on: accepted, or (dispatch on) faster beyond noise than every
        earlier passing candidate on some shape, which the closing dispatcher can use."""
        if self.decide(c):
            return True
        if not self.cfg.dispatch.enabled or self.device.startswith("cpu"):
            return False
        gain = dispatch.envelope_gain(c, self.state.history, self.task.ids)
        if gain:
            c.meta["envelope"] = gain
            self.store.save_candidate(c)
            self.emit("envelope", round=c.round, candidate=c.id, shapes=gain)
        return bool(gain)

    def dispatch_pending(self) -> bool:
        """A closing dispatch round would have at least two passing, timed variants to choose from."""
        if not self.cfg.dispatch.enabled or self.device.startswith("cpu"):
            return False
        got, _ = dispatch.eligible([c for c in self.state.history if c.kind != "dispatch"], self.task.ids)
        return len(got) >= 2

    def dispatch_round(self, stop: Stop) -> None:
        """The closing round: one candidate dispatching each shape to the variant measured fastest
        on it (aka/agent/dispatch.py), evaluated as a whole, promoted by `decide`: beyond noise, or on a
        tie when dispatch.accept_within_noise (by construction no shape runs slower than its fastest variant)."""
        if not self.cfg.dispatch.enabled:
            return
        st = self.state
        done = [c for c in st.history if c.kind == "dispatch"]
        try:
            source, info = dispatch.build(st.history, self.problem, self.task)
        except dispatch.DispatchError as e:
            self.emit("dispatch", built=False, reason=str(e))
            return
        except Exception as e:  # noqa: BLE001 - the run's results stand; the report says why there is no dispatcher
            self.emit("dispatch", built=False, reason=f"{type(e).__name__}: {e}", traceback=traceback.format_exc()[-2000:])
            return
        if done and done[-1].meta.get("dispatch", {}).get("eligible") == info["eligible"]:
            self.emit("dispatch", built=False, reason=f"{done[-1].id} was built from these variants already")
            return
        limit = self.budget.max_wall_s
        if isinstance(stop, BudgetStop) and limit is not None and self.round_s \
                and self.budget.elapsed_s() + max(self.round_s[-3:]) > limit:
            self.emit("dispatch", built=False, reason=f"max_wall_s={limit + self.state.prior_wall_s:g} "
                                                       "leaves no room for its evaluation")
            return
        r = st.round + 1
        self.emit("round_start", round=r, parent=None, dropout=None, dispatch=True)
        c = self.admit(Proposal(source, "dispatch", None, [], {"dispatch": info}), r)
        self.evaluate(c)
        self.decide(c, tie_ok=self.cfg.dispatch.accept_within_noise)
        self.store.save_candidate(c)
        st.last, st.round = [c], r
        inc = st.incumbent
        self.emit("round_end", round=r, improved=c.accepted, stall=0 if c.accepted else st.stall + 1,
                  incumbent=inc.id if inc else None, objective=inc.score.value if inc and inc.score else None,
                  cost_usd=self.budget.usage.cost_usd,
                  tokens=self.budget.usage.input_tokens + self.budget.usage.output_tokens)
        self.emit("dispatch", built=True, candidate=c.id, variants=info["variants"], table=info["table"],
                  predicted_objective=info["predicted_objective"], objective=c.score.value if c.score else None,
                  status=c.status, accepted=c.accepted)
        self.store.save_totals(self.totals())

    def confirm(self, c: Candidate, inc: Candidate, not_worse: bool = False) -> tuple[bool, str]:
        """GPU: re-measure challenger and incumbent together, `confirm_repeats` times, before a promotion.
        not_worse: the challenger passes unless the incumbent is faster beyond noise (a tie promotes).
        An incumbent scored before a resume (not in self.here) is re-measured once more in place of its
        stored score, so every sample compared was taken on the machine in hand."""
        k, gain = self.cfg.eval.confirm_repeats, self.cfg.eval.min_rel_gain
        if k == 0:
            if not_worse:
                ok = not better(inc.score, c.score, gain)
                return ok, (f"{TIE} (no re-measurement: eval.confirm_repeats=0)" if ok
                           else f"{inc.id} ahead by eval.min_rel_gain={gain} or more")
            ok = better(c.score, inc.score, gain)
            return ok, "accepted" if ok else f"gain under eval.min_rel_gain={gain}"
        earlier = inc.id not in self.here   # scored before a resume: re-measured instead
        ch, ic = [c.score.value], ([] if earlier else [inc.score.value])
        inc_failed: list[str] = []  # the incumbent failing its re-measurement: on the record, never silent
        if earlier:
            res, s = self._eval(inc, remeasure=True)
            if s.value is not None and s.kind == c.score.kind:
                ic.append(s.value)
            else:
                inc_failed.append(f"{res.status} {res.reason[:160]}")
        from concurrent.futures import ThreadPoolExecutor
        for i in range(k):
            # Both re-measured at once (timing only: both passed the checks already, and the timed
            # output is still checked); on one GPU their timed rounds take turns shape by shape.
            order = [(c, ch), (inc, ic)] if i % 2 == 0 else [(inc, ic), (c, ch)]
            with ThreadPoolExecutor(2) as pool:
                got = list(pool.map(lambda pair: self._eval(pair[0], remeasure=True), order))
            for (who, samples), (res, s) in zip(order, got):
                if s.value is None and who is c:
                    self.emit("confirm", candidate=c.id, incumbent=inc.id, challenger=ch, incumbent_samples=ic,
                              verdict=f"challenger failed on re-evaluation: {res.status}")
                    return False, f"failed on re-evaluation: {res.status} {res.reason[:120]}"
                if s.value is None and who is inc:
                    inc_failed.append(f"{res.status} {res.reason[:160]}")
                if s.value is not None and s.kind == c.score.kind:
                    samples.append(s.value)
        extra = {"incumbent_failed": inc_failed} if inc_failed else {}
        if earlier:
            extra["incumbent_score_set_aside"] = inc.score.value   # measured in an earlier call of the run
        if not_worse:
            # the incumbent must not win beyond noise at any gain: a steady small loss (a dispatch
            # overhead) separates the samples and rejects; overlapping samples are a tie; a steady
            # small gain is a gain, whether or not it reaches min_rel_gain
            ok = not confirmed(ic, ch, 0.0)
            ahead = ok and confirmed(ch, ic, 0.0)
            mc, mi = statistics.median(ch), statistics.median(ic)
            verdict = (f"median {mc:.4g} vs {mi:.4g}: "
                       + (f"faster beyond noise, {100 * (mc / mi - 1):+.1f}%" if ahead
                          else "within noise" if ok else f"{inc.id} faster beyond noise"))
            self.emit("confirm", candidate=c.id, incumbent=inc.id, challenger=ch, incumbent_samples=ic,
                      verdict=verdict, rule="not_worse", **extra)
            if ahead and confirmed(ch, ic, gain):
                return ok, "accepted"        # ahead by min_rel_gain or more: the ordinary promotion
            if ahead:
                return ok, f"{AHEAD} ({verdict}; under eval.min_rel_gain={gain}, which other candidates need)"
            return ok, f"{TIE} ({verdict})" if ok else f"not even ({verdict})"
        ok = confirmed(ch, ic, gain)
        verdict = (f"median {statistics.median(ch):.4g} vs {statistics.median(ic):.4g}: "
                   + ("beyond noise" if ok else "within noise"))
        self.emit("confirm", candidate=c.id, incumbent=inc.id, challenger=ch, incumbent_samples=ic, verdict=verdict,
                  **extra)
        return ok, "accepted" if ok else f"not beyond noise ({verdict})"

    def check_target(self) -> None:
        inc = self.state.incumbent
        if inc is None or inc.score is None or inc.score.value is None:
            return
        if inc.score.kind == "pass_rate" and self.cfg.stop.cpu_stop_on_pass and inc.score.value >= 1.0:
            raise TargetReached(f"{inc.id} is correct on every shape; without a GPU nothing more can be measured")
        target = self.cfg.stop.target_sol
        if target is not None and inc.score.kind == "sol_fraction" and inc.score.value >= target:
            raise TargetReached(f"{inc.id} reached objective {inc.score.value:.3f} >= stop.target_sol={target}")

    def dropout(self, r: int) -> None:
        st = self.state
        passing = [(c.id, c.score.value) for c in st.history if c.status == "pass" and c.score and c.score.value]
        d = drop.decide(self.cfg.dropout, self.rng, r, [t for c in st.history for t in c.techniques],
                        st.hints_seen, passing, st.incumbent.id if st.incumbent else None)
        st.last_dropout, st.pending_dropout = r, d
        st.dropped_techniques, st.dropped_hints = set(d.dropped_techniques), set(d.dropped_hints)
        st.parent_override = d.restart_parent
        self.emit("dropout", **d.to_json(), stall=st.stall)
        self.proposer.on_dropout(d)
