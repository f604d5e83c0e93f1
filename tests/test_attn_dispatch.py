"""The attention dispatch kernels (knowledge_base/kernels/*/{flash,split}_dispatch.py), their
tuner (scripts/gpu_tune_attn.py) and baker (scripts/bake_dispatch_attn.py), on the CPU.

The small bench shapes have head dims 24-80, so they never take the TMA path (power-of-two D
only) nor a GQA group padded to a power of two with packing; the interpreter runs here cover
those on odd shapes of their own, with a zero-length sequence and forced multi-split decode."""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
KB = REPO / "knowledge_base" / "kernels"

_INTERP_CHECK = r'''
import json, sys
import torch
from aka.evaluate.interp_fix import install
install()
import importlib.util
from aka.evaluate.compare import compare_outputs

def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); return m

op, kernel, cfgs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
ref = load(f"bench/ops/{op}/reference.py", "ref").Model
meta = json.load(open(f"bench/ops/{op}/meta.json"))
kern = load(kernel, "kern")
torch.manual_seed(7)
if op == "prefill_attention":
    lens = [5, 0, 17, 9]                        # a zero-length sequence among ragged ones
    cu = torch.zeros(len(lens) + 1, dtype=torch.int32); cu[1:] = torch.cumsum(torch.tensor(lens), 0)
    T = int(cu[-1])
    inputs = {"q": torch.randn(T, 6, 32, dtype=torch.bfloat16), "k": torch.randn(T, 2, 32, dtype=torch.bfloat16),
              "v": torch.randn(T, 2, 32, dtype=torch.bfloat16), "cu_seqlens": cu}
    scale, args = 32 ** -0.5, ("q", "k", "v", "cu_seqlens")
elif op == "paged_decode_attention":
    inputs = load(f"bench/ops/{op}/input.py", "inp")._make_inputs(3, 70, 6, 2, 32, block_size=16, device="cpu")
    scale, args = 32 ** -0.5, ("q", "key_cache", "value_cache", "block_tables", "seq_lens")
else:
    inputs = load(f"bench/ops/{op}/input.py", "inp")._make_inputs(3, 70, 5, block_size=16, kv_lora_rank=64,
                                                                  rope_dim=16, device="cpu")
    scale, args = 80 ** -0.5, ("q_nope", "q_pe", "kv_c_and_k_pe", "block_tables", "seq_lens")
want = ref(scale)(**inputs)
for cfg in cfgs:
    out = kern.attention(*[inputs[a] for a in args], scale, cfg)
    chk, _ = compare_outputs(out, want, meta)
    print(json.dumps({"cfg": cfg, "ok": chk.ok, "rel_err": chk.rel_err, "reason": chk.reason}))
'''


def _interp(op: str, kernel: Path, cfgs: list[dict]) -> list[dict]:
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(REPO))
    p = subprocess.run([sys.executable, "-c", _INTERP_CHECK, op, str(kernel), json.dumps(cfgs)],
                       capture_output=True, text=True, env=env, timeout=900, cwd=REPO)
    rows = [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]
    assert p.returncode == 0 and len(rows) == len(cfgs), p.stderr[-2000:]
    return rows


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def test_prefill_tma_and_packed_tiles_match_reference():
    cfgs = [{"BM": 64, "BN": 32, "PACK": p, "TMA": t, "num_warps": 4, "num_stages": 2}
            for p in (0, 1) for t in (0, 1)]
    rows = _interp("prefill_attention", KB / "prefill_attention" / "flash_dispatch.py", cfgs)
    assert all(r["ok"] for r in rows), rows


def test_paged_decode_fixed_and_auto_splits_match_reference():
    # split 16 on a 70-token context: 5 splits and the combine; auto with WAVES 1 at B*Hkv = 6
    cfgs = [{"SPLIT_TOKENS": 16, "WAVES": 1, "BN": 16, "num_warps": 4, "num_stages": 2},
            {"SPLIT_TOKENS": 0, "WAVES": 1, "BN": 32, "num_warps": 4, "num_stages": 2},
            {"SPLIT_TOKENS": 2048, "WAVES": 1, "BN": 64, "num_warps": 4, "num_stages": 2}]
    rows = _interp("paged_decode_attention", KB / "paged_decode_attention" / "split_dispatch.py", cfgs)
    assert all(r["ok"] for r in rows), rows


def test_mla_decode_fixed_and_auto_splits_match_reference():
    cfgs = [{"BH": 16, "BN": 16, "SPLIT_TOKENS": 16, "WAVES": 1, "num_warps": 4, "num_stages": 2},
            {"BH": 64, "BN": 32, "SPLIT_TOKENS": 0, "WAVES": 2, "num_warps": 8, "num_stages": 2}]
    rows = _interp("mla_decode_attention", KB / "mla_decode_attention" / "split_dispatch.py", cfgs)
    assert all(r["ok"] for r in rows), rows


def test_pick_exact_then_nearest_same_head_dim_then_default():
    mod = _load(KB / "paged_decode_attention" / "split_dispatch.py", "pd_pick")
    table = {"128/32/8/16/8192": {"a": 1}, "128/32/8/128/4096": {"a": 2}, "256/16/2/32/32768": {"a": 3}}
    default = {"a": 0}
    assert mod.pick(table, "128/32/8/16/8192", default) == {"a": 1}
    assert mod.pick(table, "128/32/8/96/4096", default) == {"a": 2}       # nearest batch
    assert mod.pick(table, "256/16/2/1/1024", default) == {"a": 3}        # only D 256 entry
    assert mod.pick(table, "64/8/1/4/512", default) == default            # no D 64 entry
    assert mod.pick({}, "128/32/8/16/8192", default) == default


def _doc(device: str, records: list[dict]) -> dict:
    return {"provenance": {"device": device, "gpu": "TEST-GPU", "date": "2026-12-02T00:00:00Z"},
            "records": records}


def _rec(key, us, correct=True, bn=64):
    return {"op": "paged_decode_attention", "shape": "7", "key": key, "us": us, "correct": correct,
            "ratio": 0.5, "config": {"SPLIT_TOKENS": 0, "WAVES": 2, "BN": bn, "num_warps": 4, "num_stages": 2}}


def test_bake_writes_fastest_correct_config_and_refuses_cpu_runs(tmp_path):
    kb = tmp_path / "kb"
    dst = kb / "kernels" / "paged_decode_attention"
    dst.mkdir(parents=True)
    (dst / "split_dispatch.py").write_text((KB / "paged_decode_attention" / "split_dispatch.py").read_text())
    runs = tmp_path / "a.json"
    # an incorrect config faster than everything must never be baked
    runs.write_text(json.dumps(_doc("cuda", [_rec("128/16/2/64/16384", 90.0, bn=32),
                                             _rec("128/16/2/64/16384", 10.0, correct=False, bn=128),
                                             _rec("128/16/2/64/16384", 80.0, bn=16),
                                             _rec("256/16/2/32/32768", 300.0)])))
    bake = [sys.executable, str(REPO / "scripts" / "bake_dispatch_attn.py"), "--kb", str(kb)]
    p = subprocess.run(bake + [str(runs)], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert p.returncode == 0, p.stderr
    mod = _load(dst / "split_dispatch.py", "pd_baked")
    assert mod.DISPATCH["128/16/2/64/16384"]["BN"] == 16
    assert mod.DISPATCH["256/16/2/32/32768"]["BN"] == 64
    assert "80.0 us" in (dst / "split_dispatch.py").read_text()
    # a second bake keeps entries it does not measure
    more = tmp_path / "b.json"
    more.write_text(json.dumps(_doc("cuda", [_rec("128/32/8/1/32768", 40.0)])))
    assert subprocess.run(bake + [str(more)], capture_output=True, cwd=REPO, timeout=120).returncode == 0
    mod = _load(dst / "split_dispatch.py", "pd_baked2")
    shipped = set(_load(KB / "paged_decode_attention" / "split_dispatch.py", "pd_shipped").DISPATCH)  # H200-baked
    assert set(mod.DISPATCH) == shipped | {"128/16/2/64/16384", "256/16/2/32/32768", "128/32/8/1/32768"}
    # ... with their provenance comments: the first bake's measurement survives the second
    text = (dst / "split_dispatch.py").read_text()
    assert "80.0 us" in text and "300.0 us" in text and "40.0 us" in text
    cpu = tmp_path / "c.json"
    cpu.write_text(json.dumps(_doc("cpu", [_rec("128/16/2/64/16384", 1.0)])))
    p = subprocess.run(bake + [str(cpu)], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert p.returncode == 2 and "not a GPU run" in p.stderr


@pytest.mark.parametrize("op", ["paged_decode_attention"])
def test_tune_script_end_to_end_on_cpu(tmp_path, op):
    """The GPU script's whole path (inputs, reference, grid, compare, timing stub, JSON, table)
    through the interpreter on the small shapes, one config each, then baked (--allow-cpu) into
    a copy of the kernel."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    p = subprocess.run([sys.executable, str(REPO / "scripts" / "gpu_tune_attn.py"), str(tmp_path), "--device", "cpu",
                        "--ops", op, "--max-configs", "1", "--deadline", "600"],
                       capture_output=True, text=True, env=env, cwd=REPO, timeout=900)
    assert p.returncode == 0, p.stderr[-2000:]
    doc = json.loads((tmp_path / "tune_attn.json").read_text())
    assert doc["provenance"]["device"] == "cpu" and not doc["errors"], doc["errors"]
    assert len(doc["records"]) == 3 and all(r["correct"] for r in doc["records"])
    assert set(doc["best"][op]) == {"s0", "s1", "s2"}
    assert all(r["ratio"] is None for r in doc["records"])       # no ratio without a GPU calibration
    kb = tmp_path / "kb"
    (kb / "kernels" / op).mkdir(parents=True)
    (kb / "kernels" / op / "split_dispatch.py").write_text((KB / op / "split_dispatch.py").read_text())
    bake = [sys.executable, str(REPO / "scripts" / "bake_dispatch_attn.py"), "--kb", str(kb),
            str(tmp_path / "tune_attn.json")]
    assert subprocess.run(bake, capture_output=True, cwd=REPO, timeout=120).returncode == 2
    assert subprocess.run(bake + ["--allow-cpu"], capture_output=True, cwd=REPO, timeout=120).returncode == 0
    baked = _load(kb / "kernels" / op / "split_dispatch.py", "baked_e2e")
    shipped = set(_load(KB / op / "split_dispatch.py", "shipped_e2e").DISPATCH)  # the H200-baked entries stay
    assert set(baked.DISPATCH) == shipped | {b["key"] for b in doc["best"][op].values()}
