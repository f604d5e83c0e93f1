"""The end of a run: report.md, progress.png, a drop-in kernel_module.py, the re-verify command."""
from __future__ import annotations

import ast
import re
import shlex
from pathlib import Path

from aka.agent.shapes import shapes_text
from aka.agent.state import State
from aka.agent.store import RunStore, now
from aka.util import fmt, parse_py


def verify_command(store: RunStore, problem, task) -> str:
    return " ".join(["aka", "eval", shlex.quote(str(problem.root)), shlex.quote(str(store.root / "best.py")),
                     "--shapes", ",".join(task.ids), "--device", "cpu" if task.device.startswith("cpu") else "cuda"])


def _forward_signature(reference: Path) -> tuple[list[tuple[str, str]], str]:
    """[(name, annotation)] of Model.forward and its return annotation, as source text."""
    tree = parse_py(reference.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model")
    fwd = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "forward")
    args = [(a.arg, ast.unparse(a.annotation) if a.annotation else "torch.Tensor") for a in fwd.args.args[1:]]
    return args, ast.unparse(fwd.returns) if fwd.returns else "torch.Tensor"


KERNEL_MODULE = '''"""Drop-in module for the best kernel of aka run {run_id} ({op}).

    from kernel_module import ModelNew          # the verified nn.Module
    op = register_custom_op(**init_kwargs)      # optional: torch.ops.{ns}.{name}(...)

Re-verify with: {verify}
"""
import importlib.util
from pathlib import Path

import torch

_HERE = Path(__file__).resolve().parent


def _load(name, file):
    spec = importlib.util.spec_from_file_location(name, _HERE / file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ModelNew = _load("aka_best_{tag}", "best.py").ModelNew


def register_custom_op(name="{ns}::{name}", **init_kwargs):
    """Register the kernel as the torch.library custom op `name` (one module instance built from
    init_kwargs). Its fake (meta) implementation runs the PyTorch reference on fake tensors, so
    torch.compile can trace through the op."""
    {unsupported}model = ModelNew(**init_kwargs)
    reference = _load("aka_reference_{tag}", "reference.py").Model(**init_kwargs)

    @torch.library.custom_op(name, mutates_args={mutates!r})
    def _op({params}) -> {ret}:
        return model({call})

    @_op.register_fake
    def _fake({names}):
        return reference({call})

    return _op
'''


def write_kernel_module(store: RunStore, problem, task) -> Path:
    args, ret = _forward_signature(problem.reference_path)
    store.write_text("reference.py", problem.reference_path.read_text())
    name = re.sub(r"\W", "_", problem.name)
    unsupported = ""
    if "dict" in ret.lower():
        unsupported = ('raise NotImplementedError("torch.library custom ops cannot return a dict; '
                       'use ModelNew directly")\n    ')
    text = KERNEL_MODULE.format(
        run_id=store.run_id, op=problem.name, ns="aka", name=name, tag=re.sub(r"\W", "_", store.run_id),
        verify=verify_command(store, problem, task), mutates=tuple(problem.meta.get("mutates") or ()),
        params=", ".join(f"{a}: {t}" for a, t in args), ret=ret, names=", ".join(a for a, _ in args),
        call=", ".join(f"{a}={a}" for a, _ in args), unsupported=unsupported)
    return store.write_text("kernel_module.py", text)


def plot(store: RunStore, state: State, task) -> tuple[Path | None, str, bool]:
    """(progress.png or None, the line for the report, whether a plot that should exist is missing)."""
    from aka.plots import failed, pyplot
    scored = [c for c in state.history if c.score is not None and c.score.value is not None]
    if not scored:
        return None, "No candidate was scored: nothing to plot.", False
    plt, why = pyplot()
    if plt is None:
        return None, f"progress plot not drawn: {why}", True
    try:
        return _draw(plt, store, state, task, scored), "", False
    except Exception as e:  # noqa: BLE001 - said in the report and on the console; the tables stand
        plt.close("all")
        return None, failed("the progress plot", e), True


def _draw(plt, store: RunStore, state: State, task, scored) -> Path:
    kind = scored[-1].score.kind
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
    xs = [int(c.id[1:]) for c in scored]
    a1.scatter(xs, [c.score.value for c in scored], s=14, c=["tab:green" if c.accepted else "tab:gray" for c in scored])
    best, steps = None, []
    for c in state.history:
        if c.accepted:
            best = c
        steps.append((int(c.id[1:]), best.score.value if best else None))
    a1.step([x for x, v in steps if v is not None], [v for _, v in steps if v is not None], where="post",
            color="tab:green", label="incumbent")
    a1.set_ylabel(f"objective ({kind})")
    a1.legend(loc="lower right")
    for sid in task.ids:
        pts = [(int(c.id[1:]), c.score.per_shape.get(sid)) for c in state.history if c.accepted and c.score]
        pts = [(x, v) for x, v in pts if v is not None]
        if pts:
            # marked points: a run whose first candidate passed has one acceptance and no step to draw
            a2.step([x for x, _ in pts] + [len(state.history)], [v for _, v in pts] + [pts[-1][1]], where="post",
                    label=sid, marker="o", markersize=3)
    a2.set_ylabel("pass" if kind == "pass_rate" else "sol_fraction of the incumbent")
    a2.set_xlabel("candidate")
    a2.set_xlim(0.5, len(state.history) + 0.5)
    n = len(state.history)  # candidates are numbered c0001, c0002, ...: whole-number ticks only
    if n <= 20:
        a2.set_xticks(range(1, n + 1))
    else:
        a2.xaxis.set_major_locator(plt.MaxNLocator(integer=True))
    if kind == "pass_rate":  # a fraction of shapes passing: the whole 0..1 range, not a zoom on one value
        a1.set_ylim(-0.05, 1.05)
        a2.set_ylim(-0.05, 1.05)
    if a2.get_lines():
        a2.legend(fontsize=7, ncol=4)
    fig.suptitle(f"{store.run_id}")
    path = store.root / "progress.png"
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def dispatch_section(store: RunStore, state: State) -> list[str]:
    """## Dispatch: what the closing round built (or why not) and, per shape, the dispatcher's own
    time against the fastest variant's."""
    from aka.agent.dispatch import comparison_rows
    events = [e for e in store.events() if e["type"] == "dispatch"]
    if not events:
        return []
    built = [e for e in events if e.get("built")]
    e = built[-1] if built else events[-1]  # a later "built from these variants already" changes nothing
    out = ["", "## Dispatch", ""]
    if not e.get("built"):
        return out + [f"No dispatching candidate: {e.get('reason', '-')}"]
    c = state.get(e["candidate"])
    if c is None:
        return out + [f"{e['candidate']} is not in the store"]
    info = c.meta.get("dispatch", {})
    first = next((h for h in state.history if h.score is not None and h.score.value is not None
                  and h.kind != "dispatch"), None)
    single = max((h for h in state.history if h.kind != "dispatch" and h.score and h.score.value is not None
                  and h.status == "pass"), key=lambda h: h.score.value, default=None)
    out.append(f"{c.id} dispatches to {', '.join(info.get('variants', []))} (chosen from {len(info.get('eligible', []))} "
               f"passing variants): status {c.status}, objective {fmt(c.score.value if c.score else None)} measured, "
               f"{fmt(info.get('predicted_objective'))} predicted from the variants' own times; best single variant "
               f"{single.id + ' ' + fmt(single.score.value) if single else '-'}; first scored candidate "
               f"{first.id + ' ' + fmt(first.score.value) if first else '-'}; {c.meta.get('decision', '-')}.")
    out += ["", "| shape | fastest variant, µs | dispatched to | dispatcher µs [95% CI] | fastest ÷ dispatcher | vs fastest |",
            "| --- | --- | --- | --- | --- | --- |"]
    return out + comparison_rows(info, c.result, state.history)


def write_report(store: RunStore, state: State, problem, task, cfg, proposer_name: str,
                 stop: tuple[str, str] | None, say=None) -> Path:
    """report.md (and progress.png, kernel_module.py); `say(line)` hears of a plot that could not be drawn."""
    inc = state.incumbent
    env = inc.result.env if inc and inc.result else {}
    lines = [f"# aka optimize: {problem.name} — run {store.run_id}", "",
             f"- written {now()}; device {task.device}; gpu {env.get('gpu') or 'none'}; torch {env.get('torch', '-')}; "
             f"triton {env.get('triton', '-')}; git {env.get('git_sha', '-')}",
             f"- problem `{problem.root}`; shapes {', '.join(task.ids)}"
             + (f" (requested {shapes_text(task.requested)})" if task.requested != task.shapes else ""),
             f"- proposer {proposer_name}; rounds {state.round}; candidates {len(state.history)}"]
    if task.note:
        lines.append(f"- **{task.note}**")
    if stop:
        lines.append(f"- stopped: {stop[0]}: {stop[1]}")
    totals = store.totals()
    u = totals.get("usage", {})
    lines.append(f"- spend: {u.get('calls', 0)} LLM calls, {u.get('input_tokens', 0)} input + "
                 f"{u.get('output_tokens', 0)} output tokens, ${u.get('cost_usd', 0.0):.2f}; "
                 f"wall {totals.get('wall_s', 0.0):.0f} s")
    lines += ["", "## Best kernel", ""]
    if inc is None:
        lines.append("No candidate passed: there is no best kernel.")
    else:
        lines += [f"`best.py` = {inc.id} (round {inc.round}), objective {fmt(inc.score.value)} ({inc.score.kind}); "
                  f"techniques: {', '.join(inc.techniques) or '-'}", "",
                  "Re-verify (exit status 0 when it passes, 1 when it does not; `aka eval --help`):", "", "```",
                  verify_command(store, problem, task), "```", "",
                  "Drop-in: `kernel_module.py` (imports ModelNew; `register_custom_op()` registers a torch.library op).",
                  "", "sol_fraction is against the datasheet roofline; the measured one uses `aka hw calibrate`'s "
                  "ceilings (copy bandwidth, matmul rates) when they are cached.", "",
                  "| shape | ok | time µs | SOL µs | sol_fraction | of measured ceiling | bound | ×eager | ×compile | ×peer |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for s in inc.result.shapes:
            lines.append(f"| {s.id} {s.label} | {fmt(s.correct)} | {fmt(s.time_us, '.2f')} | {fmt(s.sol_us, '.2f')} | "
                         f"{fmt(s.sol_fraction, '.3f')} | {fmt(s.sol_fraction_measured, '.3f')} | {s.bound or '-'} | "
                         f"{fmt(s.speedup_eager, '.2f')} | {fmt(s.speedup_compile, '.2f')} | "
                         f"{fmt(s.speedup_peer, '.2f')} |")
        lines += ["", _peer_line(inc.result, problem)]
    lines += ["", "## Trajectory", "", "| candidate | round | kind | parent | status | objective | decision |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    for c in state.history:
        what = c.kind or "-"
        if c.meta.get("offline"):
            what = f"{c.meta['offline']['family']} {c.meta['offline']['params']}"
        if c.meta.get("retune"):
            rt = c.meta["retune"]
            what = (f"{c.meta['offline']['family']}, table re-tuned here ({rt.get('correct')} correct configurations "
                    f"of {rt.get('records')}, {len(rt.get('shapes') or [])} shapes, {fmt(rt.get('wall_s'), '.0f')} s)")
        if c.meta.get("dispatch"):
            what = "dispatch of " + ", ".join(c.meta["dispatch"].get("variants", []))
        decision = c.meta.get("decision") or (c.error or "")[:120]
        lines.append(f"| {c.id} | {c.round} | {what} | {c.parent or '-'} | {c.status} | "
                     f"{fmt(c.score.value) if c.score else '-'} | {decision.replace('|', '/')} |")
    lines += dispatch_section(store, state)
    lines += retune_section(state)
    drops = [e for e in store.events() if e["type"] == "dropout"]
    if drops:
        lines += ["", "## Dropouts", ""]
        for e in drops:
            lines.append(f"- round {e['round']}: fresh context {e['fresh_context']}, dropped techniques "
                         f"{e['dropped_techniques']}, dropped hints {e['dropped_hints']}, restart {e['restart_parent']}")
    png, note, missing = plot(store, state, task)
    lines += ["", "## Progress", "", f"![progress]({png.name})" if png else note, ""]
    if missing and say is not None:
        say(note)
    if inc is not None:
        write_kernel_module(store, problem, task)
    return store.write_text("report.md", "\n".join(lines))


def retune_section(state) -> list[str]:
    """## Re-tune: each re-tuned table the offline search proposed (tuner, counts, where its JSON is),
    and each re-tune it skipped with the reason."""
    done = [c for c in state.history if c.meta.get("retune")]
    skipped = [n for c in state.history for n in (c.meta.get("offline") or {}).get("notes", []) if "re-tune" in n]
    if not done and not skipped:
        return []
    lines = ["", "## Re-tune", ""]
    for c in done:
        rt = c.meta["retune"]
        lines.append(f"- {c.id}: `{rt.get('tuner')}`: {rt.get('correct')} correct configurations of "
                     f"{rt.get('records')} measured in {fmt(rt.get('wall_s'), '.0f')} s over shapes "
                     f"{', '.join(rt.get('shapes') or [])}; the fastest per shape baked into the candidate "
                     f"(`{rt.get('tune_json')}`); then judged and timed as any candidate: {c.meta.get('decision', '-')}.")
    lines += [f"- skipped: {n}" for n in skipped]
    return lines


def _peer_line(result, problem) -> str:
    """What ×peer is against, or why the column is empty."""
    peer = (result.env or {}).get("peer")
    if peer and peer.get("unavailable"):
        return f"×peer: {peer['name']} ({peer['library']}) did not run: {peer['unavailable']}."
    if peer:
        return (f"×peer: against {peer['name']} ({peer['library']} {peer['version']}), {peer.get('what', '')}, "
                "timed in the same rounds.")
    meta = getattr(problem, "meta", None) or {}
    if meta.get("peer"):
        return "×peer: the op's peer was not timed (no GPU timing in this run)."
    return "×peer: this op has no production peer" + (f" ({meta['peer_why']})." if meta.get("peer_why") else ".")
