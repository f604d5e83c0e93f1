"""Per-shape dispatch: one candidate that sends each shape to the variant measured fastest on it.

Libraries ship a configuration per shape bucket (vLLM's fused_moe config tables, cuBLAS's
heuristics); here the buckets come from the search's own measurements. Every passing candidate of
a run was timed on every task shape, and on gemm_bf16 the decode and prefill families each win
half the shapes by 2-5x (results/kb/kernels/gemm_bf16/: split-K 18 us vs 75 us at M=1, grouped
tiles 1661 us vs 8361 us at M=4096), so no single variant is best everywhere.

- Only candidates whose evaluation is an honest pass on every task shape, with a time on each,
  enter (`eligible`): a dispatch cannot route any shape to a variant that failed anywhere.
- Per shape the fastest median wins; variants whose 95% CI overlaps the winner's are ties, and
  ties go to the variant that wins the most weight, so the dispatcher carries as few variants as
  the measurements allow (`plan`).
- The table is exact (the key of each task shape's inputs: shapes, dtypes, scalars), with the
  nearest measured shape of the same structure as the fallback for a shape never measured
  (aka/agent/dispatch_runtime.py, whose text the generated file carries).
- The generated file (`generate`) is an ordinary candidate: every variant's source as written,
  its names prefixed (aka/agent/merge.py), and a ModelNew that builds each variant from the same
  init arguments and forwards to the one the table names. The loop evaluates it again as a whole,
  and it replaces the incumbent only by the ordinary rules (aka/agent/loop.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from aka.agent.merge import MergeError, rename, shared_imports
from aka.agent.objective import acceptable
from aka.evaluate.static import check_source
from aka.objective import objective


RUNTIME = Path(__file__).with_name("dispatch_runtime.py")  # copied into every dispatcher


class DispatchError(ValueError):
    """Why no dispatching candidate can be built from these variants."""


@dataclass
class Timed:
    """One variant's per-shape medians and 95% CIs (microseconds)."""
    id: str
    source: str
    times: dict[str, float]
    ci: dict[str, tuple[float, float]]
    sol: dict[str, float | None] = field(default_factory=dict)
    label: str = ""


@dataclass
class Plan:
    variants: list[Timed]              # the variants the dispatcher carries, in table index order
    table: dict[str, int]              # shape id -> index into variants
    default: int                       # the variant that wins the most weight (unseen structures)
    fastest: dict[str, str]            # shape id -> the variant with the lowest median (before ties)
    ties: dict[str, list[str]]         # shape id -> variants within the fastest one's CI

    def expected_us(self, shape_id: str) -> float:
        return self.variants[self.table[shape_id]].times[shape_id]

    def to_json(self) -> dict:
        return {"variants": [v.id for v in self.variants], "table": {s: self.variants[i].id for s, i in self.table.items()},
                "default": self.variants[self.default].id, "fastest": self.fastest, "ties": self.ties}


def eligible(candidates, shape_ids: list[str]) -> tuple[list[Timed], list[str]]:
    """(timed variants, one line per candidate left out and why). A candidate enters only when its
    evaluation passed every stage (aka.agent.objective.acceptable) and timed every task shape."""
    out, skipped = [], []
    for c in candidates:
        res = getattr(c, "result", None)
        if res is None or c.source is None:
            continue
        ok, why = acceptable(res)
        if not ok:
            skipped.append(f"{c.id}: {why}")
            continue
        by_id = {s.id: s for s in res.shapes}
        missing = [i for i in shape_ids if by_id.get(i) is None or not by_id[i].time_us or by_id[i].correct is not True]
        if missing:
            skipped.append(f"{c.id}: no time on shape(s) {', '.join(missing[:4])}")
            continue
        ci = {}
        for i in shape_ids:
            lo_hi = by_id[i].time_ci_us
            t = by_id[i].time_us
            ci[i] = (float(lo_hi[0]), float(lo_hi[1])) if lo_hi and len(lo_hi) == 2 else (t, t)
        off = (c.meta or {}).get("offline") or {}
        label = f"{off['family']} {off['params']}" if off else (c.kind or "")
        out.append(Timed(c.id, c.source, {i: float(by_id[i].time_us) for i in shape_ids}, ci,
                         {i: by_id[i].sol_fraction for i in shape_ids}, label))
    return out, skipped


def plan(variants: list[Timed], shape_ids: list[str], weights: dict[str, float]) -> Plan:
    """Per shape the fastest median; within its CI, the variant winning the most weight overall."""
    if not variants:
        raise DispatchError("no passing variant with a time on every shape")
    fastest = {s: min(variants, key=lambda v: (v.times[s], v.id)).id for s in shape_ids}
    by_id = {v.id: v for v in variants}
    ties = {}
    for s in shape_ids:
        hi = by_id[fastest[s]].ci[s][1]
        ties[s] = [v.id for v in variants if v.ci[s][0] <= hi]
    won = {v.id: 0.0 for v in variants}
    for s in shape_ids:
        won[fastest[s]] += weights.get(s, 1.0)
    picks = dict(fastest)
    for _ in range(3):  # re-rank by what the picks win until they settle (two passes suffice in practice)
        rank = sorted(variants, key=lambda v: (-won[v.id], v.id))
        picks = {s: next(v.id for v in rank if v.id in ties[s]) for s in shape_ids}
        new = {v.id: 0.0 for v in variants}
        for s in shape_ids:
            new[picks[s]] += weights.get(s, 1.0)
        if new == won:
            break
        won = new
    used = sorted({p for p in picks.values()}, key=lambda i: (-won[i], i))
    index = {vid: k for k, vid in enumerate(used)}
    return Plan([by_id[i] for i in used], {s: index[picks[s]] for s in shape_ids}, 0, fastest, ties)


def predicted_objective(p: Plan, shape_ids: list[str], weights: dict[str, float]) -> float | None:
    """The objective the table promises from the variants' own measurements (the dispatcher is
    measured again; this is what to compare that measurement with)."""
    return objective([p.variants[p.table[s]].sol.get(s) for s in shape_ids], [weights.get(s, 1.0) for s in shape_ids])


class _Recorder:
    """Receives a forward call the way the harness makes it (aka.evaluate.loader.call)."""

    def __call__(self, *args, **kwargs):
        from aka.agent.dispatch_runtime import aka_key  # torch: imported only when a table is built
        return aka_key(args, kwargs)


def shape_keys(problem, shapes, device: str | None = None) -> dict[str, tuple]:
    """The dispatch key of each shape's inputs, built on the meta device (no memory, no compute)
    where the op's input maker allows it, else on `device` (the run's), else on the CPU. An input
    maker that reads values (fp8_kv_decode_attention quantises its cache: `.item()`) cannot run on
    meta, and on the CPU its bench shapes took 4-37 s each here (2 cores): on the H100, 2026-12-06,
    keying its 12 shapes on the CPU outlasted the closing dispatch round's place in the budget."""
    from aka.evaluate.loader import ProblemRuntime, call
    out, runtimes = {}, {}
    order = list(dict.fromkeys(d for d in ("meta", device, "cpu") if d))
    for s in shapes:
        for where in order:
            try:
                rt = runtimes.get(where) or runtimes.setdefault(where, ProblemRuntime(problem.worker_spec(), where))
                out[s.id] = call(_Recorder(), rt.make_inputs(s.to_json()))
                break
            except Exception as e:  # noqa: BLE001 - an input maker that needs real data: try the next device
                err = e
        else:
            raise DispatchError(f"shape {s.id}: its inputs could not be built to key the table: {err}")
    return out


def unify(p: Plan, keys: dict[str, tuple], weights: dict[str, float]) -> tuple[Plan, list[str]]:
    """Shapes whose inputs share one key (they differ in init arguments or tensor values only)
    get one variant: the one with the lowest weighted sum of log times over them. Variants left
    without a shape are dropped. Returns the plan and one note per group that had to give way."""
    import math
    groups: dict[tuple, list[str]] = {}
    for sid in p.table:
        groups.setdefault(keys[sid], []).append(sid)
    table, notes = dict(p.table), []
    for sids in groups.values():
        if len({table[s] for s in sids}) < 2:
            continue
        best = min(range(len(p.variants)), key=lambda i: (sum(weights.get(s, 1.0) * math.log(p.variants[i].times[s])
                                                              for s in sids), i))
        notes.append(f"shapes {', '.join(sids)} have the same input shapes and dtypes: all go to {p.variants[best].id}")
        for s in sids:
            table[s] = best
    used = sorted(set(table.values()))
    index = {old: new for new, old in enumerate(used)}
    return Plan([p.variants[i] for i in used], {s: index[i] for s, i in table.items()}, index.get(p.default, 0),
                p.fastest, p.ties), notes


_HEADER = '''"""Dispatching candidate written by aka (aka/agent/dispatch.py) from {n} measured variants of {op}.

Each input shape goes to the variant measured fastest on it (table below; a shape never measured
goes to the nearest measured one of the same structure). The variants follow as written, their
module-level names prefixed with _vK_.

{rows}
"""
'''

_MODEL = '''

class ModelNew(torch.nn.Module):
    """Builds every variant from the same arguments and forwards each call to the table's pick."""

    def __init__(self, *args, **kwargs):
        super().__init__()
        self.variants = torch.nn.ModuleList([cls(*args, **kwargs) for cls in AKA_VARIANTS])
        self.picks = {}

    def forward(self, *args, **kwargs):
        key = aka_key(args, kwargs)
        i = self.picks.get(key)
        if i is None:
            i = aka_pick(key, AKA_TABLE, AKA_DEFAULT)
            self.picks[key] = i
        return self.variants[i](*args, **kwargs)

    # The harness loads the reference's weights by name into the candidate's own state dict: each
    # variant gets the entries its own state dict has, as it would evaluated alone.
    def state_dict(self, *args, **kwargs):
        out = {}
        for v in self.variants:
            for k, t in v.state_dict(*args, **kwargs).items():
                out.setdefault(k, t)
        return out

    def load_state_dict(self, state_dict, strict=True, assign=False):
        for v in self.variants:
            own = v.state_dict()
            mine = {k: t for k, t in state_dict.items() if k in own and tuple(own[k].shape) == tuple(t.shape)}
            v.load_state_dict(mine, strict=False, assign=assign)
'''


def generate(p: Plan, keys: dict[str, tuple], op: str, labels: dict[str, str] | None = None) -> str:
    """The dispatching candidate's source for plan `p` (keys: shape_keys of the task's shapes)."""
    renamed, classes = [], []
    for k, v in enumerate(p.variants):
        report = check_source(v.source)
        if report.model_class is None:
            raise DispatchError(f"{v.id} defines no ModelNew or Model class")
        try:
            r = rename(v.source, f"_v{k}_")
        except (MergeError, SyntaxError) as e:
            raise DispatchError(f"{v.id}: {e}") from None
        renamed.append(r)
        classes.append(r.names[report.model_class])
    try:
        shared_imports(renamed, [v.id for v in p.variants])
    except MergeError as e:
        raise DispatchError(str(e)) from None
    rows = "\n".join(f"- _v{k}_ = {v.id} ({(labels or {}).get(v.id) or v.label or '-'}): shapes "
                     + ", ".join(s for s, i in p.table.items() if i == k) for k, v in enumerate(p.variants))
    future = sorted({f for r in renamed for f in r.future})
    parts = [_HEADER.format(n=len(p.variants), op=op, rows=rows)]
    parts += [f + "\n" for f in future]
    parts.append("import torch\n")
    for k, (v, r) in enumerate(zip(p.variants, renamed)):
        parts.append(f"\n\n# ---- variant _v{k}_: {v.id} " + "-" * 40 + "\n\n" + r.source.rstrip() + "\n")
    runtime = RUNTIME.read_text()
    parts.append("\n\n# ---- dispatch (aka/agent/dispatch_runtime.py) " + "-" * 30 + "\n\n" + runtime.rstrip() + "\n")
    parts.append("\n\nAKA_VARIANTS = (" + ", ".join(classes) + ",)\n")
    parts.append(f"AKA_DEFAULT = {p.default}\n")
    rows: dict[tuple, tuple[int, list[str]]] = {}
    for s, i in p.table.items():
        if keys[s] in rows and rows[keys[s]][0] != i:
            raise DispatchError(f"shapes {rows[keys[s]][1][0]} and {s} share a key but not a variant (see unify)")
        rows.setdefault(keys[s], (i, []))[1].append(s)
    parts.append("AKA_TABLE = {\n" + "".join(f"    {k!r}: {i},  # shape {', '.join(sids)}\n"
                                            for k, (i, sids) in rows.items()) + "}\n")
    parts.append(_MODEL)
    return "".join(parts)


def build(history, problem, task) -> tuple[str, dict]:
    """(the dispatching candidate's source, what it was built from) for a run's history; raises
    DispatchError when fewer than two variants earn a place in the table."""
    if problem.kind == "kbx":
        raise DispatchError("KernelBench-X candidates are functions (kernel_function): the dispatcher is a class")
    variants, skipped = eligible([c for c in history if c.kind != "dispatch"], task.ids)
    if not variants:
        raise DispatchError("no passing candidate has a time on every task shape"
                            + (" (CPU interpreter: no timings)" if task.device.startswith("cpu") else ""))
    keys = shape_keys(problem, task.shapes, task.device)
    p, notes = unify(plan(variants, task.ids, task.weights), keys, task.weights)
    if len(p.variants) < 2:
        raise DispatchError(f"{p.variants[0].id} is the fastest, or within noise of it, on every shape "
                            f"(of {len(variants)} passing variants): nothing to dispatch")
    source = generate(p, keys, problem.name)
    info = {**p.to_json(), "eligible": [v.id for v in variants], "skipped": skipped[:20], "notes": notes,
            "expected_us": {s: p.expected_us(s) for s in task.ids},
            "predicted_objective": predicted_objective(p, task.ids, task.weights)}
    return source, info


def envelope_gain(c, history, shape_ids: list[str]) -> list[str]:
    """The shapes on which `c` is faster beyond noise (its CI's top under every earlier eligible
    variant's CI bottom) than every passing candidate before it: progress a dispatcher can use
    even when `c` loses on the weighted objective."""
    if c.kind == "dispatch":
        return []
    mine, _ = eligible([c], shape_ids)
    if not mine:
        return []
    others, _ = eligible([h for h in history if h is not c and h.kind != "dispatch" and h.result is not None], shape_ids)
    if not others:
        return []
    v = mine[0]
    return [s for s in shape_ids if all(v.ci[s][1] < o.ci[s][0] for o in others)]


def comparison_rows(info: dict, result, history) -> list[str]:
    """Markdown rows: per shape the fastest variant, the pick, and the dispatcher's own time."""
    by_cand = {c.id: c for c in history}
    got = {s.id: s for s in (result.shapes if result else [])}
    rows = []
    for sid, fastest in info.get("fastest", {}).items():
        fs = next((s for s in by_cand[fastest].result.shapes if s.id == sid), None) if fastest in by_cand else None
        pick = info["table"].get(sid, "-")
        mine = got.get(sid)
        t_best = fs.time_us if fs else None
        t_mine = mine.time_us if mine else None
        ratio = f"{t_best / t_mine:.2f}" if t_best and t_mine else "-"
        ci = mine.time_ci_us if mine and mine.time_ci_us else None
        ci_txt = f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else ""
        best_ci = fs.time_ci_us if fs and fs.time_ci_us else None
        noise = "-"
        if ci and best_ci:
            noise = "slower beyond noise" if ci[0] > best_ci[1] else "within noise or faster"
        rows.append(f"| {sid} | {fastest} {t_best:.2f} | {pick} | "
                    f"{(f'{t_mine:.2f}' if t_mine else '-')}{ci_txt} | {ratio} | {noise} |" if t_best else
                    f"| {sid} | {fastest} - | {pick} | - | - | - |")
    return rows
