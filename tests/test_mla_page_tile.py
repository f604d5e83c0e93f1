"""mla_decode_attention/page_tile: its three load paths (TMA descriptors, one pointer slab per
page, the per-token gather when BN does not divide the block size), partial last tiles, fixed
and automatic context splits, against the op's reference under the Triton interpreter; cache rows
no valid token reaches are filled with NaN so a path that lets them into P @ c fails. Its grid
in scripts/gpu_tune_attn.py (--kernels page_tile) runs end to end on the CPU.

tests/test_kb_kernels.py runs the default configuration (and each declared value alone) on the
op's small shapes; here the paths are forced one by one.
"""
import json
import os
import subprocess
import sys

from aka.problem import REPO_ROOT
from tests.interp_cases import assert_cases_pass

OP = "mla_decode_attention"
KERNEL = REPO_ROOT / "knowledge_base" / "kernels" / OP / "page_tile.py"

SCRIPT = r"""
import json, sys, torch
from aka.evaluate.interp_fix import install
install()
from aka.evaluate.compare import compare_outputs
from aka.evaluate.loader import import_file
from aka.problem import load_problem
prob = load_problem("mla_decode_attention")
sys.path.insert(0, "bench/ops/mla_decode_attention")
from input import _make_inputs
from reference import Model
kern = import_file(sys.argv[1], "_mla_page_tile")
args = ("q_nope", "q_pe", "kv_c_and_k_pe", "block_tables", "seq_lens")
for case in json.loads(sys.argv[2]):
    torch.manual_seed(11)
    inputs = _make_inputs(**case["shape"], device="cpu")
    kv, bt, lens = inputs["kv_c_and_k_pe"], inputs["block_tables"], inputs["seq_lens"]
    P = kv.shape[1]
    live = torch.zeros(kv.shape[:2], dtype=torch.bool)
    for b, n in enumerate(lens.tolist()):
        for t in range(n):
            live[bt[b, t // P], t % P] = True
    want = Model(case["scale"])(**dict(inputs, kv_c_and_k_pe=torch.where(live[..., None], kv, 0.0)))
    kv[~live] = float("nan")          # stale rows: must never reach the output
    cfg = dict(kern.AKA_PARAMS, **case["cfg"])
    used = {"bn": cfg["BN"]}
    used["paged"] = P % used["bn"] == 0
    used["tma"] = bool(cfg["TMA"]) and used["paged"] and kern.tma_ok(kv, kv.shape[2] - inputs["q_pe"].shape[2], 2)
    used["peel"] = cfg["BH"] >= 64
    got = kern.attention(*[inputs[a] for a in args], case["scale"], cfg)
    worst, _ = compare_outputs(got, want, prob.meta)
    print(json.dumps({"case": case, "used": used, "ok": worst.ok and not bool(torch.isnan(got).any()),
                      "reason": worst.reason}), flush=True)
"""

S = 192 ** -0.5
WIDE = {"batch": 2, "max_seq_len": 75, "num_heads": 70, "block_size": 16, "kv_lora_rank": 64, "rope_dim": 16}
ODD = {"batch": 3, "max_seq_len": 70, "num_heads": 5, "block_size": 32, "kv_lora_rank": 80, "rope_dim": 24}
GATHER = {"batch": 3, "max_seq_len": 50, "num_heads": 4, "block_size": 24, "kv_lora_rank": 64, "rope_dim": 16}
CASES = [
    {"shape": WIDE, "scale": S, "cfg": {}},                                            # gather: P 16 < BN 64, auto splits
    {"shape": WIDE, "scale": S, "cfg": {"BN": 16}},                                    # TMA page tiles, auto splits
    {"shape": WIDE, "scale": S, "cfg": {"BN": 16, "TMA": 0, "SPLIT_TOKENS": 32}},     # pointer slab, 3 splits
    {"shape": WIDE, "scale": S, "cfg": {"BH": 16, "num_warps": 4, "SPLIT_TOKENS": 4096}},  # one split: direct bf16
    {"shape": ODD, "scale": S, "cfg": {"BN": 32, "SPLIT_TOKENS": 64}},                # TMA, padded 80 / 24 columns
    {"shape": ODD, "scale": S, "cfg": {"BN": 16, "TMA": 0, "WAVES": 4}},
    {"shape": GATHER, "scale": S, "cfg": {"BN": 16, "SPLIT_TOKENS": 16}},              # 16 does not divide 24
    {"shape": ODD, "scale": S, "cfg": {"BH": 16, "BN": 32, "num_warps": 4, "SPLIT_TOKENS": 64}},  # one masked loop, TMA
    {"shape": GATHER, "scale": S, "cfg": {"BH": 16, "BN": 16, "TMA": 0, "num_warps": 4}},       # one masked loop, gather
]


def test_load_paths_match_the_reference_and_keep_stale_rows_out():
    rows = assert_cases_pass(SCRIPT, KERNEL, CASES, timeout=600)
    paths = [(r["used"]["tma"], r["used"]["paged"]) for r in rows]
    assert (True, True) in paths and (False, True) in paths and (False, False) in paths  # each path ran
    assert {r["used"]["peel"] for r in rows} == {True, False}                            # both loop shapes
    assert not rows[0]["used"]["paged"] and rows[1]["used"]["tma"] and rows[4]["used"]["bn"] == 32


def test_tiles_stay_inside_pages():
    from aka.evaluate.loader import import_file
    k = import_file(KERNEL, "_mla_pt_plain")
    cfg = dict(k.AKA_PARAMS)                                                # WAVES 1: 132 programs wanted
    assert k.split_tokens(cfg, 1, 2, 32768, 64) == 256                      # 2 head blocks x 128 splits >= 132
    assert k.split_tokens(dict(cfg, SPLIT_TOKENS=1000), 4, 2, 32768, 64) == 960   # rounded to whole tiles
    assert k.split_tokens(cfg, 1, 1, 64, 64) == 64                          # never below one tile
    assert k.split_tokens(cfg, 512, 2, 64, 64) == 4096                      # enough programs: one split


def test_tuner_grid_fits_the_kernel():
    sys.path.insert(0, str(REPO_ROOT))
    from scripts import gpu_tune_attn as tune
    from aka.evaluate.loader import import_file
    k = import_file(KERNEL, "_mla_pt_grid")
    shapes = json.loads((REPO_ROOT / "bench" / "ops" / OP / "shapes.json").read_text())
    for s in shapes.values():
        cfgs = tune.grid(OP, s["input_kwargs"], "page_tile")
        assert 0 < len(cfgs) <= 12
        assert all(set(c) == set(k.AKA_PARAMS) for c in cfgs)
        assert len({json.dumps(c, sort_keys=True) for c in cfgs}) == len(cfgs)
        if s["input_kwargs"]["num_heads"] == 128:
            assert cfgs[0] == {**k.AKA_PARAMS}                    # the default is tried first


def test_tuner_runs_page_tile_beside_the_dispatch_kernel(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    p = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "gpu_tune_attn.py"), str(tmp_path), "--device", "cpu",
                        "--ops", OP, "--kernels", "split_dispatch,page_tile", "--shapes", "s0",
                        "--max-configs", "1", "--deadline", "600"],
                       capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=900)
    assert p.returncode == 0, p.stderr[-2000:]
    doc = json.loads((tmp_path / "tune_attn.json").read_text())
    assert not doc["errors"], doc["errors"]
    assert {r["kernel"] for r in doc["other_records"]} == {"page_tile"}
    assert all(r["correct"] for r in doc["records"] + doc["other_records"])
    assert "speedup over split_dispatch" in p.stdout
    # its winners go into its own table (--kernel), never into split_dispatch's
    kb = tmp_path / "kb"
    (kb / "kernels" / OP).mkdir(parents=True)
    for name in ("page_tile", "split_dispatch"):
        (kb / "kernels" / OP / f"{name}.py").write_text((KERNEL.parent / f"{name}.py").read_text())
    bake = [sys.executable, str(REPO_ROOT / "scripts" / "bake_dispatch_attn.py"), "--kb", str(kb), "--allow-cpu",
            str(tmp_path / "tune_attn.json")]
    b = subprocess.run(bake + ["--kernel", "page_tile"], capture_output=True, text=True, cwd=REPO_ROOT, timeout=120)
    assert b.returncode == 0, b.stderr
    from aka.evaluate.loader import import_file
    baked = import_file(kb / "kernels" / OP / "page_tile.py", "_mla_pt_baked")
    committed = import_file(KERNEL, "_mla_pt_committed")
    new = {r["key"]: r["config"] for r in doc["other_records"]}
    want = {**committed.DISPATCH, **new}   # the measured keys replaced, the committed table's others kept
    assert baked.DISPATCH == want and all(set(c) == set(baked.AKA_PARAMS) for c in new.values())
    assert (kb / "kernels" / OP / "split_dispatch.py").read_text() == (KERNEL.parent / "split_dispatch.py").read_text()
    assert subprocess.run(bake + ["--kernel", "column_split"], capture_output=True, cwd=REPO_ROOT,
                          timeout=120).returncode == 2                 # no record of it: refused, nothing written
