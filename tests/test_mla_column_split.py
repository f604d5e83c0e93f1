"""mla_decode_attention/column_split: its column parts (NS 1 and 2), head blocks of 64 and 128, fixed
and automatic context splits (the combine with a per-part LSE) against the op's reference under
the Triton interpreter, and its grid in scripts/gpu_tune_attn.py (--kernels) end to end on the CPU.

tests/test_kb_kernels.py runs the default configuration (and each declared value alone) on the
op's small shapes (3-7 heads); here a shape with more heads than one block (70 heads: a partial
second block of 64) and a 576-like split of latent and rope widths (64 + 16) is added, with
configs that force several splits.
"""
import json
import os
import subprocess
import sys

from aka.problem import REPO_ROOT
from tests.interp_cases import assert_cases_pass

OP = "mla_decode_attention"
KERNEL = REPO_ROOT / "knowledge_base" / "kernels" / OP / "column_split.py"

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
kern = import_file(sys.argv[1], "_mla_column_split")
args = ("q_nope", "q_pe", "kv_c_and_k_pe", "block_tables", "seq_lens")
for case in json.loads(sys.argv[2]):
    torch.manual_seed(7)
    inputs = _make_inputs(**case["shape"], device="cpu")
    scale = 80 ** -0.5
    want = Model(scale)(**inputs)
    got = kern.attention(*[inputs[a] for a in args], scale, dict(kern.AKA_PARAMS, **case["cfg"]))
    worst, _ = compare_outputs(got, want, prob.meta)
    print(json.dumps({"case": case, "ok": worst.ok, "reason": worst.reason}), flush=True)
"""

WIDE = {"batch": 2, "max_seq_len": 40, "num_heads": 70, "block_size": 16, "kv_lora_rank": 64, "rope_dim": 16}
ODD = {"batch": 3, "max_seq_len": 70, "num_heads": 5, "block_size": 16, "kv_lora_rank": 80, "rope_dim": 24}
CASES = [
    {"shape": WIDE, "cfg": {}},                                                   # default: NS 2, auto splits
    {"shape": WIDE, "cfg": {"SPLIT_TOKENS": 16, "WAVES": 1}},                     # 3 splits + combine per part
    {"shape": WIDE, "cfg": {"BH": 128, "num_warps": 8, "SPLIT_TOKENS": 4096}},    # one split: bf16 stored directly
    {"shape": WIDE, "cfg": {"NS": 1, "BH": 32, "BN": 32, "SPLIT_TOKENS": 16}},
    {"shape": ODD, "cfg": {"BN": 32, "num_stages": 1, "SPLIT_TOKENS": 32}},       # padded 80 -> 2 x 64 columns
    {"shape": ODD, "cfg": {"NS": 1, "WAVES": 4}},
]


def test_column_parts_and_splits_match_the_reference_under_the_interpreter():
    assert_cases_pass(SCRIPT, KERNEL, CASES, timeout=600)


def test_split_choice_counts_the_column_parts():
    from aka.evaluate.loader import import_file
    k = import_file(KERNEL, "_mla_cs_plain")
    cfg = dict(k.AKA_PARAMS)                       # BH 64, NS 2, WAVES 2: 264 programs wanted
    # batch 64, 128 heads: 64 x 2 head blocks x 2 parts = 256 programs -> the 4096-token context in 2
    assert k.split_tokens(cfg, 64 * 2 * 2, 4096) == 2048
    assert k.split_tokens(dict(cfg, WAVES=1), 64 * 2 * 2, 4096) == 4096
    assert k.split_tokens(cfg, 1 * 2 * 2, 32768) == 256          # batch 1: 128 splits x 4 programs
    assert k.split_tokens(dict(cfg, SPLIT_TOKENS=1024), 4, 32768) == 1024


def test_tuner_grid_fits_the_kernel_and_the_budget():
    sys.path.insert(0, str(REPO_ROOT))
    from scripts import gpu_tune_attn as tune
    from aka.evaluate.loader import import_file
    k = import_file(KERNEL, "_mla_cs_grid")
    shapes = json.loads((REPO_ROOT / "bench" / "ops" / OP / "shapes.json").read_text())
    for s in shapes.values():
        cfgs = tune.grid(OP, s["input_kwargs"], "column_split")
        assert 0 < len(cfgs) <= 24
        assert all(set(c) == set(k.AKA_PARAMS) for c in cfgs)
        assert len({json.dumps(c, sort_keys=True) for c in cfgs}) == len(cfgs)
        if s["input_kwargs"]["num_heads"] == 128:
            assert cfgs[0] == {**k.AKA_PARAMS}                    # the default is tried first
    assert tune.grid(OP, shapes["3"]["input_kwargs"]) == tune.grid(OP, shapes["3"]["input_kwargs"], "split_dispatch")


def test_tuner_runs_both_kernels_and_keeps_the_other_out_of_the_baked_records(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    p = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "gpu_tune_attn.py"), str(tmp_path), "--device", "cpu",
                        "--ops", OP, "--kernels", "split_dispatch,column_split", "--shapes", "s0,s2",
                        "--max-configs", "1", "--deadline", "600"],
                       capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=900)
    assert p.returncode == 0, p.stderr[-2000:]
    doc = json.loads((tmp_path / "tune_attn.json").read_text())
    assert not doc["errors"], doc["errors"]
    assert {r["kernel"] for r in doc["records"]} == {"split_dispatch"} and len(doc["records"]) == 2
    assert {r["kernel"] for r in doc["other_records"]} == {"column_split"} and len(doc["other_records"]) == 2
    assert all(r["correct"] for r in doc["records"] + doc["other_records"])
    assert set(doc["other_best"][OP]["column_split"]) == set(doc["best"][OP]) == {"s0", "s2"}
    assert "speedup over split_dispatch" in p.stdout
