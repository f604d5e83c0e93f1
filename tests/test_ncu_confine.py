"""`aka eval --ncu` runs the candidate's code a second time, outside the judge's evaluation: that
process is confined like the runner (aka/evaluate/ncu_run.py). A stand-in for ncu runs the real
target program on a CPU problem (there is no ncu here); the candidate tries to write into the
repository through libc (past Python's audit hook) and into the baseline cache through open()."""
from __future__ import annotations

import os
import stat
import sys
import uuid
from pathlib import Path

import pytest

from aka.evaluate.api import EvalConfig, build_spec
from aka.evaluate.ncu_run import profile_shape
from aka.problem import REPO_ROOT, load_problem

HERE = Path(__file__).resolve().parent
PROBLEM = HERE / "fixtures" / "problems" / "vec_add"
HONEST = HERE / "fixtures" / "candidates" / "honest" / "vec_add.py"
CSV = HERE / "fixtures" / "ncu" / "synthetic_raw.csv"

FAKE_NCU = f"""#!{sys.executable}
# Stands in for Nsight Compute: runs the profiled command (everything from the first of these
# programs on), then prints a recorded CSV as ncu would.
import subprocess, sys
starts = ("unshare", "setpriv", {sys.executable!r})
i = next(n for n, a in enumerate(sys.argv) if n and a in starts)
rc = subprocess.run(sys.argv[i:]).returncode
sys.stdout.write(open({str(CSV)!r}).read())
sys.exit(rc)
"""


def _fake_ncu(tmp_path: Path, monkeypatch) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "ncu"
    script.write_text(FAKE_NCU)
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")


def _profile(source: str):
    prob = load_problem(PROBLEM)
    selected = prob.select("0")
    spec, _ = build_spec(prob, selected, "cpu", EvalConfig(device="cpu", seed=3), kernels=("add_kernel",))
    return profile_shape(spec, source, selected[0].id, 1, None, timeout_s=300)


def test_an_honest_candidate_is_profiled(tmp_path, monkeypatch):
    monkeypatch.setenv("AKA_CACHE_DIR", str(tmp_path / "cache"))
    _fake_ncu(tmp_path, monkeypatch)
    r = _profile(HONEST.read_text())
    assert "error" not in r and r["available"] and r["returncode"] == 0   # the target ran and exited cleanly
    assert r["launches"] == 1 and r["launches_profiled_total"] == 3   # the last forward's launch is kept
    assert r["confinement"]["network"] == "shared" or os.geteuid() != 0


@pytest.mark.skipif(os.geteuid() != 0, reason="confinement needs root (unshare, setpriv)")
def test_the_profiled_candidate_cannot_write_outside(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    (cache / "baselines").mkdir(parents=True)
    monkeypatch.setenv("AKA_CACHE_DIR", str(cache))
    _fake_ncu(tmp_path, monkeypatch)
    in_repo = REPO_ROOT / f".aka-escape-{uuid.uuid4().hex[:8]}"
    poison = cache / "baselines" / "poison.json"
    src = (f"import ctypes\n"
           f"_fd = ctypes.CDLL(None).open({str(in_repo).encode()!r}, 0o101, 0o644)\n"   # O_WRONLY|O_CREAT
           f"try:\n    open({str(poison)!r}, 'w').write('{{}}')\n"
           f"except OSError:\n    pass\n" + HONEST.read_text())
    try:
        r = _profile(src)
        assert not in_repo.exists(), "libc open() past the audit hook reached the repository"
        assert not poison.exists(), "the baseline cache was writable"
        assert r["confinement"]["filesystem"] == "read-only but its own directory"
        assert "write to" in r["error"] and any(str(poison) in w for w in r["refused"])
        assert "launches" not in r   # no metrics from a run that was refused
    finally:
        in_repo.unlink(missing_ok=True)
        poison.unlink(missing_ok=True)


@pytest.mark.gpu
def test_on_a_gpu_ncu_profiles_the_confined_target():
    """The real profiler, on the device: the confined target (no capabilities, read-only mounts,
    the host's network for ncu's sockets) still gives counters for the candidate's kernel."""
    from aka.evaluate.api import cuda_available, evaluate
    from aka.evaluate.ncu import find_ncu
    if not cuda_available() or find_ncu() is None:
        pytest.skip("needs a CUDA GPU and Nsight Compute")
    cfg = EvalConfig(device="cuda", baselines=False, peer=False, ncu=True, ncu_shape="5")
    res = evaluate("rms_norm", REPO_ROOT / "knowledge_base" / "kernels" / "rms_norm" / "rowwise.py",
                   shapes="5", config=cfg)
    assert res.status == "pass", res.reason
    (s,) = res.shapes
    assert s.ncu and s.ncu.get("available") and not s.ncu.get("error"), s.ncu
    assert s.ncu["launches"] >= 1 and s.ncu.get("dram_read_bytes"), s.ncu
    assert s.ncu["confinement"].get("filesystem") in ("read-only but its own directory", "shared"), s.ncu


def test_a_refusal_under_the_profiler_rejects_the_evaluation(monkeypatch):
    """The profile runs the same source again; if that run tries what the sandbox refuses (a
    candidate that behaves only when no profiler is attached, say), the verdict is `rejected`."""
    import aka.evaluate.ncu_run as ncu_run
    from aka.evaluate.api import _attach_ncu
    from aka.evaluate.result import EvalResult, ShapeResult
    monkeypatch.setattr(ncu_run, "profile_shape", lambda *a, **k: {
        "available": True, "refused": ["write to /x"], "error": "the profiled candidate did what the sandbox "
                                                                 "refuses: write to /x"})
    res = EvalResult(status="pass", problem="vec_add", device="cuda",
                     shapes=[ShapeResult(id="0", label="n=1", correct=True, bytes=10)])
    _attach_ncu(res, None, "", EvalConfig())
    assert res.status == "rejected" and "write to /x" in res.reason


def test_the_gpu_target_resolves_tritons_driver_before_the_hook_is_armed(tmp_path, monkeypatch):
    """Found on an H100 (2026-12-05): under ncu, Triton's first launch ran /sbin/ldconfig (its
    libcuda lookup) after the audit hook was armed, so every profile of an honest kernel came back
    `rejected`. The target resolves the driver first, as the runner does."""
    import aka.evaluate.ncu_target as target
    prob = load_problem(PROBLEM)
    spec, _ = build_spec(prob, prob.select("0"), "cuda", EvalConfig(device="cuda", seed=3), kernels=("add_kernel",))
    path = tmp_path / "spec.json"
    path.write_text(spec.dumps())
    order = []

    class Stop(Exception):
        pass

    def audit(*a, **k):
        order.append("install_audit")
        raise Stop

    monkeypatch.setattr(target, "resolve_gpu_driver", lambda: order.append("resolve_gpu_driver"))
    monkeypatch.setattr(target, "install_audit", audit)
    with pytest.raises(Stop):
        target.main(["ncu_target", str(path)])
    assert order == ["resolve_gpu_driver", "install_audit"]
