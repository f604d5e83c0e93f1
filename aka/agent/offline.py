"""The offline proposer: no LLM; a search over the knowledge base's verified kernels.

Families are the files `<kernels_dir>/<op>/*.py` (or, when the op has none, every kernel whose
front matter names the op's category). Each declares `params` (name -> values worth trying) and
carries its defaults in the one-line `AKA_PARAMS = {...}` (knowledge_base/README.md); a point of
the search is (family, params), instantiated by rewriting that line.

The search, one point per proposal, never the same point twice:
1. Until something passes: each family at its defaults, best recorded first: the families whose
   `aka kb verify` result on this kind of device is current and passing and covers the task's
   shapes, by that result's objective over the task's shapes (the knowledge base has measured
   them: the search starts from its best); a family whose result covers only some shapes ranks
   among them by an estimate (estimate_partial: its ratio to a measured family on the shapes both
   have); then the rest in file order (on the CPU, where no result carries timings, file order
   throughout).
2. Then coordinate moves around the best point of the focus family (the parent's family unless a
   dropout moved the focus): one parameter one step along its declared list. Moves are ranked by
   the parent's offline compile report where it names a dot computed more than once (fewer warps,
   then a larger M tile: knowledge_base/triton/tl-dot.md; on any device), else its roofline signal:
   - memory-bound and weakest (lowest sol_fraction) at the smaller shapes, i.e. launch and latency
     bound: fewer warps, more rows per program, smaller blocks;
   - memory-bound and weakest at the large shapes, i.e. too few bytes in flight: more warps,
     bigger blocks, more rows per program, more stages;
   - compute-bound: bigger tiles, more stages, more warps;
   - no timings (CPU interpreter): declared order, up before down; nothing can rank them there.
   Before those moves, on a GPU, a passing family whose front matter names a tuner (`tuner: gemm`,
   `tuner: attention`, `tuner: moe`: the dispatch kernels) has its per-shape table re-tuned here, once
   (aka/agent/retune.py): the repository's tuner over the task's bench shapes, the winners baked
   into a copy, that copy the proposal. AKA_PARAMS moves cannot change a table, and a table measured
   on another GPU, or before the tuner's grid grew, is what holds such a kernel back.
3. Focus neighbourhood exhausted: untried families' defaults, then moves around every other
   passing point, best first. Nothing left: ProposerExhausted.
A dropout (the loop's stall signal) switches the focus to another family: an untried one at its
defaults first, else the best point of the best other family.

With `dispatch` (the loop ends with a per-shape dispatcher, aka/agent/dispatch.py), a point is
worth trying when it may win some shapes, not only the weighted whole: once something passes,
every family's defaults come first (on gemm_bf16 the decode family is 4x faster at M=1 and the
prefill family 5x faster at M=4096, results/kb/kernels/gemm_bf16/), then moves around each
point that is the fastest on some shape, guided by the bound and size of the weakest shape it
wins, those points taken in turn (weakest first), before the moves around the incumbent. On the
CPU nothing is timed and no dispatcher can be built, so the search there is the plain one above.
"""
from __future__ import annotations

import ast
import itertools
import json
import random
import re
from dataclasses import dataclass, field
from pathlib import Path

from aka.agent.base import Proposal, ProposerExhausted, RoundContext
from aka.agent.dropout import DropoutDecision
from aka.agent.shapes import elements
from aka.kb.entries import read_entry
from aka.objective import objective
from aka.problem import REPO_ROOT, Problem
from aka.util import parse_py

RETUNE = "@retune"  # the params key of a re-tune point (aka/agent/retune.py); never written into AKA_PARAMS


@dataclass
class RetuneSettings:
    """The re-tune move's budget and places: the tuner's deadline, where its files go (one folder per
    re-tune under the run), the GPU lock's directory, and the run's wall time left (None: unbounded)."""
    out_root: str
    tune_s: float = 100.0
    lock_root: str | None = None
    wall_left: object = None   # () -> float | None


_PARAMS_LINE = re.compile(r"^AKA_PARAMS\s*=\s*\{.*\}[^\n]*$", re.MULTILINE)


def read_params(source: str) -> dict:
    """The literal value of the module-level `AKA_PARAMS = {...}`."""
    for node in parse_py(source).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "AKA_PARAMS" for t in node.targets):
            value = ast.literal_eval(node.value)
            if not isinstance(value, dict):
                raise ValueError("AKA_PARAMS is not a dict literal")
            return value
    raise ValueError("no module-level AKA_PARAMS = {...}")


def set_params(source: str, params: dict) -> str:
    """Rewrite the single `AKA_PARAMS = {...}` line; anything but exactly one such line fails."""
    hits = _PARAMS_LINE.findall(source)
    if len(hits) != 1:
        raise ValueError(f"expected one one-line `AKA_PARAMS = {{...}}`, found {len(hits)}")
    line = "AKA_PARAMS = " + repr(dict(params)) + "  # set by the offline proposer"
    return _PARAMS_LINE.sub(lambda _: line, source, count=1)


@dataclass
class Family:
    id: str
    path: Path
    source: str
    params: dict[str, list]
    defaults: dict
    techniques: list[str] = field(default_factory=list)
    meta: dict = field(default_factory=dict)   # front matter (`tuner`: the re-tune move, aka/agent/retune.py)


def load_families(kernels_dir: Path, problem: Problem, exclude_op: bool = False) -> tuple[list[Family], str, list[str]]:
    """(families, "op" | "category" | "none", warnings for files that break the contract).
    exclude_op (leave-op-out): the op's own kernels are withheld, and so is any category kernel
    whose front matter lists the op."""
    def load(paths) -> tuple[list[Family], list[str]]:
        fams, warns = [], []
        for p in paths:
            meta, _ = read_entry(p)
            src = p.read_text()
            try:
                defaults = read_params(src)
                params = {str(k): list(v) for k, v in (meta.get("params") or {}).items()}
                missing = [k for k in params if k not in defaults]
                if missing:
                    raise ValueError(f"params {missing} not in AKA_PARAMS")
                set_params(src, defaults)
            except (ValueError, SyntaxError, TypeError) as e:
                warns.append(f"{p}: skipped: {e}")
                continue
            fams.append(Family(str(meta.get("id") or p.stem), p, src, params, defaults,
                               [str(t) for t in meta.get("techniques") or []], dict(meta)))
        return fams, warns

    own_dir = kernels_dir / problem.name
    own = sorted(own_dir.glob("*.py")) if own_dir.is_dir() and not exclude_op else []
    fams, warns = load(own)
    if fams:
        return fams, "op", warns
    same = []
    for p in sorted(kernels_dir.glob("*/*.py")):
        meta, _ = read_entry(p)
        if exclude_op and (p.parent == own_dir or problem.name in _listed_ops(meta)):
            continue
        if problem.category and meta.get("category") == problem.category:
            same.append(p)
    fams, w2 = load(same)
    return fams, ("category" if fams else "none"), warns + w2


def _listed_ops(meta: dict) -> list[str]:
    out = []
    for k in ("op", "ops"):
        v = meta.get(k)
        out += [str(x) for x in (v if isinstance(v, list) else [v] if v else [])]
    return out


def grid_points(fam: Family) -> list[dict]:
    """Every point of a family's declared parameter grid (defaults for undeclared parameters)."""
    names = list(fam.params)
    return [{**fam.defaults, **dict(zip(names, combo))}
            for combo in itertools.product(*(fam.params[n] for n in names))]


def _key(family: str, params: dict) -> str:
    return json.dumps([family, sorted(params.items(), key=lambda kv: kv[0])], default=str)


def _kind(name: str) -> str:
    n = name.lower()
    if "warp" in n:
        return "warps"
    if "stage" in n:
        return "stages"
    if "row" in n or "per_prog" in n or "tokens_per" in n:
        return "rows"
    if n.startswith(("block", "tile")) or n.endswith("_size") or n in ("bm", "bn", "bk", "bh", "bv", "bd") \
            or n.startswith(("split", "chunk")):
        return "block"  # tile extents (BLOCK_M or BM) and split sizes move work per program alike
    return "other"


# (mode, param kind, direction) -> preference; unlisted moves score 0.
_PREFER = {
    "small-mem": {("warps", -1): 2, ("rows", 1): 2, ("block", -1): 1},
    "large-mem": {("warps", 1): 2, ("block", 1): 2, ("rows", 1): 1, ("stages", 1): 1},
    "compute": {("block", 1): 2, ("stages", 1): 2, ("warps", 1): 1},
    # a dot computed by more warps than it has rows for (compile_check.mma_dots: a 64-row attention
    # score on 8 warps is done by both warpgroups): fewer warps, or more rows (the M tile) per program
    "dup-dot": {("warps", -1): 3, ("mtile", 1): 2},
}
# the M tile of a dot: the rows a program computes (attention's query rows, MLA's heads, GEMM's BM)
_MTILE = ("bm", "bh", "bt", "block_m", "block_size_m")


def duplicated_dots(result) -> list[str]:
    """The parent's offline compile report (any device) naming a dot computed more than once."""
    from aka.evaluate.compile_report import dot_lines
    return [line for s in getattr(result, "shapes", None) or [] for line in dot_lines(s.compile)]


def guidance(result, task) -> tuple[str, str]:
    """(mode, why) from the parent's compile report, else its per-shape roofline figures: a dot that
    the warps compute twice wastes tensor work whatever the roofline says, and it is seen without a GPU."""
    if result is None:
        return "none", "no measurements"
    dup = duplicated_dots(result)
    if dup:
        return "dup-dot", f"{dup[0]}: fewer warps, more rows per program"
    timed = [s for s in result.shapes if s.sol_fraction]
    if not timed:
        return "none", "no timings (CPU interpreter): declared order"
    w = task.weights
    compute = sum(w.get(s.id, 1.0) for s in timed if s.bound == "compute")
    if compute > sum(w.get(s.id, 1.0) for s in timed) / 2:
        return "compute", "compute-bound: bigger tiles, more stages"
    sizes = {s.id: elements(s) for s in task.shapes}
    worst = min(timed, key=lambda s: s.sol_fraction)
    median = sorted(sizes.values())[(len(sizes) - 1) // 2] if sizes else 0  # lower median
    if sizes.get(worst.id, 0) <= median:
        return "small-mem", f"memory-bound, weakest at small shape {worst.id} (sol {worst.sol_fraction:.2f}): fewer warps, more rows"
    return "large-mem", f"memory-bound, weakest at large shape {worst.id} (sol {worst.sol_fraction:.2f}): more bytes in flight"


def shape_guidance(shape, task) -> tuple[str, str]:
    """(mode, why) for one shape's roofline figures: the per-shape counterpart of `guidance`."""
    if shape.bound == "compute":
        return "compute", f"shape {shape.id} compute-bound (sol {shape.sol_fraction:.2f})"
    sizes = sorted(elements(s) for s in task.shapes)
    median = sizes[(len(sizes) - 1) // 2] if sizes else 0
    mine = next((elements(s) for s in task.shapes if s.id == shape.id), 0)
    if mine <= median:
        return "small-mem", f"shape {shape.id} small and memory-bound (sol {shape.sol_fraction:.2f})"
    return "large-mem", f"shape {shape.id} large and memory-bound (sol {shape.sol_fraction:.2f})"


def recorded_sol(kernel: Path, op: str, device: str, gpu: str | None = None) -> dict[str, float] | None:
    """Shape id -> sol_fraction of the kernel's current, passing `aka kb verify` result on `device`'s
    kind (timed by today's method); None without one, or when the kernel is another op's (a
    category match). The result may cover only some shapes (`--shapes first`). `gpu`: only a result
    recorded on that GPU model (a record that names none is taken)."""
    from aka.kb.verify import device_entry, kernel_op, read_results, source_hash
    kind = device.split(":")[0]
    e = device_entry(read_results(kernel), kind, gpu)   # with `gpu`, that GPU model's verdict
    if kernel_op(kernel) != op or e.get("status") != "pass" or e.get("source_hash") != source_hash(kernel):
        return None
    if gpu and e.get("gpu") and e["gpu"] != gpu:
        return None
    if kind != "cpu":
        from aka.evaluate.timing import BASELINE_METHOD
        if e.get("timing_method") != BASELINE_METHOD:
            return None
    return {str(s.get("id")): s.get("sol_fraction") for s in e.get("shapes") or [] if s.get("sol_fraction")}


def recorded_objective(kernel: Path, op: str, device: str, shape_ids: list[str],
                       weights: dict[str, float]) -> float | None:
    """The objective (aka/objective.py) over `shape_ids` of `op` that the kernel's recorded result
    (recorded_sol) gives; None without one covering them all."""
    return _over(recorded_sol(kernel, op, device), shape_ids, weights)


def _over(by_id: dict[str, float] | None, shape_ids: list[str], weights: dict[str, float]) -> float | None:
    """The objective of a record's per-shape values over `shape_ids`; None without all of them."""
    if by_id is None:
        return None
    return objective([by_id.get(i) for i in shape_ids], [weights.get(i, 1.0) for i in shape_ids])


def estimate_partial(records: list[dict | None], scored: list[float | None]) -> list[tuple[float, int, float, list] | None]:
    """For each kernel without an objective over the task (scored None) whose record covers some
    shapes: an estimate, the objective of the best kernel that is measured over the task and on
    some of the same shapes, times the ratio of the two kernels' geomeans over the shapes both
    have; with the reference kernel's index, for the proposer's reason. A kernel verified on one
    shape (`kb verify --shapes first`) ranks by what it was measured to do against a measured
    neighbour, instead of after every kernel with an all-shape result. Each is (estimated objective,
    reference index, ratio, shared shape ids): a ranking key, not a measurement (a ratio measured at a
    small shape can put it above 1)."""
    from aka.evaluate.stats import geomean
    full = sorted((i for i, v in enumerate(scored) if v is not None), key=lambda i: -scored[i])
    out: list[tuple[float, int, float, list] | None] = [None] * len(records)
    for j, rec in enumerate(records):
        if scored[j] is not None or not rec:
            continue
        for i in full:
            shared = sorted(set(rec) & set(records[i] or {}))
            if shared:
                ratio = geomean([rec[s] for s in shared]) / geomean([records[i][s] for s in shared])
                out[j] = (scored[i] * ratio, i, ratio, shared)
                break
    return out


class OfflineProposer:
    """exclude_op: leave-op-out (load_families). use_records=False: the knowledge base's recorded
    measurements are withheld, families go in file order. independent (best-of-N control): round r
    proposes points (r-1)*n ... r*n-1 of one seeded shuffle of every family's whole declared grid,
    so no result steers what comes next."""

    def __init__(self, problem: Problem, kernels_dir: str | Path | None = None, *, exclude_op: bool = False,
                 use_records: bool = True, independent: bool = False, seed: int = 0, dispatch: bool = False,
                 retune: RetuneSettings | None = None, gpu: str | None = None):
        self.gpu = gpu  # the GPU model in hand (None: torch's name for ctx.device's GPU, when there is one)
        self.kernels_dir = Path(kernels_dir) if kernels_dir else REPO_ROOT / "knowledge_base" / "kernels"
        self.families, self.how, self.warnings = load_families(self.kernels_dir, problem, exclude_op)
        self.use_records, self.independent, self.seed, self.dispatch = use_records, independent, seed, dispatch
        self.retune = retune
        self.notes: list[str] = []  # why a re-tune point gave no candidate, carried by the next proposal
        self.retune_failed: set[str] = set()
        self._sample: list[tuple[Family, dict]] | None = None
        self.by_id = {f.id: f for f in self.families}
        self.name = "offline"
        self.focus: str | None = None
        self._switch = False
        self._ranked: list[Family] | None = None
        self.estimates: dict[str, tuple[float, str, list]] = {}  # family -> (ratio, measured reference, shapes)
        where = {"op": f"for {problem.name}", "category": f"of category {problem.category} (none for {problem.name})",
                 "none": f"for {problem.name}: none found"}[self.how]
        self.banner = (f"offline proposer: no LLM; searching {len(self.families)} knowledge-base kernels {where} "
                       f"in {self.kernels_dir}")

    def on_dropout(self, decision: DropoutDecision) -> None:
        self._switch = True

    # -- state from history (so resume needs nothing but the store) -----------------------------
    @staticmethod
    def _points(ctx: RoundContext):
        tried, passing = set(), []
        for c in ctx.history:
            off = c.meta.get("offline")
            if not off:
                continue
            tried.add(_key(off["family"], off["params"]))
            if off["params"].get(RETUNE):
                continue  # its table is the tuner's: moves start from the family's own source
            if c.score and c.score.value is not None and c.status == "pass":
                passing.append((c.score.value, c.id, off["family"], off["params"]))
        passing.sort(key=lambda t: (-t[0], t[1]))
        return tried, passing

    def _moves(self, fam: Family, params: dict, mode: str):
        ranked = []
        for pi, (name, values) in enumerate(fam.params.items()):
            cur = params.get(name)
            idx = values.index(cur) if cur in values else None
            steps = [(1, idx + 1), (-1, idx - 1)] if idx is not None else [(0, j) for j in range(len(values))]
            for direction, j in steps:
                if 0 <= j < len(values):
                    prefer = _PREFER.get(mode, {})
                    pref = prefer.get((_kind(name), direction), 0)
                    if name.lower() in _MTILE:
                        pref = max(pref, prefer.get(("mtile", direction), 0))
                    ranked.append((-pref, pi, -direction, name, values[j], cur))
        ranked.sort(key=lambda t: t[:3])
        for _, _, _, name, value, cur in ranked:
            yield {**params, name: value}, f"{name} {cur} -> {value}"

    def _by_record(self, ctx: RoundContext) -> list[Family]:
        """The families, those with a recorded objective for this task first (best first)."""
        if self._ranked is None and not self.use_records:
            self._ranked = list(self.families)
        if self._ranked is None:
            gpu = self.gpu
            if gpu is None and not ctx.device.startswith("cpu"):
                from aka.kb.verify import gpu_name
                gpu = gpu_name(ctx.device)
            # Two tiers: the families measured on this GPU model rank first, by those records; then
            # the ones measured only on another model, by theirs. A datasheet fraction from an H100
            # and one from an H200 are not one scale (page_tile's H100 record, 0.2-0.8, above
            # split_dispatch's H200 one, 0.1-0.5, said nothing about which is faster on either).
            names, self.estimates, rank = [f.path for f in self.families], {}, {}
            for tier, want in enumerate([gpu, None] if gpu else [None]):
                todo = [i for i in range(len(names)) if i not in rank]
                records = [recorded_sol(names[i], ctx.problem.name, ctx.device, gpu=want) for i in todo]
                scored = [_over(r, ctx.task.ids, ctx.task.weights) for r in records]
                est = estimate_partial(records, scored)
                for j, i in enumerate(todo):
                    v = scored[j] if scored[j] is not None else (est[j][0] if est[j] else None)
                    if v is not None:
                        rank[i] = (tier, -v)
                    if est[j]:
                        self.estimates[self.families[i].id] = (est[j][2], self.families[todo[est[j][1]]].id, est[j][3])
            order = sorted(range(len(names)), key=lambda i: (i not in rank, rank.get(i, (0, 0.0)), i))
            self._ranked = [self.families[i] for i in order]
        return self._ranked

    def _queue(self, ctx: RoundContext, tried: set, passing: list):
        untried_fams = [f for f in self._by_record(ctx) if _key(f.id, f.defaults) not in tried]
        if not passing:
            for f in untried_fams:
                est = self.estimates.get(f.id)
                yield f, dict(f.defaults), None, "defaults (nothing passes yet)" + (
                    f"; ranked by its partial record: {est[0]:.2f}x the sol of {est[1]} on shape(s) "
                    f"{','.join(est[2])}" if est else "")
        if passing and self.retune is not None and not ctx.device.startswith("cpu"):
            for fam_id in dict.fromkeys(fam for _, _, fam, _ in passing):
                f = self.by_id.get(fam_id)
                if f is not None and f.meta.get("tuner") and f.id not in self.retune_failed:
                    yield f, {**f.defaults, RETUNE: 1}, None, f"re-tune {f.id}'s table on this GPU ({f.meta['tuner']} tuner)"
        if self.dispatch and passing and not ctx.device.startswith("cpu"):
            for f in untried_fams:
                yield f, dict(f.defaults), None, "defaults (a family may win shapes of its own)"
            yield from self._shape_moves(ctx)
        parent_off = ctx.parent.meta.get("offline") if ctx.parent else None
        if self._switch:
            cur = self.focus or (parent_off or {}).get("family")
            others = [f.id for f in untried_fams if f.id != cur] or \
                     [fam for _, _, fam, _ in passing if fam != cur]
            if others:
                self.focus = others[0]
            self._switch = False
        focus = self.focus or (parent_off or {}).get("family")
        mode, why = guidance(ctx.parent.result if ctx.parent else None, ctx.task)
        bases = [(cid, fam, p) for _, cid, fam, p in passing if fam == focus]
        if focus in self.by_id and not bases:
            f = self.by_id[focus]
            yield f, dict(f.defaults), None, "defaults of the focus family"
        for cid, fam, params in bases[:1]:
            for p, move in self._moves(self.by_id[fam], params, mode):
                yield self.by_id[fam], p, cid, f"{move} ({why})"
        for f in untried_fams:
            yield f, dict(f.defaults), None, "defaults"
        for _, cid, fam, params in passing:
            if fam in self.by_id:
                for p, move in self._moves(self.by_id[fam], params, mode):
                    yield self.by_id[fam], p, cid, f"{move} (around {cid})"

    def _shape_moves(self, ctx: RoundContext):
        """Moves around each shape's fastest passing point (highest sol_fraction there), each point
        guided by the weakest shape it is fastest on; the points taken in turn, weakest first."""
        best: dict[str, tuple] = {}
        for c in ctx.history:
            off = c.meta.get("offline")
            if not off or c.status != "pass" or not c.score or c.score.value is None or off["family"] not in self.by_id \
                    or off["params"].get(RETUNE):
                continue
            for s in c.result.shapes:
                if s.sol_fraction and (s.id not in best or s.sol_fraction > best[s.id][0].sol_fraction):
                    best[s.id] = (s, c.id, off["family"], off["params"])
        order = sorted(best.values(), key=lambda t: (t[0].sol_fraction, t[0].id))
        def stream(s, cid, fam, params):
            mode, why = shape_guidance(s, ctx.task)
            for p, move in self._moves(self.by_id[fam], params, mode):
                yield self.by_id[fam], p, cid, f"{move} ({why}; {cid} is the fastest there)"
        firsts = {}  # one stream per fastest point, guided by the weakest shape it is fastest on
        for t in order:
            firsts.setdefault(t[1], t)
        streams = [stream(*t) for t in firsts.values()]
        while streams:
            for it in list(streams):
                got = next(it, None)
                if got is None:
                    streams.remove(it)
                else:
                    yield got

    def propose(self, ctx: RoundContext, n: int) -> list[Proposal]:
        if not self.families:
            raise ProposerExhausted(self.banner)
        if self.independent:
            return self._propose_independent(ctx, n)
        if self.focus is None:  # after a resume: the focus the last offline proposal recorded
            self.focus = next((c.meta.get("focus") for c in reversed(ctx.history) if c.meta.get("offline")), None)
        tried, passing = self._points(ctx)
        out, seen = [], set(tried)
        for fam, params, parent, why in self._queue(ctx, tried, passing):
            k = _key(fam.id, params)
            if k in seen:
                continue
            seen.add(k)
            meta = {"offline": {"family": fam.id, "params": params, "why": why}, "focus": self.focus}
            if params.get(RETUNE):
                got = self._retune(fam, ctx)
                if isinstance(got, str):  # not possible or no table came of it: on the record, search on
                    self.retune_failed.add(fam.id)
                    self.notes.append(f"{fam.id}: re-tune skipped: {got}")
                    continue
                meta["offline"]["why"] = (f"{why}: {got.summary['correct']} correct configurations of "
                                          f"{got.summary['records']} measured over {len(got.summary['shapes'])} "
                                          f"shape(s) in {got.summary['wall_s']:.0f} s, the fastest per shape baked")
                meta["retune"] = got.summary
                out.append(Proposal(got.source, "offline", parent, list(fam.techniques), meta))
            else:
                out.append(Proposal(set_params(fam.source, params), "offline", parent, list(fam.techniques), meta))
            if self.notes:
                meta["offline"]["notes"], self.notes = list(self.notes), []
            if len(out) == n:
                break
        if not out:
            raise ProposerExhausted(f"offline proposer: every reachable point of {len(self.families)} "
                                    "kernel families has been evaluated")
        return out

    def _retune(self, fam: Family, ctx: RoundContext):
        """The family's kernel with its table re-tuned here (retune.Retuned), or why not (a str)."""
        from aka.agent import retune as rt
        st = self.retune
        why = rt.unavailable(fam.meta, fam.path, ctx.problem, ctx.task.ids, ctx.device)
        if why:
            return why
        # the tuner, then its candidate's evaluation and a closing round, each about as long as this
        # family's own evaluations were, less their Triton compiles: the re-tuned copy launches the
        # JIT functions the tuner has just compiled (the table is module data, not kernel source), so
        # the compile cache answers. Another family's compile-heavy round says nothing about it (on
        # the H100, 2026-12-05, prefill's first round was 246 s, 89 s of them compiling, and the move
        # was never proposed in a 530 s wall).
        def eval_wall(c) -> float:
            w = c.result.wall_s or {}
            return max(0.0, float(w.get("total_s") or 0.0) - float(w.get("compiling_unlocked_s") or 0.0))
        done = [c for c in ctx.history if c.result is not None]
        own = [c for c in done if (c.meta.get("offline") or {}).get("family") == fam.id]
        need = st.tune_s + 2 * max((eval_wall(c) for c in own or done), default=0.0)
        left = st.wall_left() if st.wall_left else None
        if left is not None and left < need:
            return f"{left:.0f} s of the wall budget left, the move needs about {need:.0f} s"
        try:
            return rt.retune(fam.meta, fam.path, ctx.problem, rt.bench_ids(ctx.problem, ctx.task.ids),
                             Path(st.out_root) / f"r{ctx.round:03d}-{fam.path.stem}",
                             st.tune_s, st.lock_root)
        except (rt.RetuneError, OSError, ValueError) as e:
            return str(e)

    def _propose_independent(self, ctx: RoundContext, n: int) -> list[Proposal]:
        if self._sample is None:
            pts = [(f, p) for f in self.families for p in grid_points(f)]
            random.Random(f"best-of-n:{self.seed}").shuffle(pts)
            self._sample = pts
        start = (ctx.round - 1) * n
        picked = self._sample[start:start + n]
        if not picked:
            raise ProposerExhausted(f"offline best-of-N: all {len(self._sample)} grid points of "
                                    f"{len(self.families)} families sampled")
        return [Proposal(set_params(f.source, p), "offline", None, list(f.techniques),
                         {"offline": {"family": f.id, "params": p, "why": f"independent sample {start + i + 1}"},
                          "focus": None})
                for i, (f, p) in enumerate(picked)]
