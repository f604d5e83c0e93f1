"""top_k_top_p_filter/tail_compact and tail_scatter under the Triton interpreter: the compacted-tail path (mode 1)
and its exact bisection path (mode 2, forced by a tiny CAP) both equal the op's reference, on the
op's small shapes and on rows built to hit the edges: ties at the k-th value and at the nucleus
edge, -inf entries (masked vocabulary), a flat row whose nucleus is most of the row, k = 1,
p <= 0, and both filters off.

tests/test_kb_kernels.py runs the default configuration (and each declared value alone) on the
small shapes; here the paths are forced and the inputs are chosen."""
import pytest

from aka.problem import REPO_ROOT
from tests.interp_cases import assert_cases_pass

OP = "top_k_top_p_filter"
KERNELS = REPO_ROOT / "knowledge_base" / "kernels" / OP

CASES = r"""
import importlib.util, json, sys, torch
from aka.evaluate.interp_fix import install
install()
from aka.evaluate.loader import import_file
from aka.problem import REPO_ROOT
op = REPO_ROOT / "bench" / "ops" / "top_k_top_p_filter"
mods = {}
for name in ("reference", "input"):
    sp = importlib.util.spec_from_file_location(name + "_tc", op / (name + ".py"))
    mods[name] = importlib.util.module_from_spec(sp)
    sp.loader.exec_module(mods[name])
kern = import_file(sys.argv[1], "_tail_compact_cases")

def edge_rows():
    torch.manual_seed(11)
    V = 700
    x = torch.randn(8, V) * 5.0
    x[0, :40] = 40.0                    # a 40-way tie at the top: k = 10 keeps all 40
    x[1, 100:400] = float("-inf")       # a masked vocabulary
    x[2] = torch.randn(V) * 0.01        # flat: the nucleus is most of the row
    x[3, 5] = 30.0                      # one dominant token
    x[4, :3] = 40.0                     # three tied top tokens, p = 0.6 ends inside the tie: all 3 kept
    k = torch.tensor([10, 50, V, V, V, 1, V, 3])
    p = torch.tensor([1.0, 0.9, 0.8, 0.5, 0.6, 0.7, 1.0, 0.0])
    return {"logits": x, "top_k": k, "top_p": p}

for case in json.loads(sys.argv[2]):
    kern.AKA_PARAMS = dict(kern.AKA_PARAMS, **case["cfg"])
    if case["rows"] == "edges":
        inputs = edge_rows()
    else:
        torch.manual_seed(case["seed"])
        inputs = mods["input"]._make_inputs(*case["rows"], device="cpu")
    want = mods["reference"].Model()(**inputs)
    got = kern.ModelNew()(**inputs)
    same_mask = torch.equal(torch.isinf(got), torch.isinf(want))
    ok = same_mask and torch.equal(got[~torch.isinf(got)], want[~torch.isinf(want)])
    print(json.dumps({"case": case, "ok": bool(ok),
                      "kept": (~torch.isinf(got)).sum(1).tolist(), "want": (~torch.isinf(want)).sum(1).tolist()}),
          flush=True)
"""


# tail_scatter at its coarsest bins: its two-sided top-p mass bound and its per-element atomic
# compaction (candidates in any order) are what differ from tail_compact
@pytest.mark.parametrize("kernel,bins", [("tail_compact", 512), ("tail_scatter", 64)])
def test_compacted_tail_and_bisection_paths_match_the_reference(kernel, bins):
    tail = {"BLOCK": 128, "TARGET_PROGS": 16, "BINS": bins}         # several slices a row, mode 1
    bisect = {"BLOCK": 128, "TARGET_PROGS": 16, "CAP": 16}          # most rows exceed CAP: mode 2
    cases = [{"rows": rows, "seed": seed, "cfg": cfg}
             for rows, seed in ((["5", "1531"], 5), ("edges", 0))
             for cfg in (tail, bisect)]
    for c in cases:                                                  # JSON-able shapes
        if isinstance(c["rows"], list):
            c["rows"] = [int(v) for v in c["rows"]]
    rows = assert_cases_pass(CASES, KERNELS / f"{kernel}.py", cases, timeout=900)
    edges = [r for r in rows if r["case"]["rows"] == "edges"]
    assert all(r["kept"][0] == 40 and r["kept"][4] == 3 and r["kept"][6] == 700 for r in edges), edges
