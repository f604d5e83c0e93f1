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
    assert (repo / "experiments/results/h200/sweep/offline_sweep.md").read_text() == "| op |\n"
    assert (repo / "experiments/results/h200/sweep/provenance.txt").exists()
    assert (repo / "experiments/results/h200/optimize-rms_norm-4096/best.json").exists()
    assert (repo / ".gpucache/baselines/rms_norm-9-x.json").exists()
