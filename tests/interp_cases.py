"""Kernel cases under the Triton interpreter, in a fresh process: `TRITON_INTERPRET` has to be
set before triton is imported, and this process has imported it already. `script` gets the
kernel's path and the JSON case list as argv[1:] and prints one JSON line a case with an "ok"
verdict; every case must be printed and every one must pass."""
import json
import os
import subprocess
import sys

from aka.problem import REPO_ROOT


def assert_cases_pass(script: str, kernel, cases: list, timeout: int = 600) -> list[dict]:
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(REPO_ROOT))
    out = subprocess.run([sys.executable, "-c", script, str(kernel), json.dumps(cases)], cwd=REPO_ROOT,
                         env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == len(cases)
    bad = [r for r in rows if not r["ok"]]
    assert not bad, bad
    return rows
