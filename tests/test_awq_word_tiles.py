"""awq_w4a16_gemm/word_tiles: both of its paths (dequantise in the K loop with and without split-K,
dequantise to scratch then GEMM) against the op's reference, under the Triton interpreter.

tests/test_kb_kernels.py runs the kernel's default configuration on the op's small shapes, which
all take the in-loop path; here the prefill path and fixed splits are forced through AKA_PARAMS,
on shapes with a word count that is not a multiple of the tile's (N 40: 5 words in a 16-word
tile) and a group smaller than the K tile cap (32).
"""

from aka.problem import REPO_ROOT
from tests.interp_cases import assert_cases_pass

KERNEL = REPO_ROOT / "knowledge_base" / "kernels" / "awq_w4a16_gemm" / "word_tiles.py"

SCRIPT = r"""
import json, sys, torch
from aka.evaluate.interp_fix import install
install()
from aka.evaluate.compare import compare_outputs
from aka.evaluate.loader import import_file
from aka.problem import load_problem
prob = load_problem("awq_w4a16_gemm")
sys.path.insert(0, "bench/ops/awq_w4a16_gemm")
from input import _make_inputs
from reference import Model
kern = import_file(sys.argv[1], "_awq_word_tiles")
base = dict(kern.AKA_PARAMS)
for case in json.loads(sys.argv[2]):
    torch.manual_seed(7)
    kern.AKA_PARAMS = dict(base, **case["cfg"])
    inputs = _make_inputs(**case["shape"], device="cpu")
    g = case["shape"]["group_size"]
    want = Model(group_size=g)(**inputs)
    got = kern.ModelNew(group_size=g)(**inputs)
    worst, _ = compare_outputs(got, want, prob.meta)
    print(json.dumps({"case": case, "ok": worst.ok, "reason": worst.reason}), flush=True)
"""

CASES = [
    {"shape": {"M": 3, "K": 256, "N": 40, "group_size": 32}, "cfg": {"SPLIT_K": 1}},     # one launch
    {"shape": {"M": 3, "K": 256, "N": 40, "group_size": 32}, "cfg": {"SPLIT_K": 4}},     # partials + sum
    {"shape": {"M": 20, "K": 128, "N": 48, "group_size": 64}, "cfg": {"SPLIT_K": 0, "BN": 64}},  # auto split
    {"shape": {"M": 20, "K": 128, "N": 48, "group_size": 64},                           # scratch + GEMM
     "cfg": {"PREFILL_M": 0, "P_BM": 16, "P_BN": 64, "P_BK": 32}},
]


def test_both_paths_match_the_reference_under_the_interpreter():
    assert_cases_pass(SCRIPT, KERNEL, CASES, timeout=300)


def test_split_choice_fills_the_gpu_and_keeps_two_k_tiles_per_split():
    from aka.evaluate.loader import import_file
    k = import_file(KERNEL, "_awq_wt_plain")
    p = dict(k.AKA_PARAMS)
    # M 1, N 6144 at BN 128: 48 tiles; K 4096 in 32 tiles of 128 -> 8 splits (384 programs, 4 tiles each)
    assert k.splits(p, 48, 32) == 8
    # enough tiles already: no split
    assert k.splits(p, 296, 28) == 1
    # few K tiles: the split stops before a part would hold fewer than two
    assert k.splits(p, 10, 8) == 4
    assert k.splits(p, 10, 3) == 1
    assert k.splits(dict(p, SPLIT_K=4), 10, 2) == 2        # a fixed split never exceeds the K tiles
    assert k.group_tile(128) == 128 and k.group_tile(32) == 32 and k.group_tile(96) == 32
