"""The device scripts on CPU, before they cost device time: an empty part list runs nothing (call
3 of 2026-12-04 read AKA_VT_PARTS="" as unset and re-ran the default parts beside the adversarial
suite, which cut both), every harness part names a kernel file and bench shapes that exist, and
gpu_suite.sh runs and resumes (small shapes under the interpreter)."""
import json
import os
import re
import subprocess
import sys
import tarfile

from aka.problem import REPO_ROOT

VT = REPO_ROOT / "scripts" / "gpu_verify_tables.sh"
SUITE = REPO_ROOT / "scripts" / "gpu_suite.sh"


def _env(tmp_path, **kw):
    return dict(os.environ, AKA_CACHE_DIR=str(tmp_path / "cache"), OUT=str(tmp_path / "out"),
                HF_HUB_OFFLINE="1", **kw)


def _members(tgz):
    with tarfile.open(tgz) as t:
        return t.getnames()


def test_empty_part_list_runs_no_harness_part(tmp_path):
    r = subprocess.run(["bash", str(VT)], cwd=REPO_ROOT, env=_env(tmp_path, AKA_VT_TUNE_S="0", AKA_VT_PARTS=""),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    names = _members(tmp_path / "out" / "vt.tgz")
    assert "vt/steps.txt" in names and not any(n.startswith("vt/runs/") and n != "vt/runs" for n in names)
    assert not any(n.startswith("vt/c_") for n in names)        # no candidate folder: no part started


def test_every_part_names_an_existing_kernel_and_bench_shapes():
    text = VT.read_text()
    parts = re.findall(r'^\s*\[(\w+)\]="(\S+) (\S+) (\S+) (\S+)"', text, re.M)
    assert len(parts) >= 10
    for name, op, kernels, peer, shapes in parts:
        for k in kernels.split(","):
            k, _, variant = k.partition("@")      # KERNEL@KEY=VAL: an A/B copy of KERNEL
            assert (REPO_ROOT / "knowledge_base" / "kernels" / op / f"{k}.py").is_file(), (name, op, k)
            if variant:
                key = variant.partition("=")[0]
                src = (REPO_ROOT / "knowledge_base" / "kernels" / op / f"{k}.py").read_text()
                assert re.search(rf'^AKA_PARAMS = {{.*"{key}"', src, re.M), (name, k, key)
        assert peer in ("peer", "-"), name
        meta = json.loads((REPO_ROOT / "bench" / "ops" / op / "meta.json").read_text())
        assert (meta.get("peer") is not None) == (peer == "peer"), (name, "peer column disagrees with meta.json")
        if shapes != "all":
            known = set(json.loads((REPO_ROOT / "bench" / "ops" / op / "shapes.json").read_text()))
            assert set(shapes.split(",")) <= known, (name, shapes)


def test_suite_script_runs_then_resumes_from_its_cache(tmp_path):
    env = _env(tmp_path, AKA_SUITE_OPS="rms_norm,awq_w4a16_gemm", AKA_SUITE_SHAPES="small")
    first = subprocess.run(["bash", str(SUITE)], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-2000:]
    recs = [json.loads(x) for x in (tmp_path / "cache" / "suite-run" / "records.jsonl").read_text().splitlines()]
    assert {r["op"] for r in recs} == {"rms_norm", "awq_w4a16_gemm"} and all(r["correct"] for r in recs)
    assert {r["candidate"] for r in recs} == {"rowwise", "word_tiles"}      # kb best's and the override
    assert "suite/run/records.jsonl" in _members(tmp_path / "out" / "suite.tgz")
    meta = json.loads((tmp_path / "cache" / "suite-run" / "run.json").read_text())
    assert meta["segments"][0]["unlock_compiles"] is True          # the knowledge base's own kernels
    again = subprocess.run(["bash", str(SUITE)], cwd=REPO_ROOT, env=dict(env, OUT=str(tmp_path / "out2")),
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    with tarfile.open(tmp_path / "out2" / "suite.tgz") as t:
        log = t.extractfile("suite/run.log").read().decode()
    assert log.count("all recorded before") == 2, log[-1000:]     # both ops resumed, nothing re-measured
    assert len((tmp_path / "cache" / "suite-run" / "records.jsonl").read_text().splitlines()) == len(recs)


def test_scaling_script_runs_all_four_parts_and_reports(tmp_path):
    env = _env(tmp_path, AKA_SC_DEVICE="cpu", AKA_SC_OPS="rms_norm,silu_and_mul", AKA_SC_ITERS="1")
    r = subprocess.run(["bash", str(REPO_ROOT / "scripts" / "gpu_scaling.sh")], cwd=REPO_ROOT, env=env,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    with tarfile.open(tmp_path / "out" / "scaling.tgz") as t:
        report = t.extractfile("scaling/SCALING.md").read().decode()
        steps = t.extractfile("scaling/steps.txt").read().decode()
    assert all(f"[{p} rc=0" in steps for p in ("bench1", "benchN", "convert1", "convertN")), steps
    assert report.count("| aka bench run |") == 2 and report.count("| aka convert |") == 2
    assert (tmp_path / "cache" / "scaling" / "convertN" / "batch.jsonl").is_file()   # resumable: kept in the cache


def test_optimize_script_runs_its_ops_and_packs_each_run(tmp_path):
    env = _env(tmp_path, AKA_OPT_OPS="rms_norm", AKA_OPT_ITERS="1", AKA_OPT_WALL="120", AKA_DEADLINE_S="300")
    r = subprocess.run(["bash", str(REPO_ROOT / "scripts" / "gpu_optimize.sh")], cwd=REPO_ROOT, env=env,
                       capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, r.stderr[-2000:]
    with tarfile.open(tmp_path / "out" / "opt.tgz") as t:
        names = t.getnames()
        steps = t.extractfile("opt/steps.txt").read().decode()
        best = json.loads(t.extractfile("opt/runs/optimize-rms_norm/best.json").read())
    assert "opt/runs/optimize-rms_norm/report.md" in names and "opt/provenance.txt" in names
    assert "[optimize rms_norm rc=0" in steps, steps
    # on CPU the run ends at its first candidate that is correct on every small shape
    assert best["accepted"] and best["score"] == dict(best["score"], kind="pass_rate", value=1.0), best
    assert (tmp_path / "cache" / "opt-runs" / "optimize-rms_norm" / "events.jsonl").is_file()  # kept for a resume
    # a second call finds the run in the cache and resumes it instead of starting another
    again = subprocess.run(["bash", str(REPO_ROOT / "scripts" / "gpu_optimize.sh")], cwd=REPO_ROOT,
                           env=dict(env, OUT=str(tmp_path / "out2")), capture_output=True, text=True, timeout=400)
    assert again.returncode == 0, again.stderr[-2000:]
    with tarfile.open(tmp_path / "out2" / "opt.tgz") as t:
        steps2 = t.extractfile("opt/steps.txt").read().decode()
        log2 = t.extractfile("opt/optimize-rms_norm.log").read().decode()
    assert "[optimize rms_norm rc=0" in steps2 and "resume=optimize-rms_norm" in steps2, steps2
    import re
    wall = int(re.search(r"max_wall_s=(\d+)", steps2).group(1))   # the run's wall so far plus this call's 120 s
    assert 120 <= wall < 200, steps2
    assert "(resumed at round 2)" in log2, log2[-1500:]
    # a run timed on another card is not resumed (aka optimize would refuse): set aside, a new run
    c1 = tmp_path / "cache" / "opt-runs" / "optimize-rms_norm" / "candidates" / "c0001.json"
    rec = json.loads(c1.read_text())
    rec["result"]["env"] = dict(rec["result"]["env"], gpu="NVIDIA H100 80GB HBM3")
    c1.write_text(json.dumps(rec))
    third = subprocess.run(["bash", str(REPO_ROOT / "scripts" / "gpu_optimize.sh")], cwd=REPO_ROOT,
                           env=dict(env, OUT=str(tmp_path / "out3")), capture_output=True, text=True, timeout=400)
    assert third.returncode == 0, third.stderr[-2000:]
    with tarfile.open(tmp_path / "out3" / "opt.tgz") as t:
        steps3 = t.extractfile("opt/steps.txt").read().decode()
    assert "timed on NVIDIA H100 80GB HBM3; set aside as optimize-rms_norm.NVIDIA_H100_80GB_HBM3" in steps3, steps3
    assert "[optimize rms_norm rc=0" in steps3 and " op=rms_norm " in steps3, steps3
    assert (tmp_path / "cache" / "opt-runs" / "optimize-rms_norm.NVIDIA_H100_80GB_HBM3" / "events.jsonl").is_file()


def test_candidates_table_compares_a_runs_candidates_per_shape():
    """scripts/candidates_table.py on the committed H200 optimize run: one row per shape, each later
    candidate's ratio to the first, the peer column, and the provenance line; CANDIDATES.md is its output."""
    import sys
    run = REPO_ROOT / "results" / "h200" / "optimize-2026-12-05" / "call1" / "runs" / "optimize-gemm_bf16"
    out = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "candidates_table.py"), str(run)],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    rows = [ln for ln in out.splitlines() if ln.startswith("| ") and not ln.startswith("| shape")]
    assert len(rows) == 16 and rows[7].startswith("| 7 M=96,N=8192,K=7392 | 43.9 | 43.7 | 0.995 | 34.9 |")
    assert "GPU NVIDIA H200, torch 2.11.0+cu130, triton 3.6.0, git be302c7ac405." in out
    assert "c0001: objective 0.671, 0.953x peer geomean over 16 shapes, worst 0.793x; decision: accepted" in out
    assert out == (REPO_ROOT / "results" / "h200" / "optimize-2026-12-05" / "CANDIDATES.md").read_text()


def test_call_begin_sets_the_deadline_cache_and_packs_out_on_exit(tmp_path):
    """device_lib.sh's call_begin, the per-call scripts' opening (device_open stubbed: no GPU here):
    AKA_DEADLINE_S wins over the script's own seconds, the carried cache is used, $OUT is packed."""
    out = tmp_path / "out"
    out.mkdir()
    script = ('set -uo pipefail; . scripts/device_lib.sh; device_open() { echo opened > "$OUT/provenance.txt"; }; '
              'call_begin 300; echo "deadline=$DEADLINE cache=$AKA_CACHE_DIR left=$(left)"')
    for env_deadline, want in ((None, 300), ("120", 120)):
        env = dict(os.environ, OUT=str(out))
        env.pop("AKA_DEADLINE_S", None)
        if env_deadline:
            env["AKA_DEADLINE_S"] = env_deadline
        r = subprocess.run(["bash", "-c", script], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert f"deadline={want} cache={REPO_ROOT}/.gpucache" in r.stdout
        assert int(r.stdout.split("left=")[1]) in (want, want - 1)
        # packed on exit, loose files gone (baselines.tgz too where this checkout's cache holds baselines)
        assert set(_members(out / "out.tgz")) - {"./baselines.tgz"} == {".", "./provenance.txt"}
        assert [p.name for p in out.iterdir()] == ["out.tgz"]
        (out / "out.tgz").unlink()


def test_call_begin_makes_a_sub_folder_of_out_it_is_given(tmp_path):
    """OUT=$OUT/b before a per-call script (results/h100/device-2026-12-07e call 2): the folder need not exist."""
    out = tmp_path / "out" / "b"
    script = ('set -uo pipefail; . scripts/device_lib.sh; device_open() { echo opened > "$OUT/provenance.txt"; }; '
              'call_begin 30; echo ok')
    r = subprocess.run(["bash", "-c", script], cwd=REPO_ROOT, env=dict(os.environ, OUT=str(out)),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr
    assert "./provenance.txt" in _members(out / "out.tgz")


def test_kbv_runs_one_kb_verify_of_the_scratch_copy_within_its_seconds(tmp_path):
    """device_lib.sh's kbv: `aka kb verify` of the scratch copy on the GPU within the given seconds
    (budget and timeout both), its output appended to $OUT/kbverify.log, a step line with its rc
    (python3 stubbed: no GPU here)."""
    out = tmp_path / "out"
    out.mkdir()
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "python3").write_text('#!/bin/sh\necho "ARGS $*"\nexit 3\n')   # `timeout` execs a program, not a function
    (stub / "python3").chmod(0o755)
    script = ('set -uo pipefail; . scripts/device_lib.sh; T0=$(date +%s); '
              'kbv 200 3 --op fused_moe; KBV_DIR=/tmp/elsewhere kbv 90 1; KBV_BUDGET=0 kbv 50 1')
    env = dict(os.environ, OUT=str(out), PATH=f"{stub}:{os.environ['PATH']}")
    r = subprocess.run(["bash", "-c", script], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "[kb verify --op fused_moe rc=3 " in r.stdout and "[kb verify  rc=3 " in r.stdout
    log = (out / "kbverify.log").read_text().splitlines()
    assert log[0] == ("ARGS -m aka.cli kb verify --kb /tmp/kbv/knowledge_base --device cuda --shapes all --jobs 3 "
                      "--unlock-compiles --timeout 200 --budget 200 --op fused_moe")
    assert log[1].startswith("ARGS -m aka.cli kb verify --kb /tmp/elsewhere/knowledge_base") and "--budget 90" in log[1]
    assert "--timeout 50" in log[2] and "--budget" not in log[2], "KBV_BUDGET=0: nothing deferred by its last time"


def test_pack_out_brings_the_baselines_and_kb_copy_merges_an_earlier_calls_verdicts(tmp_path):
    """pack_out adds the cache's baseline timings (baselines.tgz) to out.tgz; kb_copy merges the verdicts
    an earlier call brought back (kbv_prev, put there by device_between.sh) into the scratch copy, so
    the next verify call finds them current (results/h100/device-2026-12-06h: call 3 repeated call 2)."""
    cache, out, scratch = tmp_path / "cache", tmp_path / "out", tmp_path / "kbv"
    (cache / "baselines").mkdir(parents=True)
    (cache / "baselines" / "rms_norm-0-abc.json").write_text("{}")
    out.mkdir()
    kernel = "kernels/rms_norm/rowwise"
    committed = json.loads((REPO_ROOT / "results" / "kb" / f"{kernel}.results.json").read_text())
    src_hash = committed["devices"]["cpu"]["source_hash"]
    prev = cache / "kbv_prev" / "results" / "kb" / f"{kernel}.results.json"
    prev.parent.mkdir(parents=True)
    entry = {"status": "pass", "gpu": "Test GPU 9000", "source_hash": src_hash, "date": "2099-01-01T00:00:00+00:00",
             "shapes_spec": "all", "shapes": [{"id": "0", "label": "x", "correct": True, "time_us": 1.0}]}
    prev.write_text(json.dumps({"devices": {"cuda": entry}}))
    # a verify's verdict, written a moment after kb_copy (file times tick coarsely; a real verify takes minutes)
    fresh = scratch / "results" / "kb" / "kernels" / "rms_norm" / "new.results.json"
    script = ('set -uo pipefail; . scripts/device_lib.sh; echo p > "$OUT/provenance.txt"; '
              f'kb_copy {scratch}; sleep 0.1; echo {{}} > {fresh}; kbv_pack {scratch}; pack_out')
    env = dict(os.environ, OUT=str(out), AKA_CACHE_DIR=str(cache))
    r = subprocess.run(["bash", "-c", script], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert {"./baselines.tgz", "./kbv.tgz"} <= set(_members(out / "out.tgz"))
    # kbv_pack: only what was written after kb_copy (its stamp), the merged earlier verdicts not
    import tarfile
    with tarfile.open(out / "out.tgz") as t:
        inner = tarfile.open(fileobj=t.extractfile("./kbv.tgz"))
        assert inner.getnames() == ["kernels/rms_norm/new.results.json"]
    merged = json.loads((scratch / "results" / "kb" / f"{kernel}.results.json").read_text())
    assert "Test GPU 9000" in json.dumps(merged)                          # the earlier call's verdict
    assert merged["devices"]["cpu"] == committed["devices"]["cpu"]          # the committed ones kept
    tracked = json.loads((REPO_ROOT / "results" / "kb" / f"{kernel}.results.json").read_text())
    assert "Test GPU 9000" not in json.dumps(tracked)                       # the tree untouched


def test_pack_out_of_a_folder_keeps_the_archive_a_nested_script_packed_into_a_subfolder(tmp_path):
    """A call script that runs another under OUT=$OUT/sub packs twice: the inner pack_out leaves sub/out.tgz,
    the outer one must carry it (results/h200/device-2026-12-08 call 1 lost call_rest.sh's verdicts when
    the outer tar's exclusion matched out.tgz at every depth)."""
    out = tmp_path / "out"
    out.mkdir()
    script = ('set -uo pipefail; . scripts/device_lib.sh; mkdir -p "$OUT/rest"; '
              '( OUT=$OUT/rest; echo v > "$OUT/kbverify.log"; pack_out ); echo q > "$OUT/queue.log"; pack_out')
    env = dict(os.environ, OUT=str(out), AKA_CACHE_DIR=str(tmp_path / "nocache"))
    r = subprocess.run(["bash", "-c", script], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in out.iterdir()) == ["out.tgz"]
    members = set(_members(out / "out.tgz"))
    assert {"./queue.log", "./rest/out.tgz"} <= members and "./out.tgz" not in members
    import tarfile
    with tarfile.open(out / "out.tgz") as t:
        inner = tarfile.open(fileobj=t.extractfile("./rest/out.tgz"))
        assert inner.getnames() == [".", "./kbverify.log"]


def test_probe_pdl_table_renders_the_committed_run_with_its_provenance():
    """results/h100/device-2026-12-07/pdl.md is what `probe_pdl.py --table` writes from the call's JSON."""
    import sys
    d = REPO_ROOT / "results" / "h100" / "device-2026-12-07"
    out = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "probe_pdl.py"), "--table", str(d / "call1" / "pdl.json"),
                          "--provenance", str(d / "call1" / "provenance.txt")], capture_output=True, text=True, check=True)
    assert out.stdout == (d / "pdl.md").read_text()
    assert "source bb37a0a99b9d, 2026-12-07T00:00:57Z" in out.stdout and "| 4,096 | 4 | yes / yes / yes |" in out.stdout


def test_tune_pairs_matches_records_that_differ_in_one_key_only():
    from aka.evaluate.loader import import_file
    from aka.problem import REPO_ROOT
    tp = import_file(REPO_ROOT / "scripts" / "tune_pairs.py", "tune_pairs")
    rec = [{"op": "x", "shape": "1", "M": 4096, "N": 64, "K": 128, "config": {"BM": 128, "TMA": 0}, "us": 11.0, "correct": True},
           {"op": "x", "shape": "1", "M": 4096, "N": 64, "K": 128, "config": {"BM": 128, "TMA": 1}, "us": 10.0, "correct": True},
           {"op": "x", "shape": "1", "M": 4096, "N": 64, "K": 128, "config": {"BM": 64, "TMA": 1}, "us": 9.0, "correct": True},
           {"op": "x", "shape": "2", "M": 8, "N": 64, "K": 128, "config": {"BM": 128, "TMA": 0}, "us": 5.0, "correct": True},
           {"op": "x", "shape": "2", "M": 8, "N": 64, "K": 128, "config": {"BM": 128, "TMA": 1}, "us": 4.0, "correct": False},
           {"op": "y", "shape": "1", "M": 4096, "N": 64, "K": 128, "config": {"BM": 128, "TMA": 0}, "us": 1.0, "correct": True}]
    got = tp.pairs(rec, "TMA", op="x")
    assert [(p["shape"], p["MxNxK"], p["config"], p["us"]) for p in got] == [("1", "4096x64x128", {"BM": 128}, [11.0, 10.0])]
    assert abs(got[0]["ratio"] - 1.1) < 1e-9 and tp.pairs(rec, "TMA", min_m=5000) == []


def test_host_launch_probe_refuses_without_a_gpu_and_checks_its_arguments():
    probe = REPO_ROOT / "scripts" / "host_launch_probe.py"
    r = subprocess.run([sys.executable, str(probe), "fused_moe", "3", "--impl", "peer"], cwd=REPO_ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "needs a CUDA GPU" in r.stderr
    r = subprocess.run([sys.executable, str(probe), "fused_moe", "3", "--impl", "peer", "--load", "-1"], cwd=REPO_ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--load >= 0" in r.stderr


def test_host_launch_probe_renders_a_committed_runs_rows_without_a_gpu():
    probe = REPO_ROOT / "scripts" / "host_launch_probe.py"
    rows = REPO_ROOT / "results" / "h100" / "device-2026-12-07f" / "call2" / "probe.jsonl"
    r = subprocess.run([sys.executable, str(probe), "--table", str(rows)], cwd=REPO_ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout == (rows.parent / "PROBE.md").read_text()   # the committed table is this command's output
    assert "| 3 | grouped_dispatch | 0 | 833.6 | 579.7 | 442.8 | 434.5 | 1.31 |" in r.stdout


def test_collect_gpu_names_the_gpu_of_its_provenance_and_tables_the_host_bound_records(tmp_path):
    """scripts/collect_gpu.py on an H100 call's folder: the heading and the calibration's datasheet
    figures are that GPU's (not the H200's), the two host-bound record kinds become tables, and
    --no-raw leaves the source files where they are."""
    src = tmp_path / "call1"
    src.mkdir()
    (src / "provenance.txt").write_text("name, driver_version\nNVIDIA H100 80GB HBM3, 580.159.04\ntorch 2.11.0\n")
    (src / "calibration.json").write_text(json.dumps({"copy_tbps": 3.04, "bf16_tflops": 726.0, "fp8_tflops": 1442.0}))
    rows = [{"kind": "host_bound_sized", "fast_us": 101.9, "fast_host_us": 9.5, "fast_spin_us": 214.0,
             "slow_us": 101.8, "slow_host_us": 2154.7, "slow_spin_us": 3311.0, "notes": {"fast": None, "slow": None}},
            {"kind": "host_bound_candidate", "status": "pass", "chunked_us": 1287.2, "host_us": 3235.9,
             "head_start_us": 4930.0, "plain_us": 707.7, "notes": []}]
    (src / "gpu_results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    dest = tmp_path / "folder"
    r = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "collect_gpu.py"), str(src), "--dest", str(dest),
                        "--no-raw"], capture_output=True, text=True, cwd=REPO_ROOT)
    assert r.returncode == 0, r.stderr
    md = (dest / "MEASUREMENT.md").read_text()
    assert md.startswith("# Measurement acceptance on NVIDIA H100 80GB HBM3")
    assert "copy 3.04 TB/s (datasheet 3.35)" in md and "4.8" not in md
    assert "| copy after 2 ms of host sleep | 2154.7 | 3311 | 101.8 | - |" in md
    assert "| pass | 1287.2 | 3235.9 | 4930 | - | 707.7 | no |" in md
    assert not (dest / "raw").exists()


def test_collect_gpu_tables_the_adversarial_cases_of_a_cut_run_from_its_verbose_log(tmp_path):
    """A judge part stopped at its budget leaves no junit; collect_gpu.py takes the finished cases from the
    `-v` log (results/h100/device-2026-12-08: 17 of 55), each with its expected verdict, and says how many
    of the collected tests finished."""
    src = tmp_path / "j"
    src.mkdir()
    (src / "provenance.txt").write_text("name, driver_version\nNVIDIA H100 80GB HBM3, 580.159.04\n")
    (src / "par_judge.log").write_text(
        "8 workers [55 items]\n"
        "[gw0] [ 2%] PASSED tests/test_adversarial.py::test_gpu_verdict[vec_add] \n"
        "[gw1] [ 4%] PASSED tests/test_adversarial.py::test_gpu_verdict[side_stream] \n"
        "[gw2] [ 5%] FAILED tests/test_adversarial.py::test_gpu_verdict[matmul] \n"
        "[gw3] [ 7%] PASSED tests/gpu/test_judge_gpu.py::test_forged_samples_are_rejected_by_the_judges_clock \n"
        "tests/test_adversarial.py::test_gpu_verdict[read_reference] \n")
    dest = tmp_path / "folder"
    r = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "collect_gpu.py"), str(src), "--dest", str(dest),
                        "--no-raw"], capture_output=True, text=True, cwd=REPO_ROOT)
    assert r.returncode == 0, r.stderr
    md = (dest / "MEASUREMENT.md").read_text()
    assert "## Adversarial suite and honest kernels on NVIDIA H100 80GB HBM3" in md
    assert "4 of 55 collected tests finished, these 3 of them adversarial cases" in md
    assert "| vec_add | honest | vec_add | pass | pass | - |" in md
    assert "| side_stream | cheat | vec_add | rejected ([stream]) | pass | - |" in md
    assert "| matmul | honest | matmul | pass | FAILED | - |" in md
    assert "read_reference" not in md                     # started, not finished
