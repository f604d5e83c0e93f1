"""scripts/repeat_noise.py: two verify runs' records compared shape by shape."""
from __future__ import annotations

import importlib.util
import json

from aka.problem import REPO_ROOT


def _mod():
    spec = importlib.util.spec_from_file_location("repeat_noise", REPO_ROOT / "scripts" / "repeat_noise.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _write(root, kernel, times, src="h1", gpu="G", status="pass"):
    p = root / "results" / "kb" / "kernels" / kernel.split("/")[0] / f"{kernel.split('/')[1]}.results.json"
    p.parent.mkdir(parents=True, exist_ok=True)
    shapes = [{"id": i, "time_us": t, "time_ci_us": [t * 0.999, t * 1.001], "compile_us": 2 * t,
               "compile_ci_us": [2 * t, 2 * t], "sol_us": 20.0 if i else 1.0} for i, t in enumerate(times)]
    p.write_text(json.dumps({"devices": {"cuda": {"status": status, "source_hash": src, "gpu": gpu, "shapes": shapes}}}))


def test_ratios_per_shape_only_for_kernels_both_runs_passed_with_one_source(tmp_path):
    m = _mod()
    a, b = tmp_path / "a", tmp_path / "b"
    _write(a, "op/k", [10.0, 20.0])
    _write(b, "op/k", [10.0, 21.0])          # shape 1: 5% slower, intervals apart
    _write(a, "op/other_source", [10.0])
    _write(b, "op/other_source", [30.0], src="h2")
    _write(a, "op/failed", [10.0])
    _write(b, "op/failed", [30.0], status="fail")
    rows = m.compare(m._records(a), m._records(b))
    assert set(rows) == {"op/k"}
    kt = [r for r in rows["op/k"] if r[1] == "time_us"]
    assert [round(r[2], 3) for r in kt] == [1.0, 1.05] and [r[3] for r in kt] == [False, True]
    assert [r[4] for r in kt] == [False, True]                 # only shape 1 is large
    text = m.markdown(rows, "a", "b")
    assert "| op/k | 2 | 1.025, 1.000, 1.050 |" in text and "| time, large | 1 | 5.0% |" in text
