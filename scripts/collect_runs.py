"""Put a device call's benchmark, knowledge-base, sweep and agent results where the repo keeps them.

    mkdir -p /tmp/gpu && tar xzf <files_at>/results.tgz -C /tmp/gpu
    python scripts/collect_runs.py /tmp/gpu [--reweigh]

Whatever of these the call produced (scripts/gpu_run.sh modes) is collected (results/README.md
is the index of that tree):
  bench/   -> results/h200/bench/baselines/ (records, run.json, provenance, log), then
              `aka bench report --weights bench/weights.json` there; --reweigh also runs
              `aka bench weigh --times` on it into results/h200/bench/weights_measured.json
  kb/      -> results/kb/kernels/*/*.results.json (`aka kb verify`'s verdicts), the call's log
              appended to results/h200/kb/kb_verify.log, then
              `aka kb best --gpu H200 --out knowledge_base/KERNELS_H200.md` (the table stays beside the kernels)
  sweep/   -> results/h200/agent/sweep/ (tables, JSON, per-op optimize logs and runs)
  agent1/  -> results/h200/agent/optimize-rms_norm-4096/
  cache/   -> .gpucache/ (calibration and baselines, to carry into the next call)
harness/ is collect_gpu.py's. Nothing here measures: it moves files and runs the repo's commands.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def aka(repo: Path, *args: str) -> int:
    print("+ aka", " ".join(args))
    rc = subprocess.run([sys.executable, "-m", "aka.cli", *args], cwd=repo).returncode
    if rc:
        print(f"  (exit {rc})")
    return rc


def replace_dir(src: Path, dest: Path) -> None:
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(src, dest)
    print(f"{src} -> {dest}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("src", help="the unpacked results.tgz")
    ap.add_argument("--reweigh", action="store_true", help="weights from the measured times -> results/h200/bench/weights_measured.json")
    ap.add_argument("--repo", default=str(REPO), help="where the results go (default: this checkout)")
    a = ap.parse_args()
    repo = Path(a.repo).resolve()
    src = Path(a.src)
    if (src / "bench" / "run" / "records.jsonl").exists():
        dest = repo / "results" / "h200" / "bench" / "baselines"
        # a resumed run spans several calls: keep each call's log and provenance (segment N is
        # run.json's Nth segment), which replacing the run directory would drop
        kept = {f.name: f.read_bytes() for f in dest.glob("*_segment*.*")} if dest.is_dir() else {}
        replace_dir(src / "bench" / "run", dest)
        for name, data in kept.items():
            (dest / name).write_bytes(data)
        run = json.loads((dest / "run.json").read_text()) if (dest / "run.json").exists() else {}
        n = max(1, len(run.get("segments", [])))
        for name, out in (("provenance.txt", f"provenance_segment{n}.txt"), ("bench.log", f"bench_segment{n}.log")):
            if (src / "bench" / name).exists():
                shutil.copy(src / "bench" / name, dest / out)
        if (src / "steps.txt").exists():
            shutil.copy(src / "steps.txt", dest / f"steps_segment{n}.txt")
        aka(repo, "bench", "report", str(dest), "--weights", "bench/weights.json")
        if a.reweigh:
            aka(repo, "bench", "weigh", "--workload", "bench/workloads/serving_mix.yaml", "--times",
                "results/h200/bench/baselines", "--out", "results/h200/bench/weights_measured.json")
    kb = src / "kb" / "results_json.tgz"
    if kb.exists():
        with tarfile.open(kb) as t:
            members = [m for m in t.getmembers() if m.isfile() and m.name.startswith("results/kb/kernels/")
                       and m.name.endswith(".results.json") and ".." not in m.name]
            t.extractall(repo, members=members, filter="data")
        print(f"{len(members)} knowledge-base results files updated")
        if (src / "kb" / "kb_verify.log").exists():
            # one section per device call, appended: a kernel's current result may come from an
            # earlier call than this one, and its log line must stay
            prov = src / "kb" / "provenance.txt"
            log = repo / "results" / "h200" / "kb" / "kb_verify.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            with open(log, "a") as f:
                f.write("\n## device call\n" + (prov.read_text() if prov.exists() else "")
                        + (src / "kb" / "kb_verify.log").read_text())
        aka(repo, "kb", "best", "--gpu", "H200", "--out", "knowledge_base/KERNELS_H200.md")
    if (src / "sweep" / "sweep").is_dir():
        dest = repo / "results" / "h200" / "agent" / "sweep"
        replace_dir(src / "sweep" / "sweep", dest)
        for name in ("provenance.txt", "sweep.log"):
            if (src / "sweep" / name).exists():
                shutil.copy(src / "sweep" / name, dest / name)
    run = src / "agent1" / "runs" / "rms_norm-4096"
    if run.is_dir():
        dest = repo / "results" / "h200" / "agent" / "optimize-rms_norm-4096"
        replace_dir(run, dest)
        for name in ("provenance.txt", "optimize.log"):
            if (src / "agent1" / name).exists():
                shutil.copy(src / "agent1" / name, dest / name)
    if (src / "cache").is_dir():
        replace_dir(src / "cache", repo / ".gpucache")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
