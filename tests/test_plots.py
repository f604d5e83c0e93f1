"""The reports' plots: drawn when matplotlib is there (a default dependency), and when it cannot be
imported or a drawing fails, one plain line on the console and in the report, never a silent gap."""
from __future__ import annotations

import json
import sys

import pytest

from aka.cli import main


def bench_run(tmp_path):
    """Three timed GPU records as `aka bench run` writes them (FLOPs and bytes: a roofline point each)."""
    run = tmp_path / "run"
    run.mkdir()
    rec = dict(impl="reference", device="cuda", correct=True, status="pass", category="Math", shape_weight=1.0,
               op_weight=0.5, gpu="NVIDIA H200", git_sha="abc", date="2026-11-30", bytes=3.0e6,
               flops={"bf16": 2.0e9})
    rows = [dict(rec, op="a_rather_long_operator_name", shape="0", sol_us=0.7, sol_fraction=0.07, time_us=10.0),
            dict(rec, op="a_rather_long_operator_name", shape="1", sol_us=40.0, sol_fraction=0.8, time_us=50.0),
            dict(rec, op="b", shape="0", sol_us=20.0, sol_fraction=0.5, time_us=40.0)]
    (run / "records.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return run


def no_matplotlib(monkeypatch):
    for mod in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, mod)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails as for a package not installed


def test_bench_report_without_matplotlib_says_so_on_stderr_and_in_the_report(tmp_path, monkeypatch, capsys):
    no_matplotlib(monkeypatch)
    run = bench_run(tmp_path)
    assert main(["bench", "report", str(run)]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("aka bench report: plots not drawn: matplotlib cannot be imported")
    assert "pip install" in err[0]
    text = (run / "REPORT.md").read_text()
    assert "## Plots" in text and "Plots not drawn: matplotlib cannot be imported" in text
    assert not list(run.glob("*.png"))


def test_bench_report_draws_both_plots(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    run = bench_run(tmp_path)
    assert main(["bench", "report", str(run)]) == 0
    assert "not drawn" not in capsys.readouterr().err
    text = (run / "REPORT.md").read_text()
    for png in ("sol_fraction_by_op.png", "roofline.png"):
        assert f"]({png})" in text and (run / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_drawing_that_fails_is_said_and_the_tables_stay(tmp_path, monkeypatch, capsys):
    plt = pytest.importorskip("matplotlib.pyplot")

    def full_disk(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(plt.Figure, "savefig", full_disk)
    run = bench_run(tmp_path)
    assert main(["bench", "report", str(run)]) == 0
    assert "could not be drawn: OSError: [Errno 28] No space left on device" in capsys.readouterr().err
    text = (run / "REPORT.md").read_text()
    assert "| reference |" in text and "Plots not drawn: a plot could not be drawn" in text


def _offline_run(tmp_path, run_id):
    from aka.problem import REPO_ROOT
    fix = REPO_ROOT / "tests" / "fixtures" / "agent"
    return main(["optimize", f"op={fix / 'rms_norm_small'}", "shape=a", "device=cpu", "model=offline",
                 f"kernels_dir={fix / 'kernels'}", f"runs_dir={tmp_path}", f"run_id={run_id}", "live=off", "iters=1",
                 "eval.draws=3"])


def test_optimize_without_matplotlib_says_the_progress_plot_is_missing(tmp_path, monkeypatch, capsys):
    no_matplotlib(monkeypatch)
    assert _offline_run(tmp_path, "noplot") == 0
    out = capsys.readouterr().out
    assert "progress plot not drawn: matplotlib cannot be imported" in out
    report = (tmp_path / "noplot" / "report.md").read_text()
    assert "progress plot not drawn: matplotlib cannot be imported" in report
    assert not (tmp_path / "noplot" / "progress.png").exists()


def test_optimize_draws_the_progress_plot(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    assert _offline_run(tmp_path, "plot") == 0
    assert "not drawn" not in capsys.readouterr().out
    run = tmp_path / "plot"
    assert "![progress](progress.png)" in (run / "report.md").read_text()
    assert (run / "progress.png").read_bytes()[:4] == b"\x89PNG"
