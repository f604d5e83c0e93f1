"""scripts/kernels_side_by_side.py: one op's kernels per shape from their kb verify records, the
base kernel's time over each other's, and a refusal to put two cards' times side by side."""
import json
import subprocess
import sys

from aka.problem import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "kernels_side_by_side.py"


def _record(root, name, gpu, times, compile_us=None):
    d = root / "kernels" / "softmax"
    d.mkdir(parents=True, exist_ok=True)
    shapes = [{"id": str(i), "label": f"batch={i}", "time_us": t, "sol_fraction": 0.5 / t,
               "compile_us": compile_us[i] if compile_us else None, "eager_us": 2.0 * t}
              for i, t in enumerate(times)]
    cuda = {"gpu": gpu, "git_sha": "abc", "date": "2026-12-06T02:00:00+00:00", "shapes": shapes}
    (d / f"{name}.results.json").write_text(json.dumps({"kernel": name, "op": "softmax", "devices": {"cuda": cuda}}))


def _run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=REPO_ROOT)


def test_the_base_over_each_kernel_per_shape_and_its_geomean(tmp_path):
    _record(tmp_path, "new", "NVIDIA H100", [10.0, 20.0], compile_us=[30.0, None])
    _record(tmp_path, "old", "NVIDIA H100", [20.0, 80.0])
    out = _run("softmax", "new,old", "--records", str(tmp_path))
    assert out.returncode == 0, out.stderr
    rows = [ln for ln in out.stdout.splitlines() if ln.startswith("| batch=")]
    assert rows[0].split(" | ")[1:4] == ["10.0", "20.0", "2.00"]          # old / new per shape
    assert rows[1].split(" | ")[1:4] == ["20.0", "80.0", "4.00"]
    assert "old / new, geomean over 2 shapes: 2.83" in out.stdout          # sqrt(2 * 4)
    assert "compile / new, geomean over the 1 shapes compile was timed on: 3.00" in out.stdout


def test_two_cards_are_not_compared(tmp_path):
    _record(tmp_path, "new", "NVIDIA H100", [10.0])
    _record(tmp_path, "old", "NVIDIA H200", [20.0])
    out = _run("softmax", "new,old", "--records", str(tmp_path))
    assert out.returncode != 0 and "different GPUs" in out.stderr


def test_gpu_picks_each_records_verdict_on_that_card(tmp_path):
    """--gpu H100: a record whose primary verdict is the H200's gives its H100 verdict ("gpus")."""
    _record(tmp_path, "new", "NVIDIA H100", [10.0])
    _record(tmp_path, "old", "NVIDIA H200", [5.0])
    p = tmp_path / "kernels" / "softmax" / "old.results.json"
    rec = json.loads(p.read_text())
    rec["gpus"] = {"NVIDIA H100": dict(rec["devices"]["cuda"], gpu="NVIDIA H100",
                                       shapes=[{"id": "0", "label": "batch=0", "time_us": 30.0}])}
    p.write_text(json.dumps(rec))
    out = _run("softmax", "new,old", "--records", str(tmp_path), "--gpu", "H100")
    assert out.returncode == 0, out.stderr
    assert "softmax on NVIDIA H100" in out.stdout and "old / new, geomean over 1 shapes: 3.00" in out.stdout
    assert _run("softmax", "new,old", "--records", str(tmp_path)).returncode != 0   # primaries: two cards


def test_a_kernel_without_a_gpu_record_is_named(tmp_path):
    _record(tmp_path, "new", "NVIDIA H100", [10.0])
    d = tmp_path / "kernels" / "softmax"
    (d / "cpu_only.results.json").write_text(json.dumps({"devices": {"cpu": {}}}))
    out = _run("softmax", "new,cpu_only", "--records", str(tmp_path))
    assert out.returncode != 0 and "cpu_only.results.json: no GPU record" in out.stderr


def test_a_missing_record_is_named(tmp_path):
    _record(tmp_path, "new", "NVIDIA H100", [10.0])
    out = _run("softmax", "new,missing", "--records", str(tmp_path))
    assert out.returncode != 0 and "missing.results.json: no such record" in out.stderr


def test_the_launch_probe_times_every_launch_of_a_forward(tmp_path):
    """scripts/probe_kernel_launches.py on a CPU (the interpreter): each of tail_compact's six
    launches is timed on its own, per variant, and the JSON is written."""
    import os
    out = tmp_path / "probe.json"
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(REPO_ROOT))
    p = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "probe_kernel_launches.py"), "top_k_top_p_filter",
                        "tail_compact", "--shapes", "s2", "--set", "BINS=512", "--reps", "1", "--out", str(out)],
                       capture_output=True, text=True, cwd=REPO_ROOT, env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    rows = json.loads(out.read_text())["rows"]
    assert [r["variant"] for r in rows] == [{}, {"BINS": 512}]
    for r in rows:
        assert set(r["launch_us"]) == {"_stats", "_hist", "_select", "_compact", "_finish", "_write"}
        assert r["forward_us"] > 0
    # a shape's inputs do not depend on the shapes probed before it (seeded per shape)
    again = tmp_path / "again.json"
    p = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "probe_kernel_launches.py"), "top_k_top_p_filter",
                        "tail_compact", "--shapes", "s0,s2", "--reps", "1", "--out", str(again)],
                       capture_output=True, text=True, cwd=REPO_ROOT, env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    by_shape = {r["shape"]: r["inputs_sum"] for r in json.loads(again.read_text())["rows"]}
    assert by_shape["s2"] == rows[0]["inputs_sum"] and by_shape["s0"] != by_shape["s2"]
