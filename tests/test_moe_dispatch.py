"""The grouped fused_moe kernel's paths and dispatch table, its GPU tuner and the bake step, on CPU.

The kernel paths run under the Triton interpreter in a subprocess (TRITON_INTERPRET must be set
before triton is imported; the worker's interpreter fixes installed), compared with the op's
reference by the harness's own comparison. `aka eval` / tests/test_kb_kernels.py cover the
default configuration through the whole cascade; here every other path the dispatch table can
pick is checked: both combines, split-K, the persistent loop, the multi-program alignment, and
an odd shape with expert parallelism.
"""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

from aka.problem import REPO_ROOT

KERNEL = REPO_ROOT / "knowledge_base" / "kernels" / "fused_moe" / "grouped_dispatch.py"
TUNER = REPO_ROOT / "scripts" / "gpu_tune_moe.py"
BAKER = REPO_ROOT / "scripts" / "bake_dispatch_moe.py"
BASE = {"TABLE": 0, "GROUP": 8, "SPLIT_K": 1, "PERSIST": 0, "USE_TMA": 0, "num_warps": 4, "num_stages": 2}

PATHS_SCRIPT = r"""
import json, sys, torch
from aka.evaluate.interp_fix import install
install()
from aka.evaluate.compare import compare_outputs
from aka.evaluate.loader import import_file
from aka.problem import load_problem
prob = load_problem("fused_moe")
sys.path.insert(0, "bench/ops/fused_moe")
from input import _make_inputs
from reference import Model
kern = import_file(sys.argv[1], "_moe_kernel_under_test")
for case in json.loads(sys.argv[2]):
    torch.manual_seed(case["seed"])
    inputs = _make_inputs(**case["shape"], device="cpu")
    want = Model()(**inputs)
    got = kern.moe_forward(**{k: v.clone() for k, v in inputs.items()}, cfg=case["cfg"],
                           small_work=case["small_work"])
    worst, _ = compare_outputs(got, want, prob.meta)
    print(json.dumps({"case": case, "ok": worst.ok, "reason": worst.reason}), flush=True)
"""


def load_kernel(path=KERNEL):
    spec = importlib.util.spec_from_file_location(f"_gd_{abs(hash(str(path)))}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def interp_env():
    return dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(REPO_ROOT))


def test_pick_config_uses_the_nearest_token_count_of_its_geometry():
    k = load_kernel()
    params = dict(k.AKA_PARAMS, TABLE=1)
    table = {"8,4096,3584,2": {16: {"BM": 16}, 8192: {"BM": 128}}}
    assert k.pick_config(16, 8, 4096, 3584, 2, params, table)["BM"] == 16
    assert k.pick_config(8192, 8, 4096, 3584, 2, params, table)["BM"] == 128
    assert k.pick_config(300, 8, 4096, 3584, 2, params, table)["BM"] == 16      # log 300: nearer 16
    assert k.pick_config(400, 8, 4096, 3584, 2, params, table)["BM"] == 128     # log 400: nearer 8192
    assert k.pick_config(1, 8, 4096, 3584, 2, params, table)["BM"] == 16
    miss = k.pick_config(16, 8, 4096, 3584, 8, params, table)                    # other top-k
    assert miss == params
    off = k.pick_config(16, 8, 4096, 3584, 2, dict(params, TABLE=0), table)
    assert off["BM"] == params["BM"]
    # an entry overrides only the keys it holds; the rest come from the parameters
    assert k.pick_config(16, 8, 4096, 3584, 2, params, table)["BK"] == params["BK"]


OPTIONAL = {"TMA_ACT", "GATHER_X"}    # A tiles by TMA (2026-12-06): absent in entries baked before, 0


def test_shipped_table_entries_are_complete_launch_configs():
    k = load_kernel()
    launch = {"BM", "BN", "BN2", "BK", "GROUP", "num_warps", "num_stages", "COMBINE", "SPLIT_K", "PERSIST", "USE_TMA"}
    assert k.DISPATCH is k.DISPATCH_BY_GPU[k.DEFAULT_GPU] and k.DISPATCH
    for gpu, table in k.DISPATCH_BY_GPU.items():
        assert gpu.startswith("NVIDIA "), gpu                   # torch's device names
        for key, entries in table.items():
            assert len(key.split(",")) == 4 and all(p.isdigit() for p in key.split(","))
            for n, cfg in entries.items():
                assert isinstance(n, int) and n > 0 and launch <= set(cfg) <= launch | OPTIONAL, (gpu, key, n, cfg)


def test_pick_config_prefers_the_table_of_the_gpu_in_hand_and_falls_back_to_the_default():
    k = load_kernel()
    cfg = dict(k.AKA_PARAMS, BM=64, BN=128, BN2=128, num_warps=8)
    other = {"NVIDIA H100 80GB HBM3": {"8,4096,3584,2": {8192: {"BM": 64, "num_warps": 8}}}}
    saved = dict(k.DISPATCH_BY_GPU)
    try:
        k.DISPATCH_BY_GPU.update(other)
        h100 = k.pick_config(8192, 8, 4096, 3584, 2, gpu="NVIDIA H100 80GB HBM3")
        assert (h100["BM"], h100["num_warps"]) == (64, 8)
        # a geometry the H100's table lacks, an unknown GPU and no GPU all take the default's entry
        default = k.DISPATCH["8,4096,7168,2"][2048]
        for gpu in ("NVIDIA H100 80GB HBM3", "NVIDIA L40S", None):
            got = k.pick_config(2048, 8, 4096, 7168, 2, gpu=gpu)
            assert {n: got[n] for n in default} == default
        assert k.pick_config(8192, 8, 4096, 3584, 2, gpu="NVIDIA L40S")["BM"] == k.DISPATCH["8,4096,3584,2"][8192]["BM"]
        # a token range the H100's table lacks (decode: 16 tokens) takes the default's entry for it
        dec = k.DISPATCH["8,4096,3584,2"][16]
        got = k.pick_config(16, 8, 4096, 3584, 2, gpu="NVIDIA H100 80GB HBM3")
        assert {n: got[n] for n in dec} == dec
        # a geometry no table holds runs the parameters
        assert k.pick_config(64, 3, 96, 40, 2, dict(cfg), gpu="NVIDIA H100 80GB HBM3") == cfg
    finally:
        k.DISPATCH_BY_GPU.clear()
        k.DISPATCH_BY_GPU.update(saved)


def test_bake_writes_the_measuring_gpus_table_and_leaves_the_others(tmp_path):
    """A tune from an H100 becomes the H100's table; the H200's entries and notes stay byte for byte;
    a second H100 bake merges into the H100's table; the file stays one block that imports."""
    kernel = tmp_path / "k.py"
    kernel.write_text(KERNEL.read_text())
    before = load_kernel(kernel)
    cfg = {"BM": 64, "BN": 128, "BN2": 128, "BK": 64, "GROUP": 8, "num_warps": 8, "num_stages": 4, "COMBINE": 0,
           "SPLIT_K": 1, "PERSIST": 0, "USE_TMA": 1}

    def tune(n, bm):
        return {"provenance": {"gpu": "NVIDIA H100 80GB HBM3", "timer": "CUDA graph replay", "torch": "2.11",
                               "triton": "3.6.0", "date": "2026-12-06", "git_sha": "abc"},
                "shapes": [{"id": "10", "input_kwargs": {"num_tokens": n, "hidden_size": 2048, "intermediate_size": 768,
                                                         "num_experts": 128, "top_k": 8, "ep_size": 1},
                            "best": {"ok": True, "recheck": {"ok": True}, "config": dict(cfg, TABLE=0, BM=bm),
                                     "time_us": 500.0, "sol_fraction_measured": 0.5}}]}
    for i, (n, bm) in enumerate([(4096, 64), (16384, 128)]):
        (tmp_path / f"t{i}.json").write_text(json.dumps(tune(n, bm)))
        p = subprocess.run([sys.executable, str(BAKER), str(tmp_path / f"t{i}.json"), "--kernel", str(kernel)],
                           capture_output=True, text=True, cwd=REPO_ROOT)
        assert p.returncode == 0, p.stderr
    # a winner that reads its A tiles by TMA keeps the keys that say so (a bake that dropped them would
    # ship a different kernel from the one measured)
    (tmp_path / "t2.json").write_text(json.dumps(
        {**tune(8192, 128), "shapes": [dict(tune(8192, 128)["shapes"][0], id="12", input_kwargs={
            "num_tokens": 8192, "hidden_size": 4096, "intermediate_size": 384, "num_experts": 128, "top_k": 8,
            "ep_size": 1}, best=dict(tune(8192, 128)["shapes"][0]["best"], config=dict(cfg, TABLE=0, TMA_ACT=1,
                                                                                     GATHER_X=1)))]}))
    copy = tmp_path / "k2.py"
    copy.write_text(KERNEL.read_text())
    p = subprocess.run([sys.executable, str(BAKER), str(tmp_path / "t2.json"), "--kernel", str(copy)],
                       capture_output=True, text=True, cwd=REPO_ROOT)
    assert p.returncode == 0, p.stderr
    baked = load_kernel(copy).DISPATCH_BY_GPU["NVIDIA H100 80GB HBM3"]["128,4096,384,8"][8192]
    assert baked == dict(cfg, TMA_ACT=1, GATHER_X=1)
    after = load_kernel(kernel)
    assert after.DISPATCH == before.DISPATCH and after.DEFAULT_GPU == "NVIDIA H200"
    h100 = after.DISPATCH_BY_GPU["NVIDIA H100 80GB HBM3"]
    shipped = before.DISPATCH_BY_GPU.get("NVIDIA H100 80GB HBM3", {})
    assert h100["128,2048,768,8"] == {**shipped.get("128,2048,768,8", {}), 4096: cfg, 16384: dict(cfg, BM=128)}
    assert {k: v for k, v in h100.items() if k != "128,2048,768,8"} == \
        {k: v for k, v in shipped.items() if k != "128,2048,768,8"}      # the H100's other entries kept
    text = kernel.read_text()
    assert text.count("DISPATCH_BY_GPU = {") == 1 and "# NVIDIA H100 80GB HBM3: newest bake measured" in text
    assert "# shape 8: 2423.0 us, 0.75 of the measured ceiling" in text and "# shape 10: 500.0 us, 0.50" in text
    old_block = KERNEL.read_text().split("DISPATCH_BY_GPU = {")[1].split("\n    },\n")[0]
    assert old_block in text                                       # the H200's table, unchanged
    assert after.pick_config(4096, 128, 2048, 768, 8, gpu="NVIDIA H100 80GB HBM3")["BM"] == 64


def cases():
    s0 = {"num_tokens": 7, "hidden_size": 96, "intermediate_size": 40, "num_experts": 5, "top_k": 2, "ep_size": 1}
    odd = {"num_tokens": 37, "hidden_size": 80, "intermediate_size": 48, "num_experts": 7, "top_k": 3, "ep_size": 2}
    dec = dict(BASE, BM=16, BN=32, BN2=32, BK=32, COMBINE=1)
    return [
        {"shape": s0, "cfg": dec, "small_work": 1 << 16, "seed": 1},
        {"shape": s0, "cfg": dict(dec, SPLIT_K=2), "small_work": 0, "seed": 2},            # split-K, multi-program align
        {"shape": odd, "cfg": dict(dec, SPLIT_K=4, PERSIST=1), "small_work": 1 << 16, "seed": 3},
        {"shape": odd, "cfg": dict(BASE, BM=32, BN=32, BN2=64, BK=32, COMBINE=0), "small_work": 0, "seed": 4},
        {"shape": odd, "cfg": dict(BASE, BM=16, BN=64, BN2=32, BK=64, COMBINE=0, PERSIST=1, GROUP=1),
         "small_work": 1 << 16, "seed": 5},
        {"shape": odd, "cfg": dict(dec, USE_TMA=1, SPLIT_K=2), "small_work": 0, "seed": 6},       # TMA weight tiles
        {"shape": s0, "cfg": dict(BASE, BM=32, BN=64, BN2=64, BK=32, COMBINE=0, USE_TMA=1), "small_work": 1 << 16,
         "seed": 7},
        # A tiles by TMA: x gathered into sorted order (padding rows zero) and the activation rows, whose
        # padding rows are never written; a K tail past I (40 at BK 32), split-K, expert parallelism
        {"shape": s0, "cfg": dict(BASE, BM=32, BN=64, BN2=64, BK=32, COMBINE=0, USE_TMA=1, TMA_ACT=1, GATHER_X=1),
         "small_work": 0, "seed": 8},
        {"shape": odd, "cfg": dict(dec, USE_TMA=1, SPLIT_K=2, TMA_ACT=1, GATHER_X=1), "small_work": 1 << 16, "seed": 9},
        {"shape": odd, "cfg": dict(BASE, BM=32, BN=32, BN2=64, BK=32, COMBINE=0, USE_TMA=1, PERSIST=1, GATHER_X=1),
         "small_work": 0, "seed": 10},
    ]


def test_every_dispatchable_path_matches_the_reference_under_the_interpreter():
    p = subprocess.run([sys.executable, "-c", PATHS_SCRIPT, str(KERNEL), json.dumps(cases())], capture_output=True,
                       text=True, env=interp_env(), cwd=REPO_ROOT, timeout=900)
    rows = [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]
    assert p.returncode == 0 and len(rows) == len(cases()), p.stderr[-2000:]
    bad = [(r["case"]["cfg"], r["case"]["small_work"], r["reason"]) for r in rows if not r["ok"]]
    assert not bad, bad


def test_alignment_drops_expert_parallel_ids_and_pads_every_segment():
    """The sorted rows the GEMMs read: every local pair exactly once, in its expert's segment,
    segments padded to BM, ids of -1 nowhere; both alignment paths."""
    script = r"""
import json, sys, torch, triton
from aka.evaluate.interp_fix import install
install()
from aka.evaluate.loader import import_file
k = import_file(sys.argv[1], "_moe_align_under_test")
torch.manual_seed(0)
ids = torch.randint(-1, 6, (23, 3), dtype=torch.int32).view(-1)
NP, E, bm = ids.numel(), 6, 16
out = []
for nsub in (0, 2, 1):   # 0: the one-program alignment; else chunks of nsub tiles of 16 pairs
    n_blocks = NP // bm + min(E, NP)
    total = torch.empty(1, dtype=torch.int32)
    eid = torch.empty(n_blocks, dtype=torch.int32)
    srt = torch.full((n_blocks * bm,), NP, dtype=torch.int32)
    if not nsub:
        k._align_one[(1,)](ids, srt, eid, total, NP, E, n_blocks, BM=bm, E_PAD=8, SUB=16, BB=4)
    else:
        chunks = triton.cdiv(NP, 16 * nsub)
        counts = torch.zeros((2, 8), dtype=torch.int32)
        seg = torch.empty(8, dtype=torch.int32)
        k._hist[(chunks,)](ids, counts, NP, E_PAD=8, SUB=16, NSUB=nsub)
        k._offsets[(1,)](counts, seg, eid, total, n_blocks, E, BM=bm, E_PAD=8, BB=4)
        k._scatter[(chunks,)](ids, seg, counts[1], srt, NP, E_PAD=8, SUB=16, NSUB=nsub)
    out.append({"total": int(total), "eid": eid.tolist(), "sorted": srt.tolist(), "ids": ids.tolist()})
print(json.dumps(out))
"""
    p = subprocess.run([sys.executable, "-c", script, str(KERNEL)], capture_output=True, text=True,
                       env=interp_env(), cwd=REPO_ROOT, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    results = json.loads(p.stdout.strip().splitlines()[-1])
    assert len(results) == 3
    for r in results:
        ids, srt, eid, total, bm = r["ids"], r["sorted"], r["eid"], r["total"], 16
        NP = len(ids)
        counts = [sum(1 for i in ids if i == e) for e in range(6)]
        assert total == sum(-(-c // bm) * bm for c in counts)
        rows = [s for s in srt[:total] if s < NP]
        assert sorted(rows) == [i for i, e in enumerate(ids) if e >= 0]       # each local pair once
        assert all(s == NP for s in srt[total:])
        for pos, s in enumerate(srt[:total]):
            if s < NP:
                assert ids[s] == eid[pos // bm]                                 # in its expert's block
        assert all(e == -1 for e in eid[total // bm:])
        assert eid[:total // bm] == sorted(eid[:total // bm])


def test_alignment_chunks_give_every_sm_one_when_there_are_enough_pairs():
    """chunk_subs: the most one-hot tiles per chunk (a power of two, at most CHUNK_SUBS) that
    leaves a chunk for every SM; one tile a chunk when the pairs are fewer than that."""
    k = load_kernel()
    for NP in (2048, 16384, 32768, 131072, 1 << 20, 5000):
        n = k.chunk_subs(NP, 132)
        chunks = -(-NP // (k.SUB * n))
        assert 1 <= n <= k.CHUNK_SUBS and n & (n - 1) == 0
        assert chunks >= 132 or n == 1, (NP, n)
        assert n == k.CHUNK_SUBS or -(-NP // (k.SUB * 2 * n)) < 132, (NP, n)    # doubling would starve SMs
    assert k.chunk_subs(32768, 132) == 1 and k.chunk_subs(131072, 132) == 4     # shapes 10 and 15


@pytest.mark.slow
def test_tuner_then_bake_end_to_end_on_cpu(tmp_path):
    """The GPU script's own steps on one small shape (interpreter, wall-clock 'times'), then the
    bake into a copy of the kernel, whose table then dispatches that shape to the winner."""
    p = subprocess.run([sys.executable, str(TUNER), str(tmp_path / "out"), "--device", "cpu", "--shapes", "small",
                        "--deadline", "600"], capture_output=True, text=True, cwd=REPO_ROOT, timeout=900,
                       env={k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"})
    assert p.returncode == 0, p.stderr[-3000:]
    assert "| shape |" in p.stdout.splitlines()[-4] or "| shape |" in p.stdout
    tune = json.loads((tmp_path / "out" / "moe_tune.json").read_text())
    assert tune["errors"] == [] and len(tune["shapes"]) == 3
    for rec in tune["shapes"]:
        assert rec["best"] and rec["best"]["ok"] and rec["best"]["recheck"]["ok"], rec
        assert all(r["ok"] for r in rec["configs"]), rec["configs"]
        assert rec["peer"]["ok"], rec["peer"]                          # torch._grouped_mm on CPU too

    kernel = tmp_path / "grouped_dispatch.py"
    kernel.write_text(KERNEL.read_text())
    refused = subprocess.run([sys.executable, str(BAKER), str(tmp_path / "out" / "moe_tune.json"),
                              "--kernel", str(kernel)], capture_output=True, text=True, cwd=REPO_ROOT)
    assert refused.returncode == 2 and "timed nothing" in refused.stderr
    ok = subprocess.run([sys.executable, str(BAKER), str(tmp_path / "out" / "moe_tune.json"), "--kernel",
                         str(kernel), "--allow-unmeasured"], capture_output=True, text=True, cwd=REPO_ROOT)
    assert ok.returncode == 0, ok.stderr
    baked = load_kernel(kernel)
    from aka.evaluate.static import check_source
    assert check_source(kernel.read_text()).ok
    for rec in tune["shapes"]:
        kw = rec["input_kwargs"]
        got = baked.pick_config(kw["num_tokens"], kw["num_experts"], kw["hidden_size"], kw["intermediate_size"],
                                kw["top_k"])
        want = {k: v for k, v in rec["best"]["config"].items() if k != "TABLE"}
        assert {k: got[k] for k in want} == want
    # a second bake keeps the entries and stays one table
    again = subprocess.run([sys.executable, str(BAKER), str(tmp_path / "out" / "moe_tune.json"), "--kernel",
                            str(kernel), "--allow-unmeasured"], capture_output=True, text=True, cwd=REPO_ROOT)
    assert again.returncode == 0 and kernel.read_text().count("DISPATCH_BY_GPU = {") == 1
    assert load_kernel(kernel).DISPATCH == baked.DISPATCH
    # the shipped entries this run did not measure keep the note of the run that did
    assert "# shape 8: 2423.0 us, 0.75 of the measured ceiling" in kernel.read_text()


def test_bake_refuses_a_run_without_a_winner(tmp_path):
    kernel = tmp_path / "k.py"
    kernel.write_text(KERNEL.read_text())
    tune = {"provenance": {"timer": "CUDA graph replay"}, "shapes": [
        {"id": "0", "input_kwargs": {"num_tokens": 4, "hidden_size": 8, "intermediate_size": 8, "num_experts": 2,
                                     "top_k": 1}, "best": None}]}
    (tmp_path / "t.json").write_text(json.dumps(tune))
    p = subprocess.run([sys.executable, str(BAKER), str(tmp_path / "t.json"), "--kernel", str(kernel)],
                       capture_output=True, text=True, cwd=REPO_ROOT)
    assert p.returncode == 2 and "nothing to bake" in p.stderr
    assert kernel.read_text() == KERNEL.read_text()


def test_tuner_fractions_use_the_harness_cost_model_and_ceilings():
    """The tuner's ceiling arithmetic on the H200 datasheet gives the sol_us `aka kb verify`
    recorded for the Mixtral prefill shape (1458.42 us), and a measured calibration scales it."""
    sys.path.insert(0, str(REPO_ROOT / "scripts"))
    import gpu_tune_moe as tune
    from aka.hardware import ceilings_for
    from aka.roofline import cost_from_meta
    meta = json.loads((REPO_ROOT / "bench/ops/fused_moe/meta.json").read_text())
    shape = json.loads((REPO_ROOT / "bench/ops/fused_moe/shapes.json").read_text())["8"]["input_kwargs"]
    cost = cost_from_meta(meta["cost"], shape, None)
    sheet, measured = ceilings_for("NVIDIA H200", {"copy_tbps": 4.25, "bf16_tflops": 745.0})
    as_dict = {"mem_tbps": sheet.mem_tbps, "peak_tflops": sheet.peak_tflops}
    assert tune.sol_us(cost, as_dict) == pytest.approx(1458.42, rel=1e-4)
    assert tune.sol_us(cost, {"mem_tbps": measured.mem_tbps, "peak_tflops": measured.peak_tflops}) == \
        pytest.approx(1458.42 * 989.0 / 745.0, rel=2e-3)
    assert tune.sol_us(cost, None) is None
    assert tune.rows_per_expert(shape) == 2048 and set(map(str, tune.PREFILL)) <= set(map(str, tune.grid_for(shape, "cuda")))
    decode = json.loads((REPO_ROOT / "bench/ops/fused_moe/shapes.json").read_text())["6"]["input_kwargs"]
    assert tune.rows_per_expert(decode) == 8 and tune.grid_for(decode, "cuda") is tune.DECODE


def test_tuner_mid_rows_grid_keeps_the_tables_configs_first_and_fits_the_kernels_parameters():
    """At 65-768 rows per expert the tuner tries the table's first two PREFILL configs before the
    mid-rows grid (a run the deadline cuts has timed what the table holds), every config once, each
    within the kernel's declared parameter space and a complete launch config."""
    sys.path.insert(0, str(REPO_ROOT / "scripts"))
    import gpu_tune_moe as tune
    shapes = json.loads((REPO_ROOT / "bench/ops/fused_moe/shapes.json").read_text())
    mid = shapes["14"]["input_kwargs"]                       # DeepSeek-V3 EP32: 256 rows per expert
    assert tune.rows_per_expert(mid) == 256
    grid = tune.grid_for(mid, "cuda")
    assert grid[:tune.FIRST_PASS] == tune.PREFILL[:tune.FIRST_PASS]
    assert all(c in grid for c in tune.MID + tune.PREFILL)
    assert len({json.dumps(c, sort_keys=True) for c in grid}) == len(grid)
    large = tune.grid_for(shapes["11"]["input_kwargs"], "cuda")                   # 1024 rows per expert
    assert large == tune.PREFILL[:tune.FIRST_PASS] + tune.A_TMA + tune.PREFILL[tune.FIRST_PASS:]
    assert all(c in grid for c in tune.A_TMA) and len({json.dumps(c, sort_keys=True) for c in large}) == len(large)
    k = load_kernel()
    import yaml
    declared = yaml.safe_load(k.__doc__.split("---")[1])["params"]
    launch = {"BM", "BN", "BN2", "BK", "GROUP", "num_warps", "num_stages", "COMBINE", "SPLIT_K", "PERSIST", "USE_TMA"}
    for cfg in tune.MID + tune.A_TMA:
        assert launch <= set(cfg), cfg
        for name, value in cfg.items():
            assert value in declared[name], (name, value)



def test_tuners_name_the_source_commit_the_device_was_given(monkeypatch):
    """On the device the tree's .git is a stale copy; the commit scripts/pre_device.sh recorded
    (AKA_GIT_SHA) is what ran, and both GEMM tuners must name it (device-2026-12-06g call 1's tunes
    named the copy's HEAD)."""
    sys.path.insert(0, str(REPO_ROOT / "scripts"))
    import gpu_tune_gemm
    import gpu_tune_moe
    monkeypatch.setenv("AKA_GIT_SHA", "0123456789ab")
    assert gpu_tune_moe.git_sha() == gpu_tune_gemm.git_sha() == "0123456789ab"
