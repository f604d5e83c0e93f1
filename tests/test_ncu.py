import os
import shutil
import signal
import stat
import time
from pathlib import Path

import pytest

from aka.evaluate import ncu

FIXTURE = Path(__file__).parent / "fixtures" / "ncu" / "synthetic_raw.csv"
# Real output: NVIDIA H200, ncu 2025.3.1, `ncu --csv --page raw --clock-control none --metrics
# <6 metrics> -k regex:aka_probe --launch-count 2` over a one-row-per-program Triton RMSNorm of a
# 4096x4096 bf16 tensor (x read: 33,554,432 B), recorded 2026-11-30 by the helper that wrote ncu.py.
REAL = Path(__file__).parent / "fixtures" / "ncu" / "h200_probe_raw.csv"


def launches():
    return ncu.parse_raw_csv(FIXTURE.read_text())


def test_parse_skips_noise_and_reads_every_launch():
    ls = launches()
    assert [l["id"] for l in ls] == [0, 1, 2]
    assert [l["kernel"] for l in ls] == ["rms_norm_kernel", "rms_norm_kernel", "_reduce_partials"]
    assert ls[0]["info"]["Block Size"] == "(128, 1, 1)"
    assert set(ls[0]["metrics"]) == set(ncu.FOCUSED_METRICS)


def test_parse_normalises_units():
    m0 = launches()[0]["metrics"]
    u0 = launches()[0]["units"]
    assert m0[ncu.DRAM_READ] == pytest.approx(33.57e6)  # Mbyte -> byte (SI)
    assert u0[ncu.DRAM_READ] == "byte"
    assert m0[ncu.DURATION] == pytest.approx(20_480.0)  # usecond -> nsecond
    assert u0[ncu.DURATION] == "nsecond"
    assert m0[ncu.DRAM_PCT] == pytest.approx(82.5)
    assert u0[ncu.DRAM_PCT] == "%"


def test_parse_thousands_separators_and_na():
    l1, l2 = launches()[1:]
    assert l1["metrics"][ncu.GRID] == 4096.0
    assert l1["metrics"][ncu.LOCAL_LD] is None
    assert l2["metrics"][ncu.L2_HIT] is None
    assert l2["metrics"][ncu.LOCAL_ST] == pytest.approx(1_024_000.0)  # "1,024" Kbyte
    assert l2["metrics"][ncu.BLOCK] == 1024.0


def test_parse_handles_base_units_and_no_header():
    text = ('"ID","Process ID","Kernel Name","gpu__time_duration.sum","dram__bytes_read.sum"\n'
            '"","","","ns","byte"\n'
            '"0","9","k","1,500","2,000,000"\n')
    (only,) = ncu.parse_raw_csv(text)
    assert only["metrics"] == {ncu.DURATION: 1500.0, ncu.DRAM_READ: 2e6}
    assert ncu.parse_raw_csv("==PROF== nothing profiled\n") == []


def test_parse_real_h200_recording():
    all_cols = ncu.parse_raw_csv(REAL.read_text())
    assert [l["kernel"] for l in all_cols] == ["aka_probe_kernel"] * 2
    assert len(all_cols[0]["metrics"]) == 275  # the raw page carries every attribute
    wanted = [ncu.DURATION, ncu.DRAM_READ, ncu.DRAM_WRITE, ncu.LOCAL_LD, ncu.L2_HIT, ncu.GRID]
    ls = ncu.parse_raw_csv(REAL.read_text(), metrics=wanted + ["not__a_metric.sum"])
    first = ls[0]
    assert set(first["metrics"]) == set(wanted)
    assert first["units"][ncu.DURATION] == "nsecond"  # printed as "ns"
    assert first["metrics"][ncu.DURATION] == 16_032.0
    assert first["metrics"][ncu.DRAM_READ] == 33_562_624.0
    assert first["metrics"][ncu.GRID] == 4096.0
    assert first["metrics"][ncu.L2_HIT] == pytest.approx(51.25)
    assert first["info"]["CC"] == "9.0" and first["info"]["Block Size"] == "(128, 1, 1)"
    s = ncu.summarize_ncu(ls, min_bytes=2 * 4096 * 4096 * 2 * 2)
    assert s["kernels"] == {"aka_probe_kernel": 2}
    assert s["spill_bytes"] == 0.0
    assert s["dram_read_bytes"] == 33_562_624.0 + 33_562_880.0
    # x is read once from DRAM per launch (cold L2): reads / x bytes ~ 1
    assert s["dram_read_bytes"] / 2 / (4096 * 4096 * 2) == pytest.approx(1.0, abs=0.01)


def test_summarize_totals():
    min_bytes = 2 * 33.55e6
    s = ncu.summarize_ncu(launches(), min_bytes=min_bytes)
    assert s["launches"] == 3
    assert s["kernels"] == {"rms_norm_kernel": 2, "_reduce_partials": 1}
    assert s["duration_us"] == pytest.approx(20.48 + 20.64 + 2.50)
    read = (33.57 + 33.58 + 0.01) * 1e6
    write = (33.55 + 33.55 + 0.0) * 1e6
    assert s["dram_read_bytes"] == pytest.approx(read)
    assert s["dram_write_bytes"] == pytest.approx(write)
    assert s["bytes_over_min"] == pytest.approx((read + write) / min_bytes)
    durs = [20480.0, 20640.0, 2500.0]
    assert s["dram_pct"] == pytest.approx((82.5 * durs[0] + 81.9 * durs[1] + 1.2 * durs[2]) / sum(durs))
    # L2 hit is n/a on the last launch: weighted over the two that have it
    assert s["l2_hit_pct"] == pytest.approx((3.2 * durs[0] + 3.4 * durs[1]) / (durs[0] + durs[1]))
    assert s["registers_per_thread"] == 255
    assert s["spill_bytes"] == pytest.approx(1_500.0 + 1_024_000.0)


def test_summarize_without_min_bytes_or_launches():
    assert ncu.summarize_ncu(launches(), None)["bytes_over_min"] is None
    empty = ncu.summarize_ncu([], 100.0)
    assert empty["launches"] == 0 and empty["duration_us"] is None and empty["kernels"] == {}


def test_ncu_command_shape():
    cmd = ncu.ncu_command(["python3", "w.py", "--x"], ["rms_norm_kernel", "a.b"],
                          launch_skip=3, launch_count=5)
    assert cmd[0] == "ncu"
    assert cmd[-3:] == ["python3", "w.py", "--x"]
    assert cmd[cmd.index("--page") + 1] == "raw"
    assert cmd[cmd.index("--clock-control") + 1] == "none"
    assert cmd[cmd.index("--metrics") + 1].split(",") == list(ncu.FOCUSED_METRICS)
    assert cmd[cmd.index("-k") + 1] == r"regex:^(?:rms_norm_kernel|a\.b)$"
    assert cmd[cmd.index("--launch-skip") + 1] == "3"
    assert cmd[cmd.index("--launch-count") + 1] == "5"
    assert "--launch-count" not in ncu.ncu_command(["p"], ["k"])


def _fake_ncu(tmp_path: Path, body: str) -> dict:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "ncu"
    script.write_text("#!/bin/sh\n" + body + "\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"}


def test_run_ncu_parses_fake_profiler_output(tmp_path):
    env = _fake_ncu(tmp_path, f'cat "{FIXTURE}"')
    r = ncu.run_ncu(["python3", "w.py"], ["rms_norm_kernel"], timeout_s=20, env=env,
                    min_bytes=1e6)
    assert r["available"] is True and r["returncode"] == 0
    assert r["kernels"]["rms_norm_kernel"] == 2
    assert len(r["per_launch"]) == 3
    assert r["command"][0].endswith("ncu")


def test_run_ncu_reports_counter_permission(tmp_path):
    env = _fake_ncu(tmp_path, 'echo "==ERROR== ERR_NVGPUCTRPERM - The user does not have '
                              'permission to access NVIDIA GPU Performance Counters" >&2; exit 1')
    r = ncu.run_ncu(["python3", "w.py"], ["k"], timeout_s=20, env=env)
    assert r["available"] is False
    assert "ERR_NVGPUCTRPERM" in r["reason"]


def test_run_ncu_without_ncu(monkeypatch):
    monkeypatch.setattr(ncu, "find_ncu", lambda path_env=None: None)
    r = ncu.run_ncu(["python3", "w.py"], ["k"], timeout_s=5, env={})
    assert r == {"available": False, "reason": "ncu not found on PATH"}


def test_run_ncu_kills_process_group_on_timeout(tmp_path):
    pidfile = tmp_path / "child.pid"
    env = _fake_ncu(tmp_path, f'sleep 30 & echo $! > "{pidfile}"; wait')
    t0 = time.monotonic()
    r = ncu.run_ncu(["python3", "w.py"], ["k"], timeout_s=0.5, env=env)
    assert time.monotonic() - t0 < 10
    assert r["available"] is True and "timed out" in r["error"]
    child = int(pidfile.read_text())
    stat_file = Path(f"/proc/{child}/stat")
    deadline = time.monotonic() + 5
    while stat_file.exists() and stat_file.read_text().split()[2] != "Z" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not stat_file.exists() or stat_file.read_text().split()[2] == "Z"


def test_run_ncu_no_matching_launch(tmp_path):
    env = _fake_ncu(tmp_path, 'echo "==PROF== Disconnected"; echo "==WARNING== No kernels were profiled."')
    r = ncu.run_ncu(["python3", "w.py"], ["k"], timeout_s=20, env=env)
    assert r["available"] is True and "no kernel launch" in r["error"]


def test_run_ncu_marker_in_program_output_is_not_fatal(tmp_path):
    env = _fake_ncu(tmp_path, f'echo "Failed to initialize the tokenizer cache"; cat "{FIXTURE}"')
    r = ncu.run_ncu(["python3", "w.py"], ["rms_norm_kernel"], timeout_s=20, env=env)
    assert r["available"] is True and r["launches"] == 3


def test_run_ncu_returns_when_an_escaped_child_holds_the_pipes(tmp_path, monkeypatch):
    if shutil.which("setsid") is None:
        pytest.skip("needs setsid")
    monkeypatch.setattr(ncu, "_DRAIN_S", 0.3)
    pidfile = tmp_path / "escaped.pid"
    env = _fake_ncu(tmp_path, f'setsid sleep 30 & echo $! > "{pidfile}"; sleep 30')
    t0 = time.monotonic()
    try:
        r = ncu.run_ncu(["python3", "w.py"], ["k"], timeout_s=0.3, env=env)
        assert time.monotonic() - t0 < 5
        assert "timed out" in r["error"]
    finally:
        if pidfile.exists():
            try:
                os.kill(int(pidfile.read_text()), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass


def _stall_csv(rows):
    """ncu's raw page with the duration, issue-active and the stall metrics: one launch per row of
    (duration ns, issue active %, {reason: value})."""
    cols = [ncu.DURATION, ncu.ISSUE_ACTIVE] + [ncu.stall_metric(r) for r in ncu.STALL_REASONS]
    head = '"ID","Process ID","Kernel Name",' + ",".join(f'"{c}"' for c in cols)
    units = '"","","","nsecond","%",' + ",".join('"inst"' for _ in ncu.STALL_REASONS)
    lines = [head, units]
    for i, (dur, act, st) in enumerate(rows):
        vals = [f"{dur:,}", str(act)] + [str(st.get(r, 0.0)) for r in ncu.STALL_REASONS]
        lines.append(f'"{i}","7","k",' + ",".join(f'"{v}"' for v in vals))
    return "\n".join(lines) + "\n"


def test_stall_reasons_are_summarised_duration_weighted_and_largest_first():
    """--ncu-stalls: per reason, the stalled warps per issued instruction, weighted by each launch's
    duration (a short helper launch counts little), sorted; the line names the top reasons."""
    text = _stall_csv([(3000, 30.0, {"long_scoreboard": 9.0, "wait": 1.0, "barrier": 0.5}),
                       (1000, 70.0, {"long_scoreboard": 1.0, "wait": 5.0, "math_pipe_throttle": 2.0})])
    launches = ncu.parse_raw_csv(text, ncu.FOCUSED_METRICS + ncu.STALL_METRICS)
    s = ncu.summarize_ncu(launches, None)
    assert s["issue_active_pct"] == pytest.approx(40.0)                # (30 x 3 + 70 x 1) / 4
    assert s["stalls"]["long_scoreboard"] == pytest.approx(7.0)        # (9 x 3 + 1) / 4
    assert s["stalls"]["wait"] == pytest.approx(2.0)
    assert list(s["stalls"])[:4] == ["long_scoreboard", "wait", "math_pipe_throttle", "barrier"]   # 0.5 > 0.375
    assert ncu.stall_line(s, top=2) == ("long_scoreboard 7.0, wait 2.0 warps stalled per issued instruction; "
                                        "issue active 40%")
    without = ncu.parse_raw_csv(FIXTURE.read_text())      # the focused metrics only
    plain = ncu.summarize_ncu(without, None)
    assert "stalls" not in plain and ncu.stall_line(plain) is None and without


def test_the_stall_metrics_reach_ncu_only_when_asked(tmp_path, monkeypatch):
    """aka eval --ncu-stalls adds the warp-state metrics to the profiler's list; --ncu alone does not
    (every metric group is another replay pass over the kernel)."""
    import aka.evaluate.ncu_run as ncu_run
    from aka.cli import build_parser
    seen = []
    monkeypatch.setattr(ncu_run, "run_ncu", lambda argv, kernels, timeout_s, **kw: seen.append(kw["metrics"]) or
                        {"available": True, "error": "stub"})
    monkeypatch.setenv("AKA_CACHE_DIR", str(tmp_path / "cache"))
    from aka.evaluate.api import EvalConfig, build_spec
    from aka.problem import load_problem
    prob = load_problem(Path(__file__).parent / "fixtures" / "problems" / "vec_add")
    spec, _ = build_spec(prob, prob.select("0"), "cpu", EvalConfig(device="cpu", seed=3), kernels=("add_kernel",))
    for stalls in (False, True):
        ncu_run.profile_shape(spec, "x = 1\n", "0", 1, None, timeout_s=30, stalls=stalls)
    assert set(ncu.STALL_METRICS).isdisjoint(seen[0]) and set(ncu.STALL_METRICS) <= set(seen[1])
    a = build_parser().parse_args(["eval", "vec_add", "c.py", "--ncu-stalls"])
    assert a.ncu_stalls and not a.ncu                               # the evaluation runs the ncu pass for it


def test_the_report_prints_the_profile_and_its_stalls():
    import io

    from rich.console import Console

    from aka.evaluate.report import render
    from aka.evaluate.result import EvalResult, ShapeResult
    prof = {"available": True, "dram_pct": 81.4, "sm_pct": 22.0, "occupancy_pct": 47.9, "bytes_over_min": 1.04,
            "registers_per_thread": 128, "spill_bytes": 0, "issue_active_pct": 21.0,
            "stalls": {"long_scoreboard": 11.25, "wait": 1.5}}
    res = EvalResult(status="pass", problem="vec_add", device="cuda",
                     shapes=[ShapeResult(id="3", label="n=1", correct=True, ncu=prof)])
    buf = io.StringIO()
    render(res, Console(file=buf, width=300))
    line = next(ln for ln in buf.getvalue().splitlines() if "Nsight Compute" in ln)
    assert line.strip() == ("shape 3, Nsight Compute: DRAM 81%, SM 22%, occupancy 48%; DRAM bytes 1.04x the minimum; "
                            "128 registers, 0 B spilled; long_scoreboard 11.2, wait 1.5 warps stalled per issued "
                            "instruction; issue active 21%")
