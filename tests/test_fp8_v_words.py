"""fp8_kv_decode_attention/v_words under the Triton interpreter: its e4m3 widening is exact for every
byte that is not NaN (in the low and the high half of a word), and the kernel matches the op's
reference with forced splits, both PV_HILO settings and pipelined V on the op's odd small shapes.

tests/test_kb_kernels.py runs the default configuration (and each declared value alone) on the
small shapes; here the splits are forced so the combine runs on every shape."""
from aka.problem import REPO_ROOT
from tests.interp_cases import REFERENCE_CASES, assert_cases_pass

OP = "fp8_kv_decode_attention"
KERNEL = REPO_ROOT / "knowledge_base" / "kernels" / OP / "v_words.py"

WIDEN = r"""
import json, sys, torch
import triton, triton.language as tl
from aka.evaluate.interp_fix import install
install()
from aka.evaluate.loader import import_file
kern = import_file(sys.argv[1], "_v_words_widen")

@triton.jit
def widen(w_ptr, o_ptr, BN: tl.constexpr, D: tl.constexpr):
    r = tl.arange(0, BN)[:, None]
    w = tl.load(w_ptr + r * (D // 2) + tl.arange(0, D // 2)[None, :])
    tl.store(o_ptr + r * D + tl.arange(0, D)[None, :], kern._widen_e4m3_words(w, BN, D))

for case in json.loads(sys.argv[2]):
    b = torch.arange(256, dtype=torch.int32)
    b = b[(b & 0x7F) != 0x7F]                        # e4m3fn NaN (never in a KV cache)
    n = b.numel()                                     # 254 finite bytes: every one low and high
    pairs = torch.stack([b, b.roll(case["roll"])], 1).to(torch.uint8)   # [n, 2] bytes, element 2i low
    pairs = torch.cat([pairs, pairs.new_zeros(256 - n, 2)])             # 256 words: [16, 16] tiles x 2
    words = pairs.view(torch.int16).reshape(16, 16).contiguous()
    out = torch.empty(16, 32, dtype=torch.bfloat16)
    widen[(1,)](words, out, BN=16, D=32)
    want = pairs.view(torch.float8_e4m3fn).to(torch.float32).reshape(16, 32) / 256.0
    ok = torch.equal(out.float(), want)
    print(json.dumps({"case": case, "ok": ok, "bad": int((out.float() != want).sum())}), flush=True)
"""



def test_widening_is_exact_for_every_finite_e4m3_byte():
    assert_cases_pass(WIDEN, KERNEL, [{"roll": 0}, {"roll": 7}, {"roll": 128}], timeout=300)


def test_forced_splits_and_both_pv_settings_match_the_reference():
    cases = [{"op": OP, "shape": s, "cfg": cfg} for s in ("s0", "s1", "s2")
             for cfg in ({"SPLIT_TOKENS": 16, "BN": 16, "PV_HILO": 1, "num_stages": 2},
                         {"SPLIT_TOKENS": 16, "BN": 32, "PV_HILO": 0, "num_warps": 8})]
    rows = assert_cases_pass(REFERENCE_CASES, KERNEL, cases, timeout=600)
    assert all(r["rel_err"] < 2e-3 for r in rows if r["case"]["cfg"]["PV_HILO"]), rows
