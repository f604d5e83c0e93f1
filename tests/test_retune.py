"""The offline search's re-tune move (aka/agent/retune.py): the repository's tuner over some shapes,
the winners baked into a copy of the dispatch kernel with the other rows kept, the copy proposed.

End to end on the CPU with the GEMM tuner's interpreter mode (its timings mean nothing there, so
the loop never offers the move on a CPU: `unavailable`); the proposer's ordering with the tuner
replaced by a stub that returns a changed source."""
import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from aka.agent import retune as rt
from aka.evaluate.static import check_source
from aka.kb.entries import read_entry
from aka.problem import REPO_ROOT, load_problem

GEMM = REPO_ROOT / "knowledge_base" / "kernels" / "gemm_bf16" / "dispatch.py"
PAGED = REPO_ROOT / "knowledge_base" / "kernels" / "paged_decode_attention" / "split_dispatch.py"


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _write_tune(path, records):
    path.write_text(json.dumps({"env": {"gpu": "NVIDIA H200", "torch": "t", "triton": "3.6.0", "git_sha": "abc",
                                        "date": "d", "timing": "graph"}, "records": records}))


def test_merge_bake_replaces_only_the_measured_rows(tmp_path):
    (tmp_path / "gemm_bf16").mkdir()
    shutil.copy(GEMM, tmp_path / "gemm_bf16" / "dispatch.py")
    before = _load(GEMM, "_before")
    M, N, K, old_cfg = before._TABLE[5]
    cfg = {**old_cfg, "BM": 32, "num_warps": 4}
    _write_tune(tmp_path / "t.json", [{"op": "gemm_bf16", "shape": "7", "M": M, "N": N, "K": K, "config": cfg,
                                       "correct": True, "us": 30.0}])
    done = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "bake_dispatch.py"), str(tmp_path / "t.json"),
                           "--kernels", str(tmp_path), "--ops", "gemm_bf16", "--merge"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    path = tmp_path / "gemm_bf16" / "dispatch.py"
    after = _load(path, "_after")
    assert len(after._TABLE) == len(before._TABLE)
    for old, new in zip(before._TABLE, after._TABLE):
        assert new == ((M, N, K, cfg) if old[:3] == (M, N, K) else old)
    assert f"{len(before._TABLE) - 1} rows not measured there kept from" in after._TABLE_SOURCE
    assert before._TABLE_SOURCE in after._TABLE_SOURCE
    text = path.read_text()
    table = text[text.index("_TABLE = ["):text.index("_GPU_TABLE_SOURCES = {}")]
    assert "# 30.0 us" in table and table.count(" us\n") == len(before._TABLE)  # kept rows keep their times
    assert check_source(text).ok
    # without --merge the table is the tune file's winners alone (the tuner's full-grid runs)
    shutil.copy(GEMM, path)
    subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "bake_dispatch.py"), str(tmp_path / "t.json"),
                    "--kernels", str(tmp_path), "--ops", "gemm_bf16"], check=True, capture_output=True, timeout=60)
    assert _load(path, "_alone")._TABLE == [(M, N, K, cfg)]


def test_unavailable_says_why():
    prob = load_problem("gemm_bf16")
    meta, _ = read_entry(GEMM)
    assert meta["tuner"] == "gemm"
    ids = list(prob.shapes)
    assert rt.unavailable(meta, GEMM, prob, ids, "cuda") is None
    assert "GPU only" in rt.unavailable(meta, GEMM, prob, ids, "cpu")
    assert "no tuner" in rt.unavailable({}, GEMM, prob, ids, "cuda")
    assert "unknown tuner" in rt.unavailable({"tuner": "magic"}, GEMM, prob, ids, "cuda")
    other = REPO_ROOT / "knowledge_base" / "kernels" / "gemm_bf16" / "grouped_tiles.py"
    assert "the tuner reads knowledge_base/kernels/gemm_bf16/dispatch.py" in rt.unavailable(meta, other, prob, ids, "cuda")
    assert "no bench shape" in rt.unavailable(meta, GEMM, prob, ["custom"], "cuda")
    att = load_problem("paged_decode_attention")
    ameta, _ = read_entry(PAGED)
    assert ameta["tuner"] == "attention"
    assert rt.unavailable(ameta, PAGED, att, list(att.shapes), "cuda") is None
    assert "no table kernel for gemm_bf16" in rt.unavailable(ameta, GEMM, prob, ids, "cuda")


@pytest.mark.slow
def test_retune_end_to_end_with_the_gemm_tuner_on_cpu(tmp_path):
    """The real tuner (interpreter mode, one tiny shape, a short deadline) and the real bake."""
    prob = load_problem("gemm_bf16")
    meta, _ = read_entry(GEMM)
    original = GEMM.read_text()
    got = rt.retune(meta, GEMM, prob, ["c0"], tmp_path / "r", 25.0, tune_args=("--cpu",))
    assert GEMM.read_text() == original  # the knowledge base's file is never written
    doc = json.loads(Path(got.summary["tune_json"]).read_text())
    ok = [r for r in doc["records"] if r["correct"] and r["shape"] == "c0"]
    assert ok and got.summary["correct"] == len(ok) and got.summary["shapes"] == ["c0"]
    fastest = min(ok, key=lambda r: r["us"])
    copy = tmp_path / "r" / "kb" / "kernels" / "gemm_bf16" / "dispatch.py"
    assert copy.read_text() == got.source and check_source(got.source).ok
    mod, before = _load(copy, "_retuned"), _load(GEMM, "_orig")
    assert len(mod._TABLE) == len(before._TABLE) + 1  # c0 (M=3, N=40, K=256) is no bench shape: a new row
    assert mod.pick_config(3, 40, 256) == fastest["config"]
    assert [r for r in mod._TABLE if r[:3] != (3, 40, 256)] == before._TABLE
    assert re.search(r"^AKA_PARAMS = .*$", got.source, re.M).group(0) == re.search(r"^AKA_PARAMS = .*$", original, re.M).group(0)
    assert "gpu_tune_gemm.py" in got.summary["tuner"] and (tmp_path / "r" / "tune.log").is_file()


def test_retune_reports_a_tuner_that_fails(tmp_path):
    prob = load_problem("gemm_bf16")
    meta, _ = read_entry(GEMM)
    with pytest.raises(rt.RetuneError, match="has no shape"):
        rt.retune(meta, GEMM, prob, ["no-such-shape"], tmp_path / "r", 5.0, tune_args=("--cpu",))
    with pytest.raises(rt.RetuneError, match="no shapes"):
        rt.retune(meta, GEMM, prob, [], tmp_path / "r", 5.0)


# -- the proposer -----------------------------------------------------------------------------------

def _setup(monkeypatch, outcome):
    from aka.agent.objective import Score
    from aka.agent.offline import OfflineProposer, RetuneSettings
    from aka.agent.shapes import task_shapes
    from aka.agent.store import Candidate
    from aka.evaluate.result import EvalResult, ShapeResult
    prob = load_problem("gemm_bf16")
    task = task_shapes(prob, "all", "cuda", 65536)
    calls = []

    def fake(meta, path, problem, ids, out_dir, deadline_s, lock_root=None, **kw):
        calls.append((path, list(ids), deadline_s))
        if isinstance(outcome, Exception):
            raise outcome
        return rt.Retuned(path.read_text().replace("_TABLE_SOURCE = '", "_TABLE_SOURCE = 'retuned; "),
                          {"correct": 40, "records": 52, "shapes": list(ids), "wall_s": 97.0})
    monkeypatch.setattr(rt, "retune", fake)
    pr = OfflineProposer(prob, use_records=False, dispatch=True, retune=RetuneSettings("/tmp/unused", 90.0))
    disp = next(f for f in pr.families if f.id.endswith("/dispatch"))
    res = EvalResult("pass", shapes=[ShapeResult(id=s, correct=True, time_us=1.0, sol_fraction=0.6, bound="compute")
                                     for s in task.ids])
    first = Candidate("c0001", 1, disp.source, "offline", meta={"offline": {"family": disp.id, "params": dict(disp.defaults)}},
                      result=res, score=Score(0.6, "sol_fraction", {}))

    def ctx(history, device="cuda"):
        return SimpleNamespace(problem=prob, task=task, device=device, history=history, parent=history[0],
                               round=len(history) + 1)
    return pr, disp, first, ctx, calls


def test_proposer_retunes_a_passing_dispatch_kernel_first_and_once(monkeypatch):
    from aka.agent.offline import RETUNE
    from aka.agent.store import Candidate
    pr, disp, first, ctx, calls = _setup(monkeypatch, None)
    p = pr.propose(ctx([first]), 1)[0]
    assert p.meta["offline"]["family"] == disp.id and p.meta["offline"]["params"][RETUNE] == 1
    assert "retuned; " in p.source and p.source != disp.source
    assert p.meta["retune"]["correct"] == 40 and "40 correct configurations of 52" in p.meta["offline"]["why"]
    assert calls == [(disp.path, [s.id for s in first.result.shapes], 90.0)]
    # on the record, the move is not made again, and no move starts from the re-tuned point
    again = Candidate("c0002", 2, p.source, "offline", meta=p.meta)
    nxt = pr.propose(ctx([first, again]), 3)
    assert all(RETUNE not in q.meta["offline"]["params"] for q in nxt) and len(calls) == 1
    # on a CPU the move is never offered
    pr2, _, first2, ctx2, calls2 = _setup(monkeypatch, None)
    q = pr2.propose(ctx2([first2], device="cpu"), 1)[0]
    assert RETUNE not in q.meta["offline"]["params"] and not calls2


def test_a_failed_retune_is_noted_and_the_search_goes_on(monkeypatch):
    from aka.agent.offline import RETUNE
    pr, disp, first, ctx, calls = _setup(monkeypatch, rt.RetuneError("the tuner exited 1: boom"))
    p = pr.propose(ctx([first]), 1)[0]
    assert RETUNE not in p.meta["offline"]["params"]
    assert any("re-tune skipped: the tuner exited 1: boom" in n for n in p.meta["offline"]["notes"])
    pr.propose(ctx([first]), 1)
    assert len(calls) == 1  # not tried again


def test_retune_waits_for_room_in_the_wall_budget(monkeypatch):
    from aka.agent.offline import RETUNE
    pr, disp, first, ctx, calls = _setup(monkeypatch, None)
    first.result.wall_s = {"total_s": 120.0}
    pr.retune.wall_left = lambda: 200.0  # tuner 90 s + two evaluations of ~120 s do not fit
    p = pr.propose(ctx([first]), 1)[0]
    assert RETUNE not in p.meta["offline"]["params"] and not calls
    assert any("wall budget left" in n for n in p.meta["offline"]["notes"])


def test_retune_wall_estimate_is_the_familys_own_evaluation_less_its_compiles(monkeypatch):
    """The move needs the tuner's time plus two evaluations like the family's own, without their
    Triton compiles (the re-tuned copy hits the compile cache the tuner filled): a slow round of
    another family, or compile seconds, do not keep it waiting."""
    from aka.agent.objective import Score
    from aka.agent.offline import RETUNE
    from aka.agent.store import Candidate
    pr, disp, first, ctx, calls = _setup(monkeypatch, None)
    first.result.wall_s = {"total_s": 120.0, "compiling_unlocked_s": 70.0}   # 50 s besides compiling
    other = next(f for f in pr.families if f.id != disp.id)
    slow = Candidate("c0002", 2, other.source, "offline", meta={"offline": {"family": other.id, "params": {}}},
                     result=first.result.__class__("pass", shapes=first.result.shapes), score=Score(0.4, "sol_fraction", {}))
    slow.result.wall_s = {"total_s": 400.0}
    pr.retune.wall_left = lambda: 200.0      # 90 + 2 x 50 = 190 fits; 90 + 2 x 120 or 2 x 400 would not
    p = pr.propose(ctx([first, slow]), 1)[0]
    assert p.meta["offline"]["family"] == disp.id and p.meta["offline"]["params"].get(RETUNE) == 1 and len(calls) == 1
    pr2, disp2, first2, ctx2, calls2 = _setup(monkeypatch, None)
    first2.result.wall_s = {"total_s": 120.0}                                # nothing was compile time
    pr2.retune.wall_left = lambda: 200.0
    p2 = pr2.propose(ctx2([first2]), 1)[0]
    assert RETUNE not in p2.meta["offline"]["params"] and not calls2
    assert any("needs about 330 s" in n for n in p2.meta["offline"]["notes"])


def test_loop_evaluates_and_promotes_the_retuned_table(tmp_path, monkeypatch):
    """The loop's GPU branch with the harness replaced by fixed times (faster for the re-tuned
    source) and the tuner by a stub: the re-tune is round 2, is confirmed, becomes the incumbent,
    and the report's Re-tune section says what was measured. Wiring only: the real tuner and bake
    are run above."""
    from aka.agent.config import OptimizeConfig
    from aka.agent.loop import Optimizer
    from aka.agent.objective import score
    from aka.agent.offline import OfflineProposer, RetuneSettings
    from aka.agent.report import write_report
    from aka.agent.shapes import task_shapes
    from aka.agent.store import RunStore
    from aka.evaluate.result import EvalResult, ShapeResult
    prob = load_problem("gemm_bf16")
    task = task_shapes(prob, "all", "cuda", 65536)
    cfg = OptimizeConfig(op="gemm_bf16", runs_dir=str(tmp_path))
    cfg.budget.iterations = 3

    def fake_retune(meta, path, problem, ids, out_dir, deadline_s, lock_root=None, **kw):
        return rt.Retuned(path.read_text() + "\n# retuned\n", {"correct": 40, "records": 52, "shapes": list(ids),
                                                               "wall_s": 61.0, "tuner": "gpu_tune_gemm.py ...",
                                                               "tune_json": str(out_dir / "tune.json")})
    monkeypatch.setattr(rt, "retune", fake_retune)

    def fake_eval(c, remeasure=False):
        f = 0.8 if "# retuned" in (c.source or "") else 1.0
        res = EvalResult("pass", shapes=[ShapeResult(id=s, correct=True, time_us=10.0 * f, time_ci_us=[9.9 * f, 10.1 * f],
                                                     sol_us=5.0, sol_fraction=0.5 / f) for s in task.ids])
        res.wall_s = {"total_s": 1.0}
        return res, score(res, task.weights, "cuda")

    store = RunStore.create(tmp_path, "retune-loop")
    prop = OfflineProposer(prob, use_records=False, dispatch=True, retune=RetuneSettings(str(store.root / "retune"), 50.0))
    prop.families = [f for f in prop.families if f.id.endswith("/dispatch")]
    prop.by_id = {f.id: f for f in prop.families}
    opt = Optimizer(cfg, prob, task, prop, store)
    opt._eval = fake_eval
    out = opt.run()
    first, second = opt.state.history[:2]
    assert second.meta.get("retune") and second.accepted and second.round == 2
    assert out.incumbent.score.value > first.score.value
    text = write_report(store, opt.state, prob, task, cfg, "offline", (out.stop_kind, out.reason)).read_text()
    assert "## Re-tune" in text and "40 correct configurations of 52 measured in 61 s" in text
    assert "table re-tuned here" in text


@pytest.mark.slow
def test_retune_end_to_end_with_the_attention_tuner_on_cpu(tmp_path):
    """The attention recipe (gpu_tune_attn.py, then bake_dispatch_attn.py into a copy under --kb):
    one small shape, one config, the interpreter; its bake accepts the CPU run only because the test
    says --allow-cpu."""
    prob = load_problem("paged_decode_attention")
    meta, _ = read_entry(PAGED)
    original = PAGED.read_text()
    got = rt.retune(meta, PAGED, prob, ["s0"], tmp_path / "r", 300.0,
                    tune_args=("--device", "cpu", "--max-configs", "1"), bake_args=("--allow-cpu",))
    assert PAGED.read_text() == original
    doc = json.loads(Path(got.summary["tune_json"]).read_text())
    assert doc["provenance"]["device"] == "cpu" and got.summary["correct"] == 1
    key = doc["best"]["paged_decode_attention"]["s0"]["key"]
    copy = tmp_path / "r" / "kb" / "kernels" / "paged_decode_attention" / "split_dispatch.py"
    mod, shipped = _load(copy, "_attn_retuned"), _load(PAGED, "_attn_shipped")
    assert set(mod.DISPATCH) == set(shipped.DISPATCH) | {key}
    assert got.source == copy.read_text() and check_source(got.source).ok


@pytest.mark.slow
def test_retune_end_to_end_with_the_moe_tuner_on_cpu(tmp_path):
    """The MoE recipe: tuner and bake both on the copy (--kernel), one small shape under the
    interpreter; its bake accepts an untimed run only with --allow-unmeasured (the test's)."""
    moe = REPO_ROOT / "knowledge_base" / "kernels" / "fused_moe" / "grouped_dispatch.py"
    prob = load_problem("fused_moe")
    meta, _ = read_entry(moe)
    assert meta["tuner"] == "moe" and rt.unavailable(meta, moe, prob, list(prob.shapes), "cuda") is None
    original = moe.read_text()
    got = rt.retune(meta, moe, prob, ["s0"], tmp_path / "r", 600.0, tune_args=("--device", "cpu"),
                    bake_args=("--allow-unmeasured",))
    assert moe.read_text() == original
    doc = json.loads(Path(got.summary["tune_json"]).read_text())
    assert [s["id"] for s in doc["shapes"]] == ["s0"] and got.summary["shapes_won"] == 1
    assert got.summary["correct"] == sum(c["ok"] for c in doc["shapes"][0]["configs"]) > 0
    copy = tmp_path / "r" / "kb" / "kernels" / "fused_moe" / "grouped_dispatch.py"
    assert got.source == copy.read_text() != original and check_source(got.source).ok
    kw = doc["shapes"][0]["input_kwargs"]
    baked = _load(copy, "_moe_retuned")
    pick = baked.pick_config(kw["num_tokens"], kw["num_experts"], kw["hidden_size"], kw["intermediate_size"], kw["top_k"])
    want = {k: v for k, v in doc["shapes"][0]["best"]["config"].items() if k != "TABLE"}
    assert {k: pick[k] for k in want} == want


@pytest.mark.slow
def test_retune_the_fp8_dispatch_table_on_cpu(tmp_path):
    """The next device session's first optimize (fp8_block_scaled_gemm) goes through the same GEMM
    recipe with --ops fp8_block_scaled_gemm: one tiny shape under the interpreter, baked with the
    other rows kept."""
    fp8 = REPO_ROOT / "knowledge_base" / "kernels" / "fp8_block_scaled_gemm" / "dispatch.py"
    prob = load_problem("fp8_block_scaled_gemm")
    meta, _ = read_entry(fp8)
    assert rt.unavailable(meta, fp8, prob, list(prob.shapes), "cuda") is None
    got = rt.retune(meta, fp8, prob, ["c0"], tmp_path / "r", 25.0, tune_args=("--cpu",))
    doc = json.loads(Path(got.summary["tune_json"]).read_text())
    assert {r["op"] for r in doc["records"]} == {"fp8_block_scaled_gemm"} and got.summary["correct"] > 0
    mod, before = _load(tmp_path / "r" / "kb" / "kernels" / "fp8_block_scaled_gemm" / "dispatch.py", "_fp8_rt"), \
        _load(fp8, "_fp8_orig")
    assert [r for r in mod._TABLE if r[:3] != (3, 40, 256)] == before._TABLE and len(mod._TABLE) == len(before._TABLE) + 1


def test_past_round_walls_forecast_a_resumed_run():
    """A resumed run forecasts its next round from the rounds its store recorded (the closing
    dispatch round is not a search round), so the wall budget can refuse a round that would not fit."""
    from aka.agent.loop import past_round_walls
    ev = [{"type": "start", "t": "2026-12-05T15:54:14+00:00"},
          {"type": "round_start", "t": "2026-12-05T15:54:14+00:00", "round": 1},
          {"type": "round_end", "t": "2026-12-05T15:56:03+00:00", "round": 1},
          {"type": "round_start", "t": "2026-12-05T15:56:03+00:00", "round": 2},
          {"type": "round_end", "t": "2026-12-05T16:01:04+00:00", "round": 2},
          {"type": "round_start", "t": "2026-12-05T16:01:10+00:00", "round": 3, "dispatch": True},
          {"type": "round_end", "t": "2026-12-05T16:03:10+00:00", "round": 3},
          {"type": "round_start", "t": "2026-12-05T16:05:00+00:00", "round": 4}]   # cut off: no end
    assert past_round_walls(ev) == [109.0, 301.0]
    assert past_round_walls([]) == []
