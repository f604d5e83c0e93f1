"""What a person watching sees: one line per notable event, and (on a terminal) a live panel with
the round, the best objective, the incumbent's per-shape sol_fraction or pass, speedups and spend."""
from __future__ import annotations

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from aka.util import fmt

_COLOUR = {"accepted": "green", "rejected": "yellow", "invalid_proposal": "magenta", "llm_error": "magenta",
           "dropout": "cyan", "dispatch": "cyan", "fatal": "bold red", "crash": "bold red", "stop": "bold", "budget": "bold"}


def event_line(ev: dict) -> str | None:
    t = ev["type"]
    if t == "round_start" and not ev.get("dispatch"):
        return f"round {ev['round']}" + (f" (parent {ev['parent']})" if ev.get("parent") else "")
    if t == "proposal":
        off = ev.get("offline")
        what = f"{off['family']} {off['params']} — {off['why']}" if off else ev.get("kind", "")
        return f"  {ev['candidate']}: proposed {what}"
    if t == "invalid_proposal":
        return f"  {ev['candidate']}: no candidate: {ev['error']}"
    if t == "llm_error":
        return f"  LLM error: {ev['error']}"
    if t == "evaluation":
        obj = f" objective {fmt(ev['objective'])} ({ev['kind']})" if ev.get("objective") is not None else ""
        return f"  {ev['candidate']}: {ev['status']}{obj}" + (f" — {ev['reason'][:160]}" if ev["status"] != "pass" else "")
    if t == "accepted":
        tie = " within noise of the incumbent, not an improvement" if ev.get("within_noise") else ""
        return (f"  {ev['candidate']}: ACCEPTED{tie}, objective {fmt(ev['objective'])} "
                f"(was {fmt(ev.get('previous_objective'))})")
    if t == "rejected":
        return f"  {ev['candidate']}: rejected: {ev['reason']}"
    if t == "confirm":
        return f"  {ev['candidate']} vs {ev['incumbent']}: {ev['verdict']}"
    if t == "dropout":
        bits = ["fresh context" if ev.get("fresh_context") else None,
               f"dropped techniques {ev['dropped_techniques']}" if ev.get("dropped_techniques") else None,
               f"dropped hints {ev['dropped_hints']}" if ev.get("dropped_hints") else None,
               f"restart from {ev['restart_parent']}" if ev.get("restart_parent") else None]
        return f"dropout after {ev['stall']} stalled rounds: " + (", ".join(b for b in bits if b) or "nothing dropped")
    if t == "round_start" and ev.get("dispatch"):
        return f"round {ev['round']}: closing dispatch round"
    if t == "envelope":
        return f"  {ev['candidate']}: fastest beyond noise on shape(s) {', '.join(ev['shapes'])} (kept for the dispatcher)"
    if t == "dispatch":
        if not ev.get("built"):
            return f"dispatch: not built: {ev['reason']}"
        table = ", ".join(f"{s}->{v}" for s, v in ev["table"].items())
        return (f"dispatch: {ev['candidate']} over {', '.join(ev['variants'])} ({table}); predicted "
                f"{fmt(ev.get('predicted_objective'))}, measured {fmt(ev.get('objective'))}, "
                + ("accepted" if ev.get("accepted") else "not accepted"))
    if t in ("fatal", "crash"):
        return f"{t}: {ev['error']}"
    if t == "budget":
        return f"budget: {ev['reason']}"
    if t == "stop":
        return f"stopped ({ev['kind']}): {ev['reason']}"
    return None


class LiveView:
    def __init__(self, console: Console | None = None, live: bool = False, header: str = ""):
        self.console = console or Console(soft_wrap=True)
        self.header = header
        self._live = Live(console=self.console, refresh_per_second=4, transient=False) if live else None

    def __enter__(self) -> "LiveView":
        if self._live is not None:
            self._live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)

    def on_event(self, ev: dict, opt) -> None:
        line = event_line(ev)
        if line:
            colour = _COLOUR.get(ev["type"])
            self.console.print(f"[{colour}]{line}[/]" if colour else line, highlight=False, markup=True,
                               soft_wrap=True)
        if self._live is not None:
            self._live.update(self.panel(opt))

    def panel(self, opt) -> Group:
        st, cfg, u = opt.state, opt.cfg, opt.budget.usage
        inc = st.incumbent
        best = f"{fmt(inc.score.value)} ({inc.score.kind}, {inc.id})" if inc and inc.score else "none yet"
        spend = (f"{u.calls} calls, {u.input_tokens + u.output_tokens} tokens, ${u.cost_usd:.2f}, "
                 f"{opt.budget.elapsed_s():.0f} s")
        t = Table(title=f"{self.header} — round {st.round}/{cfg.budget.iterations} — best {best} — {spend}",
                  title_justify="left")
        for col in ("shape", "weight", "pass" if opt.device.startswith("cpu") else "sol_fraction", "×eager", "×compile",
                    "×peer"):
            t.add_column(col, justify="left" if col == "shape" else "right")
        if inc and inc.result:
            for s in inc.result.shapes:
                v = fmt(s.correct) if opt.device.startswith("cpu") else fmt(s.sol_fraction, ".3f")
                t.add_row(f"{s.id} {s.label}"[:40], fmt(opt.task.weights.get(s.id, 1.0)), v,
                          fmt(s.speedup_eager, ".2f"), fmt(s.speedup_compile, ".2f"), fmt(s.speedup_peer, ".2f"))
        return Group(t)
