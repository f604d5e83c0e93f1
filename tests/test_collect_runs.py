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


def test_kbverify_merge_adds_one_shape_verdicts_but_never_replaces_a_current_all_shape_result(tmp_path):
    import json

    def record(spec, date, time_us):
        return {"status": "pass", "reason": "all stages passed", "shapes_spec": spec, "date": date, "git_sha": "abc",
                "shapes": [{"id": "0", "label": "n=1", "time_us": time_us, "speedup_eager": 2.0, "speedup_compile": 1.1}]}

    def write(root, op, name, cuda):
        p = root / "results/kb/kernels" / op / f"{name}.results.json"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps({"kernel": f"kernels/{op}/{name}", "op": op, "devices": {"cuda": cuda}}))
    new, into = tmp_path / "call", tmp_path / "repo" / "results" / "kb"
    write(new, "rms_norm", "rowwise", record("first", "2026-12-03T16:00:00", 1.5))
    write(new, "rms_norm", "chunked", record("first", "2026-12-03T16:01:00", 2.5))
    write(new, "softmax", "old", record("first", "2026-11-01T00:00:00", 9.0))   # before --since: not a verdict of this run
    write(tmp_path / "repo", "rms_norm", "rowwise", record("all", "2026-11-30T00:00:00", 1.0))
    write(tmp_path / "repo", "rms_norm", "chunked", record("first", "2026-12-02T00:00:00", 3.0))
    # an all-shape verdict of an older source (stale, which `aka kb best` ignores) gives way to the new one
    write(new, "softmax", "split", dict(record("all", "2026-12-03T16:02:00", 4.0), source_hash="new"))
    write(tmp_path / "repo", "softmax", "split", dict(record("all", "2026-11-30T00:00:00", 5.0), source_hash="old"))
    out = tmp_path / "kbverify.tsv"
    done = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "collect_kbverify.py"), f"c1={new}", "--since",
                           "2026-12-03", "--out", str(out), "--merge", "--into", str(into)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    rows = out.read_text().splitlines()
    assert rows[0].split("\t")[:4] == ["kernel", "call", "source", "status"]
    assert sorted(r.split("\t")[0] for r in rows[1:]) == ["rms_norm/chunked", "rms_norm/rowwise", "softmax/split"]
    kept = json.loads((into / "kernels/rms_norm/rowwise.results.json").read_text())["devices"]["cuda"]
    assert kept["shapes_spec"] == "all" and kept["shapes"][0]["time_us"] == 1.0   # the all-shape result stays
    merged = json.loads((into / "kernels/rms_norm/chunked.results.json").read_text())["devices"]["cuda"]
    assert merged["date"].startswith("2026-12-03") and merged["shapes"][0]["time_us"] == 2.5
    fresh = json.loads((into / "kernels/softmax/split.results.json").read_text())["devices"]["cuda"]
    assert fresh["source_hash"] == "new" and fresh["shapes"][0]["time_us"] == 4.0


def test_kbverify_merge_keeps_each_gpu_models_verdict_beside_the_primary(tmp_path):
    """An H100 verdict of a kernel whose primary verdict is a current H200 one does not replace it,
    and is not lost either: it goes into the record's "gpus", which `aka kb best --gpu H100` and a
    verify on an H100 read (aka.kb.verify.cuda_entry)."""
    import json

    from aka.kb.verify import cuda_entry, device_entry

    def record(gpu, date, time_us):
        return {"status": "pass", "reason": "all stages passed", "shapes_spec": "all", "date": date, "gpu": gpu,
                "source_hash": "same", "shapes": [{"id": "0", "label": "n=1", "time_us": time_us}]}
    h200 = record("NVIDIA H200", "2026-12-05T02:00:00", 80.0)
    h100 = record("NVIDIA H100 80GB HBM3", "2026-12-06T06:29:00", 100.0)
    new, into = tmp_path / "call", tmp_path / "repo" / "results" / "kb"
    for root, rec in ((new, h100), (tmp_path / "repo", h200)):
        p = root / "results/kb/kernels/mla_decode_attention/split_dispatch.results.json"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps({"kernel": "kernels/mla_decode_attention/split_dispatch", "op": "mla_decode_attention",
                                 "devices": {"cuda": rec}}))
    done = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "collect_kbverify.py"), f"c4={new}", "--out",
                           str(tmp_path / "t.tsv"), "--merge", "--into", str(into)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    data = json.loads((into / "kernels/mla_decode_attention/split_dispatch.results.json").read_text())
    assert data["devices"]["cuda"] == h200                                  # the primary stays the H200's
    assert cuda_entry(data) == h200 and cuda_entry(data, "H200") == h200
    assert cuda_entry(data, "h100") == h100 and cuda_entry(data, "NVIDIA H100 80GB HBM3") == h100
    assert cuda_entry(data, "B200") == {} and device_entry(data, "cuda") == h200
    # an older H100 verdict brought back later does not replace the newer one
    older = dict(h100, date="2026-12-05T15:00:00", shapes=[{"id": "0", "time_us": 120.0}])
    (new / "results/kb/kernels/mla_decode_attention/split_dispatch.results.json").write_text(
        json.dumps({"devices": {"cuda": older}}))
    subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "collect_kbverify.py"), f"c5={new}", "--out",
                    str(tmp_path / "t2.tsv"), "--merge", "--into", str(into)], check=True, capture_output=True,
                   timeout=60)
    data = json.loads((into / "kernels/mla_decode_attention/split_dispatch.results.json").read_text())
    assert data["gpus"]["NVIDIA H100 80GB HBM3"]["shapes"][0]["time_us"] == 100.0


def test_collect_kbverify_run_per_call_keeps_the_earlier_calls_rows(tmp_path):
    """Run once per device call with one --out, the table holds every call's kernels (it held only
    the last call's: results/h100/device-2026-12-06g); a kernel a later call measured again takes
    that call's row."""
    import json

    def call(label, kernels):
        d = tmp_path / label
        for k, t in kernels.items():
            p = d / f"results/kb/kernels/{k}.results.json"
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(json.dumps({"devices": {"cuda": {"status": "pass", "date": "2026-12-06T17:00:00",
                                                          "git_sha": label, "shapes": [{"label": "s", "time_us": t}]}}}))
        out = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "collect_kbverify.py"), f"{label}={d}",
                              "--out", str(tmp_path / "k.tsv")], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return out.stdout
    call("c1", {"softmax/a": 1.0, "rms_norm/b": 2.0})
    said = call("c2", {"softmax/a": 3.0, "l2_norm/c": 4.0})
    rows = {ln.split("\t")[0]: ln.split("\t") for ln in (tmp_path / "k.tsv").read_text().splitlines()[1:]}
    assert set(rows) == {"softmax/a", "rms_norm/b", "l2_norm/c"} and "beside 1 rows of earlier runs" in said
    assert rows["softmax/a"][1] == "c2" and rows["softmax/a"][5] == "3.00" and rows["rms_norm/b"][1] == "c1"


def test_tune_variant_gains_reads_every_tuner_and_pairs_twins(tmp_path):
    """The best with a choice against the best without it per shape, and twin configs compared, from
    the MoE tuner's layout and the attention/GEMM tuners' one."""
    import json
    moe = {"provenance": {"gpu": "G"}, "shapes": [{"id": "9", "configs": [
        {"ok": True, "time_us": 100.0, "config": {"BM": 128}},
        {"ok": True, "time_us": 80.0, "config": {"BM": 128, "TMA_ACT": 1}},
        {"ok": False, "time_us": 10.0, "config": {"BM": 64, "TMA_ACT": 1}}]}]}
    attn = {"env": {"gpu": "G"}, "records": [
        {"shape": "0", "correct": True, "us": 50.0, "config": {"BN": 64}},
        {"shape": "0", "correct": True, "us": 100.0, "config": {"BN": 64, "FUSED": 1}},
        {"shape": "0", "correct": True, "us": 40.0, "config": {"BN": 32, "FUSED": 1}}]}   # no twin: not paired
    (tmp_path / "m.json").write_text(json.dumps(moe))
    (tmp_path / "a.json").write_text(json.dumps(attn))
    script = str(REPO_ROOT / "scripts" / "tune_variant_gains.py")
    out = subprocess.run([sys.executable, script, str(tmp_path / "m.json"), "--keys", "TMA_ACT,GATHER_X"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    assert "| 9 | 100.0 | 80.0 | 1.250 | TMA_ACT |" in out
    out = subprocess.run([sys.executable, script, str(tmp_path / "a.json"), "--keys", "FUSED", "--pairs"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    assert "| 50.0 | 100.0 | 2.000 |" in out and "1 twin pairs; with the choice faster in 0, slower in 1" in out
