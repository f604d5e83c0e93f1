"""The dispatching GEMM kernels, their GPU tuner and the table baker, without a GPU.

The tuner runs end to end under the interpreter on tiny shapes (every path: GEMV, pointer and TMA
tiles, split-K, persistent, a GEMV row applied to a larger M), and its JSON is baked into a copy
of the kernels, whose table must hold exactly the fastest correct config per shape."""
import importlib.util
import json
import os
import shutil
import subprocess
import sys

import pytest

from aka.evaluate.static import check_source
from aka.problem import REPO_ROOT

SCRIPTS = REPO_ROOT / "scripts"
KERNELS = REPO_ROOT / "knowledge_base" / "kernels"
OPS = ("gemm_bf16", "fp8_block_scaled_gemm")


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    out = tmp_path_factory.mktemp("tune")
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    done = subprocess.run([sys.executable, str(SCRIPTS / "gpu_tune_gemm.py"), str(out), "--cpu", "--shapes", "c0,c3",
                           "--deadline", "1500"], capture_output=True, text=True, timeout=1700, env=env, cwd=REPO_ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return out, json.loads((out / "tune.json").read_text()), done.stdout


@pytest.mark.slow
def test_tuner_runs_every_path_correctly_on_cpu(tuned):
    _, doc, stdout = tuned
    recs = doc["records"]
    bad = [(r["op"], r["shape"], r["name"], r.get("error"), r.get("max_abs_err")) for r in recs if not r["correct"]]
    assert not bad, bad
    assert doc["skipped_for_deadline"] == 0 and not doc["errors"]
    for op in OPS:
        mine = [r for r in recs if r["op"] == op]
        names = " | ".join(r["name"] for r in mine)
        for feature in ("gemv", "tile", " tma", " persist", "split2", "split3", "split1", " ws"):
            assert feature in names, f"{op}: no measured config with {feature!r}"
        assert {r["shape"] for r in mine} == {"c0", "c3"}
        assert all(r["us"] > 0 for r in mine)
        assert set(doc["best"][op]) == {"c0", "c3"}
    assert stdout.strip().splitlines()[-1].startswith("no peer ratio")   # the table comes last


@pytest.mark.slow
def test_baked_table_is_the_fastest_correct_config_per_shape(tuned, tmp_path):
    out, doc, _ = tuned
    kdir = tmp_path / "kernels"
    for op in OPS:
        (kdir / op).mkdir(parents=True)
        shutil.copy(KERNELS / op / "dispatch.py", kdir / op / "dispatch.py")
    done = subprocess.run([sys.executable, str(SCRIPTS / "bake_dispatch.py"), str(out / "tune.json"),
                           "--kernels", str(kdir)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    for op in OPS:
        src = (kdir / op / "dispatch.py").read_text()
        assert check_source(src).ok
        assert sum(ln.startswith("AKA_PARAMS = {") for ln in src.splitlines()) == 1
        mod = _load(kdir / op / "dispatch.py", f"_baked_{op}")
        assert "tune.json" in mod._TABLE_SOURCE and doc["env"]["triton"] in mod._TABLE_SOURCE
        assert len(mod._TABLE) == 2
        for sid, row in doc["best"][op].items():
            fastest = min((r for r in doc["records"] if r["op"] == op and r["shape"] == sid and r["correct"]),
                          key=lambda r: r["us"])
            assert mod.pick_config(row["M"], row["N"], row["K"]) == fastest["config"]


def _write_tune(path, records):
    path.write_text(json.dumps({"env": {"gpu": "NVIDIA H200", "torch": "t", "triton": "3.6.0", "git_sha": "abc",
                                        "date": "d", "timing": "graph"}, "records": records}))


def _rec(M, us, correct=True, error=None, bm=64):
    cfg = {"path": "tile", "BM": bm, "BN": 64, "BK": 64, "GROUP": 8, "SPLIT_K": 1, "num_warps": 4,
           "num_stages": 3, "TMA": 0, "PERSIST": 0, "WS": 0, "OCC": 1}
    r = {"op": "gemm_bf16", "shape": str(M), "M": M, "N": 256, "K": 512, "config": cfg, "correct": correct, "us": us}
    if error:
        r["error"] = error
    return r


def test_bake_never_takes_an_incorrect_or_failed_config(tmp_path):
    (tmp_path / "gemm_bf16").mkdir()
    shutil.copy(KERNELS / "gemm_bf16" / "dispatch.py", tmp_path / "gemm_bf16" / "dispatch.py")
    _write_tune(tmp_path / "t.json", [_rec(8, 1.0, correct=False, bm=16), _rec(8, 2.0, error="OutOfResources", bm=32),
                                      _rec(8, 5.0, bm=64), _rec(8, 9.0, bm=128)])
    done = subprocess.run([sys.executable, str(SCRIPTS / "bake_dispatch.py"), str(tmp_path / "t.json"),
                           "--kernels", str(tmp_path), "--ops", "gemm_bf16"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    mod = _load(tmp_path / "gemm_bf16" / "dispatch.py", "_baked_adv")
    assert [(r[0], r[3]["BM"]) for r in mod._TABLE] == [(8, 64)]


def test_bake_refuses_bad_input_with_one_line(tmp_path):
    (tmp_path / "gemm_bf16").mkdir()
    (tmp_path / "gemm_bf16" / "dispatch.py").write_text("_TABLE = []\n")   # no markers
    _write_tune(tmp_path / "t.json", [_rec(8, 5.0)])
    cases = [[str(tmp_path / "t.json"), "--kernels", str(tmp_path)], [str(tmp_path / "missing.json")]]
    _write_tune(tmp_path / "none.json", [_rec(8, 1.0, correct=False)])
    shutil.copy(KERNELS / "gemm_bf16" / "dispatch.py", tmp_path / "ok.py")
    (tmp_path / "k2" / "gemm_bf16").mkdir(parents=True)
    shutil.copy(KERNELS / "gemm_bf16" / "dispatch.py", tmp_path / "k2" / "gemm_bf16" / "dispatch.py")
    cases.append([str(tmp_path / "none.json"), "--kernels", str(tmp_path / "k2")])
    for argv in cases:
        done = subprocess.run([sys.executable, str(SCRIPTS / "bake_dispatch.py"), *argv, "--ops", "gemm_bf16"],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, (argv, done.stdout, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1 and done.stderr.startswith("bake_dispatch: ")
    assert (tmp_path / "k2" / "gemm_bf16" / "dispatch.py").read_text() == (tmp_path / "ok.py").read_text()


H100 = "NVIDIA H100 80GB HBM3"


@pytest.mark.parametrize("op", OPS)
def test_a_tune_from_another_gpu_bakes_that_gpus_table_and_leaves_the_default(op, tmp_path):
    """An H100 tune must not replace the H200's rows: it writes _GPU_TABLES[H100] (seeded from the
    default table's rows under --merge), which pick_config takes only for that GPU."""
    sys.path.insert(0, str(SCRIPTS))
    import bake_dispatch as bd
    kdir = tmp_path / op
    kdir.mkdir()
    src = (KERNELS / op / "dispatch.py").read_text()   # the default table alone (no GPU has its own yet)
    gpu, tables = bd.current_tables(src)
    head, rest = src.split(bd.BEGIN)
    (kdir / "dispatch.py").write_text(head + bd.render(gpu, {None: tables[None]}) + rest.split(bd.END)[1])
    before = _load(kdir / "dispatch.py", f"_gpu_before_{op}")
    assert before._GPU_TABLES == {}
    M, N, K, old = before._TABLE[3]
    cfg = {**old, "BM": 32, "num_stages": 5}
    rec = {"op": op, "shape": "x", "M": M, "N": N, "K": K, "config": cfg, "correct": True, "us": 7.5}
    env = {"gpu": H100, "torch": "t", "triton": "3.6.0", "git_sha": "abc", "date": "d", "timing": "graph"}
    (tmp_path / "h100.json").write_text(json.dumps({"env": env, "records": [rec]}))

    def bake(name, *extra):
        done = subprocess.run([sys.executable, str(SCRIPTS / "bake_dispatch.py"), str(tmp_path / name),
                               "--kernels", str(tmp_path), "--ops", op, *extra], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert f"table of {H100}" in bake("h100.json", "--merge")
    mod = _load(kdir / "dispatch.py", f"_gpu_after_{op}")
    assert mod._TABLE == before._TABLE and mod._TABLE_SOURCE == before._TABLE_SOURCE
    assert mod._TABLE_GPU == before._TABLE_GPU == "NVIDIA H200"
    h = mod._GPU_TABLES[H100]
    assert [r[:3] for r in h] == [r[:3] for r in before._TABLE]
    assert [r for r in h if r[:3] != (M, N, K)] == [r for r in before._TABLE if r[:3] != (M, N, K)]
    assert f"{len(h) - 1} rows not measured there kept from the default table (NVIDIA H200)" in mod._GPU_TABLE_SOURCES[H100]
    assert mod.pick_config(M, N, K, H100) == cfg
    assert mod.pick_config(M, N, K) == old and mod.pick_config(M, N, K, "NVIDIA L40S") == old
    assert check_source((kdir / "dispatch.py").read_text()).ok
    # the default GPU's tune rewrites _TABLE and keeps the H100's table; the H100's alone replaces its own
    (tmp_path / "h200.json").write_text(json.dumps({"env": {**env, "gpu": "NVIDIA H200"},
                                                    "records": [{**rec, "config": {**old, "num_warps": 8}}]}))
    assert "table of default (NVIDIA H200)" in bake("h200.json", "--merge")
    bake("h100.json")
    mod = _load(kdir / "dispatch.py", f"_gpu_again_{op}")
    assert mod.pick_config(M, N, K) == {**old, "num_warps": 8} and len(mod._TABLE) == len(before._TABLE)
    assert mod._GPU_TABLES[H100] == [(M, N, K, cfg)]


def test_table_block_round_trips_through_the_parser():
    sys.path.insert(0, str(SCRIPTS))
    import bake_dispatch as bd
    cfg = {"path": "tile", "BM": 64}
    tables = {None: ("src a", [(1, 2, 3, cfg, 4.5)]), H100: ("src 'b'", [(8, 16, 32, cfg, None), (9, 16, 32, cfg, 2.0)])}
    block = bd.render("NVIDIA H200", tables)
    src = "x = 1\n" + block + "\ny = 2\n"
    assert bd.current_tables(src) == ("NVIDIA H200", tables)
    ns = {}
    exec(block, ns)
    assert ns["_GPU_TABLES"][H100][0] == (8, 16, 32, cfg) and ns["_GPU_TABLE_SOURCES"][H100] == "src 'b'"
    # a block from before per-GPU tables names its GPU only in the source: taken from there
    old = src.replace("_TABLE_GPU = 'NVIDIA H200'\n", "").replace("'src a'", "'t.json: NVIDIA H200, torch 2.11'")
    assert bd.current_tables(old)[0] == "NVIDIA H200"


@pytest.mark.parametrize("op", OPS)
def test_nearest_row_weights_m_most(op):
    mod = _load(KERNELS / op / "dispatch.py", f"_pick_{op}")
    a, b, c = ({"path": "tile", "tag": t} for t in "abc")
    saved = list(mod._TABLE)
    try:
        mod._TABLE[:] = [(1, 4096, 4096, a), (64, 4096, 4096, b), (4096, 4096, 4096, c)]
        assert mod.pick_config(1, 4096, 4096) is a
        assert mod.pick_config(2, 128256, 4096) is a        # N far away, M close: still the M=1 row
        assert mod.pick_config(48, 8192, 2048) is b
        assert mod.pick_config(32768, 512, 512) is c
        mod._TABLE[:] = []
        assert mod.pick_config(1, 4096, 4096)["path"] == "gemv"
        assert mod.pick_config(8192, 4096, 4096)["path"] == "tile"
    finally:
        mod._TABLE[:] = saved


@pytest.mark.slow
@pytest.mark.parametrize("op", OPS)
def test_a_table_of_gpu_grid_configs_passes_the_harness_on_small_shapes(op, tmp_path):
    """After the device run every small shape takes some bench shape's row: whichever GPU-grid
    config it is (TMA, persistent, split, GEMV), the baked file is an ordinary passing candidate.
    Rows take each bench shape's last grid config (the times are placeholders: this checks the
    baker and the dispatch, not speed)."""
    from aka.evaluate.api import EvalConfig, evaluate
    sys.path.insert(0, str(SCRIPTS))
    import gpu_tune_gemm as tune
    shapes = json.loads((REPO_ROOT / "bench" / "ops" / op / "shapes.json").read_text())
    records = []
    for sid, s in shapes.items():
        kw = s["input_kwargs"]
        grid = tune.fp8_grid(kw["M"]) if op != "gemm_bf16" else tune.bf16_grid(kw["M"])
        records.append({"op": op, "shape": sid, **kw, "config": grid[-1], "correct": True, "us": 1.0})
    (tmp_path / "t.json").write_text(json.dumps({"env": {}, "records": records}))
    (tmp_path / op).mkdir()
    shutil.copy(KERNELS / op / "dispatch.py", tmp_path / op / "dispatch.py")
    done = subprocess.run([sys.executable, str(SCRIPTS / "bake_dispatch.py"), str(tmp_path / "t.json"),
                           "--kernels", str(tmp_path), "--ops", op], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    mod = _load(tmp_path / op / "dispatch.py", f"_baked_grid_{op}")
    assert len(mod._TABLE) == len(shapes)
    res = evaluate(op, tmp_path / op / "dispatch.py", shapes="small", config=EvalConfig(device="cpu", seed=11))
    assert res.status == "pass", res.reason


@pytest.mark.slow
@pytest.mark.parametrize("op", OPS)
def test_every_committed_gpu_table_row_passes_the_harness_on_small_shapes(op, tmp_path):
    """On a CPU the kernel takes its default table (no GPU name), so a config that only another GPU's
    table holds never runs in CI by itself: each one is made the whole table of a copy, which then
    serves every small shape, and judged."""
    from aka.evaluate.api import EvalConfig, evaluate
    mod = _load(KERNELS / op / "dispatch.py", f"_gpu_tables_{op}")
    assert mod._GPU_TABLES, f"{op}: no per-GPU table committed"
    default = [r[3] for r in mod._TABLE]
    only_there = []
    for gpu in sorted(mod._GPU_TABLES):
        only_there += [r[3] for r in mod._GPU_TABLES[gpu] if r[3] not in default and r[3] not in only_there]
    assert only_there, f"{op}: the GPU tables hold no config of their own"
    src = (KERNELS / op / "dispatch.py").read_text()
    for n, cfg in enumerate(only_there):
        (tmp_path / str(n) / op).mkdir(parents=True)
        copy = tmp_path / str(n) / op / "dispatch.py"
        copy.write_text(src + f"\n_TABLE = [(1, 1, 1, {cfg!r})]\n")
        res = evaluate(op, copy, shapes="small", config=EvalConfig(device="cpu", seed=5))
        assert res.status == "pass", (cfg, res.reason)


FIXUP_SCRIPT = r"""
import json, sys, torch
from aka.evaluate.interp_fix import install
install()
from aka.evaluate.loader import import_file
k = import_file(sys.argv[1], "_gemm_fixup")
for case in json.loads(sys.argv[2]):
    torch.manual_seed(5)
    M, N, K = case["mnk"]
    if case.get("fp8"):   # fp8_block_scaled_gemm: 1x128 activation and 128x128 weight scales
        args = (torch.randn(M, K).to(torch.float8_e4m3fn), torch.rand(M, K // 128) + 0.5,
                torch.randn(N, K).to(torch.float8_e4m3fn), torch.rand(N // 128, K // 128) + 0.5)
        want = None
    else:
        args = (torch.randn(M, K, dtype=torch.bfloat16), torch.randn(N, K, dtype=torch.bfloat16))
        want = args[0].float() @ args[1].float().T
    two_pass = k.gemm(*args, case["cfg"], fixup=False)
    fused = k.gemm(*args, case["cfg"], fixup=True)
    again = k.gemm(*args, case["cfg"], fixup=True)
    cnt = k._COUNTERS.get(two_pass.device)
    ok = (torch.equal(fused, two_pass) and torch.equal(again, fused) and cnt is not None and int(cnt.abs().sum()) == 0
          and (want is None or torch.allclose(fused.float(), want, rtol=2e-2, atol=0.25)))
    print(json.dumps({"case": case, "ok": ok}), flush=True)
"""


def test_split_k_fixup_is_bit_identical_to_the_reduce_launch_and_resets_its_tickets():
    """The last split of a tile sums every split's partial in split order (fused) exactly as the
    second launch does; the ticket counters are zero after every call (programs run in a shuffled
    order under the interpreter, so the last to arrive varies). Both dispatch kernels, the pointer
    and TMA paths, persistent or not."""
    from tests.interp_cases import assert_cases_pass
    tile = {"path": "tile", "BK": 32, "GROUP": 2, "num_warps": 4, "num_stages": 2, "WS": 0, "OCC": 1}
    cases = [{"mnk": [37, 72, 200], "cfg": dict(tile, BM=16, BN=32, SPLIT_K=3, TMA=0, PERSIST=1)},
             {"mnk": [37, 72, 200], "cfg": dict(tile, BM=16, BN=32, SPLIT_K=2, TMA=0, PERSIST=0)},
             {"mnk": [40, 64, 256], "cfg": dict(tile, BM=16, BN=32, SPLIT_K=4, TMA=1, PERSIST=1)},
             {"mnk": [9, 96, 160], "cfg": dict(tile, BM=16, BN=64, SPLIT_K=0, TMA=1, PERSIST=0)}]
    assert_cases_pass(FIXUP_SCRIPT, KERNELS / "gemm_bf16" / "dispatch.py", cases, timeout=600)
    fp8 = dict(tile, BM=16, BN=64, OCC=1)
    cases = [{"fp8": 1, "mnk": [19, 256, 512], "cfg": dict(fp8, SPLIT_K=4, TMA=0, PERSIST=1)},
             {"fp8": 1, "mnk": [19, 256, 512], "cfg": dict(fp8, SPLIT_K=0, TMA=1, PERSIST=0)}]
    assert_cases_pass(FIXUP_SCRIPT, KERNELS / "fp8_block_scaled_gemm" / "dispatch.py", cases, timeout=600)
