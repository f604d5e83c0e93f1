"""Per-shape dispatch (aka/agent/dispatch.py, merge.py, dispatch_runtime.py).

The CPU harness times nothing, so the end-to-end tests time the fixture variants themselves
(wall clock through Triton's interpreter, in a subprocess) where the GPU harness would have; every
verdict still comes from the real harness.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from aka.agent import dispatch
from aka.agent.dispatch import DispatchError, Timed, eligible, generate, plan, shape_keys
from aka.agent.dispatch_runtime import aka_key, aka_pick
from aka.agent.merge import MergeError, rename, shared_imports
from aka.agent.store import Candidate
from aka.evaluate.result import EvalResult, ShapeResult
from aka.problem import REPO_ROOT, load_problem

FIX = Path(__file__).parent / "fixtures"
VEC_ADD = FIX / "problems" / "vec_add"
FAST_SMALL = (FIX / "agent" / "dispatch" / "fast_small.py").read_text()
FAST_LARGE = (FIX / "agent" / "dispatch" / "fast_large.py").read_text()


# -- merge ----------------------------------------------------------------------------------------

PURE_A = '''
SCALE = 3
TABLE = {"SCALE": 1}

def helper(x, SCALE=SCALE):
    return x * SCALE

def uses_param(SCALE):
    return [SCALE for SCALE in range(SCALE)]

class Thing:
    SCALE = 100
    tag = SCALE + 1           # the class's own SCALE

    def helper(self):         # a method named like a module function stays a method
        return helper(2) + self.SCALE

def run():
    k = dict(SCALE=SCALE)     # a keyword name is not a reference
    return helper(1), uses_param(4), Thing().helper(), Thing.tag, k, TABLE["SCALE"]
'''

PURE_B = '''
SCALE = 5

def helper(x):
    return x + SCALE

def run():
    return helper(1)
'''


def test_renamed_variants_share_one_module_and_keep_their_meaning():
    a, b = rename(PURE_A, "_v0_"), rename(PURE_B, "_v1_")
    assert set(a.names) == {"SCALE", "TABLE", "helper", "uses_param", "Thing", "run"}
    ns: dict = {}
    exec(compile(a.source + "\n" + b.source, "<merged>", "exec"), ns)  # noqa: S102 - our own fixture text
    alone: dict = {}
    exec(compile(PURE_A, "<a>", "exec"), alone)  # noqa: S102
    assert ns["_v0_run"]() == alone["run"]() == (3, [0, 1, 2, 3], 106, 101, {"SCALE": 3}, 1)
    assert ns["_v1_run"]() == 6
    assert "dict(SCALE=_v0_SCALE)" in a.source and "def uses_param" not in a.source
    assert "def helper(self)" in a.source  # the method's header untouched


def test_triton_kernel_parameter_named_like_a_module_constant_is_left_alone():
    r = rename(FAST_SMALL, "_v0_")
    assert "def _v0__add(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):" in r.source
    assert "_v0__add[(triton.cdiv(n, _v0_BLOCK),)](a, b, out, n, BLOCK=_v0_BLOCK)" in r.source
    assert "tl.arange(0, BLOCK)" in r.source  # inside the kernel BLOCK is its parameter
    assert r.imports == {"torch": "torch", "nn": "torch.nn", "triton": "triton", "tl": "triton.language"}


def test_one_import_name_bound_to_two_modules_cannot_be_merged():
    a = rename("import torch.nn as nn\nx = 1\n", "_v0_")
    b = rename("import torch.nn.functional as nn\nx = 2\n", "_v1_")
    with pytest.raises(MergeError, match="nn"):
        shared_imports([a, b], ["c1", "c2"])
    with pytest.raises(MergeError, match="global"):
        rename("X = 1\ndef f():\n    global X\n    X = 2\n", "_v0_")


# -- the runtime pick -----------------------------------------------------------------------------

def test_pick_exact_then_nearest_of_the_same_structure_then_default():
    import torch
    t = lambda *shape: torch.empty(*shape, device="meta")  # noqa: E731
    table = {aka_key((), {"x": t(1, 4096)}): 0, aka_key((), {"x": t(4096, 4096)}): 1}
    assert aka_pick(aka_key((), {"x": t(4096, 4096)}), table, 7) == 1
    assert aka_pick(aka_key((), {"x": t(3, 4096)}), table, 7) == 0       # M=3 is nearer M=1 than 4096 (log scale)
    assert aka_pick(aka_key((), {"x": t(2000, 4096)}), table, 7) == 1
    assert aka_pick(aka_key((), {"x": t(3, 4096).to(torch.bfloat16)}), table, 7) == 7  # another dtype
    assert aka_pick(aka_key((), {"x": t(3, 4, 5)}), table, 7) == 7                        # another rank
    assert aka_pick(aka_key((t(3, 4096),), {}), table, 7) == 7                            # positional, not keyword


# -- plan and eligibility -------------------------------------------------------------------------

def _timed(vid: str, times: dict[str, float], spread: float = 0.02) -> Timed:
    return Timed(vid, "", times, {s: (t * (1 - spread), t * (1 + spread)) for s, t in times.items()})


def test_plan_takes_the_fastest_per_shape_and_gives_ties_to_the_biggest_winner():
    ids = ["a", "b", "c", "d"]
    w = {i: 1.0 for i in ids}
    v1 = _timed("c1", {"a": 10, "b": 10, "c": 50, "d": 10.0})
    v2 = _timed("c2", {"a": 40, "b": 40, "c": 20, "d": 40.0})
    v3 = _timed("c3", {"a": 30, "b": 30, "c": 60, "d": 9.9})   # fastest on d, but inside c1's CI there
    p = plan([v3, v2, v1], ids, w)
    assert [v.id for v in p.variants] == ["c1", "c2"]
    assert {s: p.variants[i].id for s, i in p.table.items()} == {"a": "c1", "b": "c1", "c": "c2", "d": "c1"}
    assert p.fastest["d"] == "c3" and p.ties["d"] == ["c3", "c1"]
    # beyond noise, the faster one is kept
    v3.ci["d"] = (8.0, 8.2)
    v3.times["d"] = 8.1
    p = plan([v1, v2, v3], ids, w)
    assert p.variants[p.table["d"]].id == "c3" and len(p.variants) == 3


def _result(status: str, times: dict[str, float | None], **shape_kw) -> EvalResult:
    shapes = [ShapeResult(id=s, correct=status == "pass", time_us=t, time_ci_us=[t * 0.98, t * 1.02] if t else None,
                          sol_fraction=(1.0 / t) if t else None, **shape_kw) for s, t in times.items()]
    return EvalResult(status=status, shapes=shapes)


def test_only_honest_passes_with_a_time_on_every_shape_enter():
    ids = ["0", "1"]
    good = Candidate("c0001", 1, "src", "offline", result=_result("pass", {"0": 5.0, "1": 5.0}))
    wrong = Candidate("c0002", 1, "src", "offline", result=_result("incorrect", {"0": 1.0, "1": 1.0}))
    untimed = Candidate("c0003", 1, "src", "offline", result=_result("pass", {"0": 1.0, "1": None}))
    fast_lie = Candidate("c0004", 1, "src", "offline", result=_result("pass", {"0": 0.1, "1": 0.1}, impossible=True))
    fallback = Candidate("c0005", 1, "src", "offline",
                         result=_result("pass", {"0": 1.0, "1": 1.0}, fallback_ops=["aten::add"]))
    got, skipped = eligible([good, wrong, untimed, fast_lie, fallback], ids)
    assert [v.id for v in got] == ["c0001"]
    assert len(skipped) == 4 and any("impossible" in s for s in skipped) and any("no time" in s for s in skipped)
    with pytest.raises(DispatchError, match="nothing to dispatch"):
        dispatch.build([good, wrong], load_problem(VEC_ADD), _Task(load_problem(VEC_ADD), ids))


class _Task:
    def __init__(self, problem, ids, device="cuda"):
        self.shapes = [problem.shapes[i] for i in ids]
        self.ids, self.device = ids, device
        self.weights = {i: 1.0 for i in ids}


def test_shapes_a_table_cannot_tell_apart_share_the_variant_best_over_both():
    from aka.agent.dispatch import unify
    prob = load_problem(VEC_ADD)
    keys = shape_keys(prob, list(prob.shapes.values()))
    assert keys["2"] == ((), (("a", ("t", (4099,), "torch.float32")), ("b", ("t", (4099,), "torch.float32"))))
    twin = type(prob.shapes["0"])(id="9", input_kwargs=dict(prob.shapes["0"].input_kwargs))
    keys["9"] = shape_keys(prob, [twin])["9"]
    assert keys["9"] == keys["0"]
    ids = ["0", "2", "9"]
    w = {i: 1.0 for i in ids}
    v1 = _timed("c1", {"0": 10.0, "2": 10.0, "9": 100.0})
    v2 = _timed("c2", {"0": 12.0, "2": 50.0, "9": 20.0})
    p, notes = unify(plan([v1, v2], ids, w), keys, w)   # 0 and 9 together: c2 (12 * 20) beats c1 (10 * 100)
    assert {s: p.variants[i].id for s, i in p.table.items()} == {"0": "c2", "2": "c1", "9": "c2"}
    assert notes and "0, 9" in notes[0]
    v3 = _timed("c3", {"0": 1.0, "9": 2000.0})
    p, _ = unify(plan([v1, v3], ["0", "9"], w), keys, w)  # c1 wins the pair (10 * 100 < 1 * 2000): c3 is left out
    assert [v.id for v in p.variants] == ["c1"] and set(p.table.values()) == {0}


# -- end to end through the interpreter -----------------------------------------------------------

_TIMER = r'''
import importlib.util, json, statistics, sys, time
import torch
paths, sizes = sys.argv[1].split(","), json.loads(sys.argv[2])
mods = []
for k, path in enumerate(paths):
    spec = importlib.util.spec_from_file_location(f"cand{k}", path); mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mods.append(mod)
models = [mod.ModelNew() for mod in mods]
outs = [{} for _ in mods]
for sid, n in sizes.items():
    a, b = torch.randn(n), torch.randn(n)
    for model in models:
        model(a=a, b=b)  # first call: the interpreter's own warm-up
    ts = [[] for _ in models]
    for _ in range(15):  # several files: their calls interleaved, so load on the machine falls on each alike
        for model, t in zip(models, ts):
            t0 = time.perf_counter(); model(a=a, b=b); t.append((time.perf_counter() - t0) * 1e6)
    for out, t in zip(outs, ts):
        out[sid] = [statistics.median(t), min(t), max(t)]
res = []
for mod, out in zip(mods, outs):
    picks = {}
    if hasattr(mod, "AKA_TABLE"):
        for sid, n in sizes.items():
            picks[sid] = mod.aka_pick(mod.aka_key((), {"a": torch.empty(n), "b": torch.empty(n)}), mod.AKA_TABLE, mod.AKA_DEFAULT)
    res.append({"times": out, "picks": picks})
print(json.dumps(res if len(res) > 1 else res[0]))
'''


def _time_on_cpu(path, sizes: dict[str, int]):
    """{"times": {shape: [median, min, max] us}, "picks": ...} of one file; a list of them for a list of
    files, timed in one process with their calls interleaved."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    arg = ",".join(map(str, path)) if isinstance(path, (list, tuple)) else str(path)
    p = subprocess.run([sys.executable, "-c", _TIMER, arg, json.dumps(sizes)], capture_output=True, text=True,
                       env=env, cwd=REPO_ROOT, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_dispatcher_of_two_variants_passes_the_harness_and_is_never_slower_than_the_best(tmp_path):
    from aka.evaluate.api import EvalConfig, evaluate
    prob = load_problem(VEC_ADD)
    sizes = {i: int(s.input_kwargs["n"]) for i, s in prob.shapes.items()}
    variants = []
    for vid, src in (("c0001", FAST_SMALL), ("c0002", FAST_LARGE)):
        path = tmp_path / f"{vid}.py"
        path.write_text(src)
        got = _time_on_cpu(path, sizes)["times"]
        # the minimum of 15: on 2 shared CPU cores a median of a few samples can carry another job's
        # work (CI once measured a 6x fixture at 1.9x by its median)
        variants.append(Timed(vid, src, {s: t[1] for s, t in got.items()}, {s: (t[1], t[2]) for s, t in got.items()}))
    small, large = variants
    # the fixtures are what they claim: each is the slower one where the other repeats nothing
    assert small.times["0"] * 2 < large.times["0"] and large.times["2"] * 2 < small.times["2"], (small.times, large.times)
    ids = sorted(sizes)
    p = plan(variants, ids, {i: 1.0 for i in ids})
    assert {s: p.variants[i].id for s, i in p.table.items()} == {"0": "c0001", "1": "c0001", "2": "c0002"}
    cand = tmp_path / "dispatch.py"
    cand.write_text(generate(p, shape_keys(prob, [prob.shapes[i] for i in ids]), prob.name))
    res = evaluate(prob, cand, shapes=ids, config=EvalConfig(device="cpu"))
    assert res.status == "pass", res.reason
    assert all(s.correct for s in res.shapes)
    # the dispatcher against both variants in one process, calls interleaved: timed minutes apart, as
    # the variants were above, another job's load on the 2 shared CPU cores fell on one side only (a
    # full CI run measured the dispatcher at 2.4x a best variant that had been timed on a quiet machine)
    got, *again = _time_on_cpu([cand] + [tmp_path / f"{v.id}.py" for v in variants], sizes)
    assert {s: p.variants[i].id for s, i in ((s, got["picks"][s]) for s in ids)} == \
        {"0": "c0001", "1": "c0001", "2": "c0002"}
    for s in ids:
        best = min(t["times"][s][1] for t in again)
        worst = max(t["times"][s][1] for t in again)
        # 2 shared CPU cores: the margin is wide, but far under the 6x of the wrong variant
        assert got["times"][s][1] < 2.0 * best < worst, (s, got["times"][s], best, worst)


def test_loop_dispatch_round_evaluates_the_dispatcher_and_reports_it(tmp_path):
    """The closing round on CPU with the fixtures' measured times where the GPU harness writes its
    own: the dispatcher goes through the real harness, and on CPU (pass rate 1.0 both) it does
    not replace the incumbent."""
    from aka.agent.base import Stalled
    from aka.agent.config import OptimizeConfig
    from aka.agent.loop import Optimizer
    from aka.agent.objective import score
    from aka.agent.report import write_report
    from aka.agent.shapes import task_shapes
    from aka.agent.store import RunStore
    from aka.evaluate.api import EvalConfig, evaluate
    prob = load_problem(VEC_ADD)
    cfg = OptimizeConfig(op=str(VEC_ADD), runs_dir=str(tmp_path))
    cfg.eval.device = "cpu"
    task = task_shapes(prob, "all", "cpu", cfg.eval.cpu_max_elems)
    store = RunStore.create(tmp_path, "disp")
    opt = Optimizer(cfg, prob, task, proposer=None, store=store)
    sizes = {i: int(prob.shapes[i].input_kwargs["n"]) for i in task.ids}
    for k, src in enumerate((FAST_SMALL, FAST_LARGE), 1):
        c = Candidate(f"c000{k}", 1, src, "whole")
        opt.state.history.append(c)
        store.save_candidate(c)
        res = evaluate(prob, store.candidate_path(c.id), shapes=task.ids, config=EvalConfig(device="cpu"))
        assert res.status == "pass", res.reason
        measured = _time_on_cpu(store.candidate_path(c.id), sizes)["times"]
        for s in res.shapes:  # the interpreter's wall clock, where a GPU evaluation writes its times
            s.time_us, s.time_ci_us = measured[s.id][0], [measured[s.id][1], measured[s.id][2]]
            s.sol_fraction = 1.0 / s.time_us
        c.result, c.score = res, score(res, task.weights, "cpu")
        opt.decide(c)
    opt.state.round = 1
    assert opt.state.incumbent.id == "c0001"
    opt.dispatch_round(Stalled("test"))
    d = opt.state.history[-1]
    assert d.kind == "dispatch" and d.status == "pass", d.result.reason if d.result else d.error
    assert d.meta["dispatch"]["table"] == {"0": "c0001", "1": "c0001", "2": "c0002"}
    assert not d.accepted and "not better" in d.meta["decision"]
    ev = [e for e in store.events() if e["type"] == "dispatch"][-1]
    assert ev["built"] and ev["candidate"] == d.id
    opt.dispatch_round(Stalled("again"))  # nothing new to build from
    assert "already" in [e for e in store.events() if e["type"] == "dispatch"][-1]["reason"]
    text = write_report(store, opt.state, prob, task, cfg, "test", ("stall", "test")).read_text()
    assert "## Dispatch" in text and f"{d.id} dispatches to c0001, c0002" in text
    assert "| 2 | c0002" in text


# -- the offline search with dispatch -------------------------------------------------------------

def test_offline_search_with_dispatch_tries_every_family_then_each_shapes_fastest_point():
    from types import SimpleNamespace

    from aka.agent.objective import Score
    from aka.agent.offline import OfflineProposer
    from aka.agent.shapes import task_shapes
    prob = load_problem("gemm_bf16")
    task = task_shapes(prob, "all", "cuda", 65536)
    plain = OfflineProposer(prob, use_records=False)
    fams = {f.id.rsplit("/", 1)[1]: f for f in plain.families}
    small_m = {s.id for s in task.shapes if s.input_kwargs["M"] <= 256}

    def cand(cid, fam, sol_small, sol_large):
        sol = {s: (sol_small if s in small_m else sol_large) for s in task.ids}
        res = EvalResult("pass", shapes=[ShapeResult(id=s, correct=True, time_us=1.0, sol_fraction=v, bound="memory")
                                         for s, v in sol.items()])
        f = fams[fam]
        return Candidate(cid, 1, f.source, "offline", meta={"offline": {"family": f.id, "params": dict(f.defaults)}},
                         result=res, score=Score(0.3, "sol_fraction", sol))

    def ctx(history):
        return SimpleNamespace(problem=prob, task=task, device="cuda", history=history, parent=history[0],
                               round=len(history) + 1)
    first = cand("c0001", "splitk_small_m", 0.6, 0.11)

    def proposer(**kw):  # the two hand-written families only (the op's dispatch kernel is a third)
        pr = OfflineProposer(prob, use_records=False, **kw)
        pr.families = [f for f in pr.families if f.id.rsplit("/", 1)[1] in ("splitk_small_m", "grouped_tiles")]
        return pr
    # Without dispatch the search stays on the incumbent's family; with it, the other family is next.
    assert proposer().propose(ctx([first]), 1)[0].meta["offline"]["family"] == fams["splitk_small_m"].id
    nxt = proposer(dispatch=True).propose(ctx([first]), 1)[0]
    assert nxt.meta["offline"]["family"] == fams["grouped_tiles"].id and nxt.meta["offline"]["params"] == fams["grouped_tiles"].defaults
    # Both families measured: the moves go around each shape's fastest point, the weakest shape
    # first (grouped tiles at the prefill shapes, sol 0.55 < 0.6), then the other in turn.
    second = cand("c0002", "grouped_tiles", 0.1, 0.55)
    props = proposer(dispatch=True).propose(ctx([first, second]), 2)
    assert [p.parent for p in props] == ["c0002", "c0001"], [p.meta["offline"]["why"] for p in props]
    named = [re.search(r"shape (\w+)", p.meta["offline"]["why"]).group(1) for p in props]
    assert named[0] not in small_m and named[1] in small_m


def _two_variant_run(tmp_path, run_id, times, *, dispatcher_factor=1.0, ci=0.01, within_noise=True, jitter=0.0):
    """The loop's timed branch with the harness's evaluation replaced by fixed GPU-like times:
    round 1 proposes FAST_SMALL and FAST_LARGE (times[source]: shape -> us), the dispatcher runs
    each shape at its variant's time x dispatcher_factor; every time has a +-ci CI; the n-th
    re-measurement of a candidate scales its times by 1 + jitter, 1 - jitter, ... in turn (0: every
    re-measurement repeats the first). Returns (optimizer, outcome, store, problem, task, cfg)."""
    from aka.agent.base import Proposal, ProposerExhausted
    from aka.agent.config import OptimizeConfig
    from aka.agent.loop import Optimizer
    from aka.agent.objective import score
    from aka.agent.shapes import task_shapes
    from aka.agent.store import RunStore
    prob = load_problem(VEC_ADD)
    task = task_shapes(prob, "all", "cuda", 65536)
    cfg = OptimizeConfig(op=str(VEC_ADD), runs_dir=str(tmp_path), n=2)
    cfg.budget.iterations = 5
    cfg.dispatch.accept_within_noise = within_noise

    class Two:
        name = "two"

        def propose(self, ctx, n):
            if ctx.round > 1:
                raise ProposerExhausted("two variants only")
            return [Proposal(FAST_SMALL, "whole"), Proposal(FAST_LARGE, "whole")]

        def on_dropout(self, d):
            pass

    seen: dict = {}

    def fake_eval(c, remeasure=False):
        k = seen[c.id] = seen.get(c.id, 0) + 1 if remeasure else 0
        drift = 1 + (jitter if k % 2 else -jitter) if k else 1.0
        if c.kind == "dispatch":
            by = {"c0001": times[FAST_SMALL], "c0002": times[FAST_LARGE]}
            t = {s: by[c.meta["dispatch"]["table"][s]][s] * dispatcher_factor for s in task.ids}
        else:
            t = times[c.source]
        t = {sid: v * drift for sid, v in t.items()}
        res = EvalResult("pass", shapes=[ShapeResult(id=s, correct=True, time_us=v, time_ci_us=[v * (1 - ci), v * (1 + ci)],
                                                     sol_us=1.0, sol_fraction=1.0 / v) for s, v in t.items()])
        return res, score(res, task.weights, "cuda")

    store = RunStore.create(tmp_path, run_id)
    opt = Optimizer(cfg, prob, task, Two(), store)
    opt._eval = fake_eval
    return opt, opt.run(), store, prob, task, cfg


def test_gpu_path_of_the_loop_ends_with_the_dispatcher_as_incumbent(tmp_path):
    """The loop's timed branch (envelope progress, the closing round, confirmation, report) with the
    harness's evaluation replaced by fixed GPU-like times: wiring only; the harness itself is run
    on the generated file in the tests above."""
    from aka.agent.report import write_report
    times = {FAST_SMALL: {"0": 2.0, "1": 3.0, "2": 60.0}, FAST_LARGE: {"0": 12.0, "1": 18.0, "2": 10.0}}
    opt, out, store, prob, task, cfg = _two_variant_run(tmp_path, "gpu-path", times, dispatcher_factor=1.01)
    kinds = [e["type"] for e in store.events()]
    assert "envelope" in kinds  # c0002 loses the weighted whole but wins shape 2
    d = opt.state.history[-1]
    assert d.kind == "dispatch" and d.accepted and out.incumbent is d
    assert d.meta["dispatch"]["table"] == {"0": "c0001", "1": "c0001", "2": "c0002"}
    assert d.score.value > max(c.score.value for c in opt.state.history[:2])
    text = write_report(store, opt.state, prob, task, cfg, "two", (out.stop_kind, out.reason)).read_text()
    assert "| 2 | c0002 10.00 | c0002 | 10.10 [10.00, 10.20] | 0.99 | within noise or faster |" in text


@pytest.mark.parametrize("within_noise", [True, False])
def test_a_dispatcher_that_ties_the_incumbent_is_returned_when_ties_are_accepted(tmp_path, within_noise):
    """The gemm_bf16 run of 2026-12-05 (results/h100/device-2026-12-05c): a re-tune faster on a few
    shapes by less than eval.min_rel_gain overall, so the dispatcher of both ties the first
    candidate. With dispatch.accept_within_noise (the default) the tie is promoted after the
    interleaved re-measurement, and the run returns a kernel that is the fastest variant on every
    shape; without it the run keeps its first candidate. Loop wiring only, fixed GPU-like times."""
    # c0002 is 2% faster on shape 2 only: about 0.7% on the geomean, under min_rel_gain (2%)
    times = {FAST_SMALL: {"0": 2.0, "1": 3.0, "2": 10.2}, FAST_LARGE: {"0": 2.2, "1": 3.3, "2": 10.0}}
    # re-measurements that drift 1% either way, more than the 0.7% between them: a tie
    opt, out, store, *_ = _two_variant_run(tmp_path, f"tie-{within_noise}", times, ci=0.002, within_noise=within_noise,
                                           jitter=0.01)
    c1, c2, d = opt.state.history[0], opt.state.history[1], opt.state.history[-1]
    assert c2.meta.get("envelope") == ["2"] and not c2.accepted
    assert d.kind == "dispatch" and d.meta["dispatch"]["table"] == {"0": "c0001", "1": "c0001", "2": "c0002"}
    assert c1.score.value < d.score.value < c1.score.value * 1.02
    confirms = [e for e in store.events() if e["type"] == "confirm" and e["candidate"] == d.id]
    if within_noise:
        assert d.accepted and out.incumbent is d and d.meta["decision"].startswith("accepted within noise")
        assert confirms and confirms[-1]["rule"] == "not_worse"
        # said as a tie on the console and in the event, not as an improvement
        from aka.agent.live import event_line as line
        acc = [e for e in store.events() if e["type"] == "accepted" and e["candidate"] == d.id][-1]
        assert acc["within_noise"] and "ACCEPTED within noise of the incumbent, not an improvement" in line(acc)
        first = [e for e in store.events() if e["type"] == "accepted" and e["candidate"] == c1.id][-1]
        assert "within_noise" not in first and "not an improvement" not in line(first)
        from aka.agent.cli import best_line
        assert "no better than the kernel it replaced" in best_line(d, store.root)
        assert "no better" not in best_line(c1, store.root)
    else:
        assert not d.accepted and out.incumbent is c1 and "not beyond noise" in d.meta["decision"]


def _keying_runtimes(monkeypatch, meta_fails) -> list:
    """ProblemRuntime replaced by one that builds on the CPU, records the device it was asked for and
    refuses meta where meta_fails(shape) (an input maker that reads values); returns the record."""
    import aka.evaluate.loader as loader
    tried = []
    real = loader.ProblemRuntime

    class Runtime(real):
        def __init__(self, spec, device):
            super().__init__(spec, "cpu")
            self.where = device

        def make_inputs(self, shape):
            tried.append(self.where)
            if self.where == "meta" and meta_fails(shape):
                raise RuntimeError("Tensor.item() cannot be called on meta tensors")
            return super().make_inputs(shape)
    monkeypatch.setattr(loader, "ProblemRuntime", Runtime)
    return tried


def test_shape_keys_build_inputs_on_the_runs_device_when_meta_cannot(monkeypatch):
    """An input maker that reads values cannot run on meta; the keys are then built on the run's
    device before the CPU (fp8_kv_decode_attention's bench inputs took 4-37 s a shape on the CPU)."""
    prob = load_problem(VEC_ADD)
    tried = _keying_runtimes(monkeypatch, lambda shape: True)
    keys = shape_keys(prob, [prob.shapes["2"]], "cuda:0")
    assert tried == ["meta", "cuda:0"] and keys["2"][1][0][1][1] == (4099,)
    tried.clear()
    shape_keys(prob, [prob.shapes["2"]])          # no device named: meta, then the CPU
    assert tried == ["meta", "cpu"]


def test_shape_keys_keep_the_runs_device_after_a_shape_keyed_on_meta(monkeypatch):
    """Every shape gets the same order (meta, the run's device, the CPU): a shape keyed on meta
    must not drop the run's device from the next one's (the loop variable once rebound it)."""
    prob = load_problem(VEC_ADD)
    tried = _keying_runtimes(monkeypatch, lambda shape: shape["input_kwargs"]["n"] == 4099)
    shape_keys(prob, [prob.shapes["0"], prob.shapes["2"]], "cuda:0")
    assert tried == ["meta", "meta", "cuda:0"]


def test_a_dispatcher_ahead_on_every_re_measurement_is_said_to_be_faster_not_a_tie(tmp_path):
    """The fp8_kv_decode_attention run of 2026-12-06 (H100): the dispatcher re-measured ahead of the
    first candidate on every sample (+1.3%, under eval.min_rel_gain's 2%). That is a gain beyond
    noise, and the run says so: not 'within noise', not 'no better than the kernel it replaced'."""
    times = {FAST_SMALL: {"0": 2.0, "1": 3.0, "2": 10.2}, FAST_LARGE: {"0": 2.2, "1": 3.3, "2": 10.0}}
    opt, out, store, *_ = _two_variant_run(tmp_path, "ahead", times, ci=0.002)   # steady re-measurements
    d = opt.state.history[-1]
    assert d.kind == "dispatch" and d.accepted and out.incumbent is d
    assert d.meta["decision"].startswith("accepted, faster beyond noise") and "+0.7%" in d.meta["decision"]
    from aka.agent.cli import best_line
    from aka.agent.live import event_line as line
    acc = [e for e in store.events() if e["type"] == "accepted" and e["candidate"] == d.id][-1]
    assert "within_noise" not in acc and "not an improvement" not in line(acc)
    conf = [e for e in store.events() if e["type"] == "confirm" and e["candidate"] == d.id][-1]
    assert "faster beyond noise, +0.7%" in line(conf)
    assert "no better" not in best_line(d, store.root) and "faster beyond noise" in best_line(d, store.root)
