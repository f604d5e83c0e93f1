"""`aka exp` end to end on the CPU: a tiny grid (2 arms x 1 op x 2 seeds, 2 rounds) through the
executors, the real harness and the scripted LLM; resumed; reported. Then the same config against
an OpenAI-compatible server (tests/fakes/llm_server.py) with only --model changed. The report's
statistics are also checked on a synthetic table with a planted effect."""
from __future__ import annotations

import json

import numpy as np
import yaml

from aka.cli import main
from aka.exp.table import COLUMNS, read_table, write_table
from aka.problem import REPO_ROOT

try:
    from tests.fakes.llm_server import FakeLLMServer
except ImportError:
    from fakes.llm_server import FakeLLMServer

CI = REPO_ROOT / "experiments" / "configs" / "ci_tiny.yaml"


def tiny(tmp_path) -> str:
    """ci_tiny with two of its arms: dropout on (fires after round 1) and best-of-N."""
    p = tmp_path / "tiny.yaml"
    p.write_text(yaml.safe_dump({"extends": str(CI), "name": "tiny",
                                 "arms": {"dropout_off": None, "retrieval_off": None}}))
    return str(p)


def events(run_dir) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]


def test_tiny_grid_runs_resumes_and_reports_with_the_scripted_llm(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["exp", "run", tiny(tmp_path), "--out", str(out)]) == 0
    rows = read_table(out / "table.csv")
    assert list(rows[0]) == COLUMNS
    assert sorted({(r["arm"], r["seed"]) for r in rows}) == [("best_of_n", 0), ("best_of_n", 1),
                                                             ("dropout_on", 0), ("dropout_on", 1)]
    # replies: no code, then a correct kernel; each run has two rows, best-so-far 0 -> 1
    for arm, seed in {(r["arm"], r["seed"]) for r in rows}:
        run = [r for r in rows if (r["arm"], r["seed"]) == (arm, seed)]
        assert [(r["round"], r["status"], r["best_so_far"], r["accepted"]) for r in run] == \
            [(1, "invalid", 0.0, False), (2, "pass", 1.0, True)]
        assert run[1]["tokens"] > run[0]["tokens"] > 0 and run[1]["objective_kind"] == "pass_rate"
    runs = {p.name: events(p) for p in (out / "runs").iterdir()}
    assert all(any(e["type"] == "dropout" for e in ev) for n, ev in runs.items() if n.startswith("dropout_on"))
    assert not any(e["type"] == "dropout" for n, ev in runs.items() if n.startswith("best_of_n") for e in ev)
    arms = yaml.safe_load((out / "config" / "arms.yaml").read_text())["arms"]
    assert arms["best_of_n"]["resolved"]["feedback"] is False and arms["dropout_on"]["resolved"]["dropout"]["enabled"]

    capsys.readouterr()
    assert main(["exp", "run", tiny(tmp_path), "--out", str(out)]) == 0  # resumable: nothing left to run
    assert "4 already done, 0 to run" in capsys.readouterr().out
    assert read_table(out / "table.csv") == rows

    # A run cut off before its stop event resumes from its store (its two rounds are done: it stops).
    cut = next((out / "runs").glob("best_of_n*s1")) / "events.jsonl"
    cut.write_text("".join(x + "\n" for x in cut.read_text().splitlines() if '"type": "stop"' not in x))
    assert main(["exp", "run", tiny(tmp_path), "--out", str(out)]) == 0
    assert "3 already done, 1 to run" in capsys.readouterr().out
    resumed = [e["type"] for e in events(cut.parent)]
    assert resumed.count("resume") == 1 and resumed[-1] == "stop" and read_table(out / "table.csv") == rows

    # Cut off again, its candidate sources gone (a run store copied from a results folder): it cannot
    # resume, so it is set aside (kept) and the cell runs anew under the same seed, to the same rows.
    for src in (cut.parent / "candidates").glob("*.py"):
        src.unlink()
    cut.write_text("".join(x + "\n" for x in cut.read_text().splitlines() if '"type": "stop"' not in x))
    assert main(["exp", "run", tiny(tmp_path), "--out", str(out)]) == 0
    assert "3 already done, 1 to run" in capsys.readouterr().out
    aside = list((out / "runs").glob(cut.parent.name + ".unresumable-*"))
    assert len(aside) == 1 and "candidate source(s) missing" in (aside[0] / "SET_ASIDE.txt").read_text()
    fresh = [e["type"] for e in events(cut.parent)]
    assert "resume" not in fresh and fresh[-1] == "stop"
    timeless = [{k: v for k, v in r.items() if k != "wall_s"} for r in rows]
    assert [{k: v for k, v in r.items() if k != "wall_s"} for r in read_table(out / "table.csv")] == timeless

    # Cut off once more, its first candidate timed on another device (a store carried from an H100):
    # its times are not comparable here, so it is set aside too and the cell runs anew.
    first = sorted((cut.parent / "candidates").glob("c*.json"))
    rec = json.loads(first[-1].read_text())
    rec["result"]["env"] = dict(rec["result"]["env"], gpu="NVIDIA H100 80GB HBM3")
    for f in first:
        f.write_text(json.dumps(rec) if f == first[-1] else f.read_text())
    cut.write_text("".join(x + "\n" for x in cut.read_text().splitlines() if '"type": "stop"' not in x))
    assert main(["exp", "run", tiny(tmp_path), "--out", str(out)]) == 0
    aside = sorted((out / "runs").glob(cut.parent.name + ".unresumable-*"))
    assert len(aside) == 2 and any("timed on NVIDIA H100 80GB HBM3, this device is cpu" in (a / "SET_ASIDE.txt").read_text()
                                   for a in aside)
    assert [{k: v for k, v in r.items() if k != "wall_s"} for r in read_table(out / "table.csv")] == timeless

    # The same directory under a changed design is refused: results of two designs would mix.
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump({"extends": tiny(tmp_path), "budget": {"rounds": 3}}))
    assert main(["exp", "run", str(other), "--out", str(out), "--no-probe"]) == 2
    assert "ran under another config" in capsys.readouterr().err

    assert main(["exp", "report", str(out)]) == 0
    report = (out / "REPORT.md").read_text()
    for part in ("## Paired comparisons", "Smallest detectable effect", "## Variance decomposition",
                 "## Iteration analysis", "## Environment", "## Resolved config: config/arms.yaml"):
        assert part in report
    for png in ("best_so_far.png", "final_by_arm.png", "iteration.png"):
        assert (out / png).stat().st_size > 5000
    st = json.loads((out / "stats.json").read_text())
    mech = st["mechanisms"]
    assert mech["dropout_on"]["runs_with_dropout"] == 2 and mech["best_of_n"]["dropouts"] == 0
    assert mech["dropout_on"]["rounds_with_hits"] == 4  # retrieval full: every round's prompt has hits
    assert st["paired"][0]["n"] == 2 and st["paired"][0]["ties"] == 2  # same replies: no difference
    assert st["iteration"]["dropout_on"]["per_round"] == [
        {"round": 1, "n": 2, "compiled": 0.0, "correct": 0.0}, {"round": 2, "n": 2, "compiled": 1.0, "correct": 1.0}]


def test_the_same_config_runs_against_an_openai_compatible_server(tmp_path, monkeypatch):
    good = (REPO_ROOT / "tests" / "fixtures" / "agent" / "candidates" / "good.py").read_text()
    reply = f"One program per row.\nTECHNIQUES: one-pass-reduction\n```python\n{good}```\n"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-exp-test")
    with FakeLLMServer([{"text": reply}] * 8, api_key="sk-exp-test") as server:
        out = tmp_path / "out"
        rc = main(["exp", "run", tiny(tmp_path), "--out", str(out), "--model",
                   f"openai-compat:fake-coder@{server.openai_base_url}"])
        paths = server.paths()
    assert rc == 0
    assert len(paths) == 8 and set(paths) == {"/v1/chat/completions"}  # 4 runs x 2 rounds, none scripted
    rows = read_table(out / "table.csv")
    assert len(rows) == 8 and {r["status"] for r in rows} == {"pass"}
    cand = json.loads(next((out / "runs").glob("best_of_n*/candidates/c0001.json")).read_text())
    assert cand["meta"]["model"] == "openai-compat:fake-coder"


def test_report_finds_a_planted_effect_and_not_a_null_one(tmp_path):
    """A synthetic table: 6 operators in 3 categories x 4 seeds x 3 arms; arm 'better' is 1.5x 'base',
    'same' is 'base' with fresh noise. Category effects are large, so they must dominate the shares."""
    rng = np.random.default_rng(2026)
    cats = {"op0": "A", "op1": "A", "op2": "B", "op3": "B", "op4": "C", "op5": "C"}
    cat_eff = {"A": -1.0, "B": 0.0, "C": 1.0}
    rows = []
    for op, cat in cats.items():
        op_eff = cat_eff[cat] + rng.normal(0, 0.2)
        for seed in range(4):
            for arm, eff in (("base", 0.0), ("better", np.log(1.5)), ("same", 0.0)):
                final = float(np.exp(-1.5 + op_eff + eff + rng.normal(0, 0.1)))
                for r in (1, 2):
                    rows.append({"arm": arm, "operator": op, "category": cat, "seed": seed, "round": r,
                                 "candidate": f"c{r:04d}", "status": "pass", "compiled": True, "correct": True,
                                 "objective": final, "best_so_far": final if r == 2 else final / 2,
                                 "speedup_eager": 1.2, "tokens": 100 * r, "cost_usd": 0.01 * r, "wall_s": 10.0 * r,
                                 "accepted": True, "objective_kind": "sol_fraction", "run_id": f"{arm}-{op}-{seed}"})
    write_table(rows, tmp_path / "table.csv")
    assert main(["exp", "report", str(tmp_path), "--baseline", "base", "--boot", "1000"]) == 0
    st = json.loads((tmp_path / "stats.json").read_text())
    by = {t["b"]: t for t in st["paired"]}
    se = 0.1 * np.sqrt(2) / np.sqrt(24)  # SD of a paired log-difference over sqrt(pairs)
    assert by["better"]["p_holm"] < 0.01 and abs(by["better"]["mean_log_ratio"] - np.log(1.5)) < 3 * se
    assert by["same"]["p_holm"] > 0.05
    sh = st["variance"]["share"]
    assert sh["category"] > 0.8 and 0.01 < sh["method"] < 0.2
    assert st["mde"]["n_pairs"] == 24 and st["mde"]["mde_ratio"] < 1.5  # the design could see the planted 1.5x
    g = st["summaries"]["better"]["geomean"]
    assert g["lo"] < g["value"] < g["hi"]
    assert st["iteration"]["base"]["first_try_runs"] == 24 and st["iteration"]["base"]["first_try_speedup"] == 1.2


def test_wall_time_leaves_out_the_downtime_between_a_cut_off_and_its_resume():
    # a run cut off by a device call's deadline and resumed in a call hours later: the table's
    # wall_s (and the report's against-spend plot) counts the run's own seconds only
    from aka.exp.table import active_clock
    ev = [{"t": "2026-12-02T19:00:00+00:00", "type": "start"},
          {"t": "2026-12-02T19:00:30+00:00", "type": "accepted", "candidate": "c0001"},
          {"t": "2026-12-02T19:01:00+00:00", "type": "proposal", "candidate": "c0002"},
          {"t": "2026-12-03T07:44:00+00:00", "type": "resume"},
          {"t": "2026-12-03T07:44:40+00:00", "type": "rejected", "candidate": "c0002"}]
    assert active_clock(ev) == [0.0, 30.0, 60.0, 60.0, 100.0]
