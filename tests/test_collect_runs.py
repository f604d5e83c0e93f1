"""scripts/collect_runs.py moves a device call's results into the tree (smoke test, no GPU)."""
import subprocess
import sys

from aka.problem import REPO_ROOT


def test_sweep_agent_and_cache_land_where_the_repo_keeps_them(tmp_path):
    src, repo = tmp_path / "gpu", tmp_path / "repo"
    (src / "sweep" / "sweep").mkdir(parents=True)
    (src / "sweep" / "sweep" / "offline_sweep.md").write_text("| op |\n")
    (src / "sweep" / "provenance.txt").write_text("NVIDIA H200\n")
    (src / "agent1" / "runs" / "rms_norm-4096").mkdir(parents=True)
    (src / "agent1" / "runs" / "rms_norm-4096" / "best.json").write_text("{}")
    (src / "cache" / "baselines").mkdir(parents=True)
    (src / "cache" / "baselines" / "rms_norm-9-x.json").write_text("{}")
    repo.mkdir()
    done = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "collect_runs.py"), str(src), "--repo", str(repo)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert (repo / "results/h200/agent/sweep/offline_sweep.md").read_text() == "| op |\n"
    assert (repo / "results/h200/agent/sweep/provenance.txt").exists()
    assert (repo / "results/h200/agent/optimize-rms_norm-4096/best.json").exists()
    assert (repo / ".gpucache/baselines/rms_norm-9-x.json").exists()


def test_each_calls_kb_log_is_appended_not_overwritten(tmp_path):
    """A kernel's current H200 result can come from an earlier call than the last: its log line
    must survive the next call's collection."""
    import io
    import tarfile
    src, repo = tmp_path / "gpu", tmp_path / "repo"
    (src / "kb").mkdir(parents=True)
    (repo / "results" / "kb" / "kernels" / "rms_norm").mkdir(parents=True)
    for call in (1, 2):
        with tarfile.open(src / "kb" / "results_json.tgz", "w:gz") as t:
            data = b'{"kernel": "rms_norm/rowwise", "devices": {}}'
            info = tarfile.TarInfo("results/kb/kernels/rms_norm/rowwise.results.json")
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
        (src / "kb" / "kb_verify.log").write_text(f"kernels/rms_norm/rowwise.py: pass (call {call})\n")
        (src / "kb" / "provenance.txt").write_text(f"NVIDIA H200\nsource abc{call}\n")
        done = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "collect_runs.py"), str(src),
                               "--repo", str(repo)], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
    log = (repo / "results" / "h200" / "kb" / "kb_verify.log").read_text()
    assert log.count("## device call") == 2
    assert log.index("(call 1)") < log.index("source abc2") < log.index("(call 2)")
    assert (repo / "results/kb/kernels/rms_norm/rowwise.results.json").exists()
