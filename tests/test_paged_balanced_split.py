"""paged_decode_attention/balanced_split: the work-balanced schedule against the op's reference under
the Triton interpreter (whose programs run in a shuffled order, so the last-to-arrive merge of
FUSED 1 meets other orders than program id order), and its grid in scripts/gpu_tune_attn.py.

tests/test_kb_kernels.py runs the default configuration on the op's small shapes; here the schedule's
three cases are forced with a small SM count (`SMS`, the unit of WAVES): a sequence wholly inside one
program (stored in bf16 directly), a sequence split over several programs (partials and a merge, fused
or by the combine launch), and a program whose tile range spans several sequences, with a
one-token sequence among them. Each case runs twice: FUSED 1 must leave its tickets at zero, so the
second call gives the same output."""
import json
import sys

from aka.problem import REPO_ROOT
from tests.interp_cases import assert_cases_pass

OP = "paged_decode_attention"
KERNEL = REPO_ROOT / "knowledge_base" / "kernels" / OP / "balanced_split.py"

SCRIPT = r"""
import json, sys, torch
from aka.evaluate.interp_fix import install
install()
from aka.evaluate.compare import compare_outputs
from aka.evaluate.loader import import_file
from aka.problem import load_problem
prob = load_problem("paged_decode_attention")
sys.path.insert(0, "bench/ops/paged_decode_attention")
from input import _make_inputs
from reference import Model
kern = import_file(sys.argv[1], "_paged_balanced")
args = ("q", "key_cache", "value_cache", "block_tables", "seq_lens")
for case in json.loads(sys.argv[2]):
    torch.manual_seed(11)
    kern.SMS = case["sms"]
    inputs = _make_inputs(**case["shape"], device="cpu")
    if "lens" in case:                        # explicit ragged lengths within the table's width
        inputs["seq_lens"] = torch.tensor(case["lens"], dtype=torch.int32)
    scale = case["shape"]["head_dim"] ** -0.5
    want = Model(scale)(**inputs)
    cfg = dict(kern.AKA_PARAMS, **case["cfg"])
    got = kern.attention(*[inputs[a] for a in args], scale, cfg)
    again = kern.attention(*[inputs[a] for a in args], scale, cfg)   # FUSED 1 left its tickets at zero
    worst, _ = compare_outputs(got, want, prob.meta)
    ok = worst.ok and torch.equal(got, again)
    print(json.dumps({"case": case, "ok": ok, "reason": worst.reason}), flush=True)
"""

GQA = {"batch": 5, "max_seq_len": 90, "num_q_heads": 8, "num_kv_heads": 2, "head_dim": 32}
ODD = {"batch": 3, "max_seq_len": 70, "num_q_heads": 6, "num_kv_heads": 2, "head_dim": 40}   # G 3 -> G2 4
CASES = [
    # 1 SM x WAVES 1 / 2 KV heads: one program per KV head holds every sequence whole (n == 1 stores)
    {"shape": GQA, "sms": 2, "cfg": {"WAVES": 1, "BN": 16}},
    # few programs over many tiles: ranges that span sequences and sequences over several programs
    {"shape": GQA, "sms": 6, "cfg": {"WAVES": 1, "BN": 16, "FUSED": 1}},
    {"shape": GQA, "sms": 6, "cfg": {"WAVES": 1, "BN": 16, "FUSED": 0}},
    # more programs than tiles: one tile each, every sequence merged from several partials
    {"shape": GQA, "sms": 132, "cfg": {"WAVES": 2, "BN": 32, "FUSED": 1}},
    {"shape": ODD, "sms": 132, "cfg": {"WAVES": 1, "BN": 16, "FUSED": 0, "num_stages": 2}},
    {"shape": ODD, "sms": 4, "cfg": {"WAVES": 1, "BN": 64, "FUSED": 1}, "lens": [70, 1, 33]},
]


def test_schedule_cases_match_the_reference_under_the_interpreter():
    assert_cases_pass(SCRIPT, KERNEL, CASES, timeout=600)


def test_program_count_and_stages():
    from aka.evaluate.loader import import_file
    k = import_file(KERNEL, "_paged_bs_plain")
    cfg = dict(k.AKA_PARAMS)                                   # BN 32, WAVES 2
    assert k.num_programs(cfg, 128, 1, 4096) == 2 * 132        # WAVES x SMS when tiles are plenty
    assert k.num_programs(cfg, 128, 8, 4096) == 33             # shared by the KV heads
    assert k.num_programs(cfg, 1, 8, 64) == 2                  # never more programs than tiles
    assert k.stages(dict(cfg, num_stages=4), 128, 256) == 2    # D 256 at BN 128: buffers cut to fit
    assert k.stages(dict(cfg, num_stages=4), 32, 128) == 4


def test_tuner_grid_fits_the_kernel_and_the_budget():
    sys.path.insert(0, str(REPO_ROOT))
    from scripts import gpu_tune_attn as tune
    from aka.evaluate.loader import import_file
    k = import_file(KERNEL, "_paged_bs_grid")
    shapes = json.loads((REPO_ROOT / "bench" / "ops" / OP / "shapes.json").read_text())
    for s in shapes.values():
        cfgs = tune.grid(OP, s["input_kwargs"], "balanced_split")
        assert 0 < len(cfgs) <= 24
        assert all(set(c) == set(k.AKA_PARAMS) for c in cfgs)
        assert len({json.dumps(c, sort_keys=True) for c in cfgs}) == len(cfgs)


DISPATCH_KERNEL = REPO_ROOT / "knowledge_base" / "kernels" / OP / "split_dispatch.py"
BALANCED = {"path": "balanced", "BN": 32, "WAVES": 2, "FUSED": 1, "num_warps": 4, "num_stages": 4}


def test_split_dispatch_balanced_path_matches_the_reference_under_the_interpreter():
    """split_dispatch carries balanced_split's schedule as its "balanced" path: the cases that
    merge partials (fused and by the combine launch) and span sequences, through its attention()."""
    cases = [dict(c, cfg=dict(BALANCED, **c["cfg"])) for c in (CASES[1], CASES[2], CASES[5])]
    assert_cases_pass(SCRIPT, DISPATCH_KERNEL, cases, timeout=600)


def test_split_dispatch_routes_table_entries_by_path(monkeypatch):
    from aka.evaluate.loader import import_file
    import torch
    k = import_file(DISPATCH_KERNEL, "_paged_sd_route")
    calls = []
    monkeypatch.setattr(k, "attention_balanced", lambda *a, **kw: calls.append("balanced") or "b")
    monkeypatch.setattr(k, "_decode_split", type("L", (), {"__getitem__": lambda self, g: (
        lambda *a, **kw: calls.append("split"))})())
    q = torch.zeros(2, 4, 32, dtype=torch.bfloat16)
    cache = torch.zeros(3, 16, 2, 32, dtype=torch.bfloat16)
    bt = torch.zeros(2, 3, dtype=torch.int32)
    lens = torch.tensor([20, 40], dtype=torch.int32)
    key = k.shape_key(q, cache, bt)
    monkeypatch.setattr(k, "DISPATCH", {key: dict(BALANCED)})
    assert k.ModelNew(0.1)(q, cache, cache, bt, lens) == "b"
    monkeypatch.setattr(k, "DISPATCH", {key: {"SPLIT_TOKENS": 64, "WAVES": 1, "BN": 16, "num_warps": 4,
                                              "num_stages": 2}})
    k.ModelNew(0.1)(q, cache, cache, bt, lens)               # one split covers the width: no combine
    assert calls == ["balanced", "split"]
    # every table entry names a path the kernel has, with that path's keys
    for cfg in k.DISPATCH.values():
        want = set(BALANCED) if cfg.get("path") == "balanced" else set(k.AKA_PARAMS)
        assert set(cfg) == want, cfg


def test_split_dispatch_grid_interleaves_both_paths():
    sys.path.insert(0, str(REPO_ROOT))
    from scripts import gpu_tune_attn as tune
    shapes = json.loads((REPO_ROOT / "bench" / "ops" / OP / "shapes.json").read_text())
    for s in shapes.values():
        cfgs = tune.grid(OP, s["input_kwargs"])
        paths = [c.get("path", "split") for c in cfgs]
        assert paths[:2] == ["split", "balanced"]              # both ranked first, cut alike
        assert {"split", "balanced"} == set(paths)
        assert len({json.dumps(c, sort_keys=True) for c in cfgs}) == len(cfgs)
