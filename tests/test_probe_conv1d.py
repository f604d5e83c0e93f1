"""scripts/probe_conv1d.py under the Triton interpreter: the variants that compute the op (base,
prefetch) match the reference and the copy variant copies, on small shapes with odd lengths; the
timed-only variants run. (Its timings need a GPU; here they are NaN.)"""
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_probe_variants_check_against_the_reference_on_cpu(tmp_path):
    env = dict(os.environ, TRITON_INTERPRET="1")
    r = subprocess.run([sys.executable, "scripts/probe_conv1d.py", str(tmp_path), "--shapes", "s0,s2", "--device", "cpu"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = json.loads((tmp_path / "conv1d_probe.json").read_text())["rows"]
    got = {(row["shape"], row["variant"]): row["correct"] for row in rows}
    assert set(got) == {(s, v) for s in ("s0", "s2") for v in ("copy", "base", "nosilu", "aligned", "prefetch")}
    for s in ("s0", "s2"):
        assert got[(s, "base")] is True and got[(s, "prefetch")] is True and got[(s, "copy")] is True
        assert got[(s, "nosilu")] is None and got[(s, "aligned")] is None   # not the op: timed only
