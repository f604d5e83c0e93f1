"""Peers as a baseline (aka/peers, aka/evaluate/peers.py, `aka bench run --impl peer`, `aka bench
peers`): the peers that run on a CPU are checked here against their reference, wrong ones are
rejected and recorded, the GPU-only ones say why they did not run."""
import json
import shutil

import pytest

from aka.bench.run import load_records, retryable
from aka.cli import main
from aka.evaluate.api import EvalConfig, evaluate_baselines
from aka.peers import PeerError, library_version, peer_class, peer_of
from aka.problem import BENCH_OPS, load_problem


def _ops():
    return sorted(p.name for p in BENCH_OPS.iterdir() if (p / "meta.json").exists())


@pytest.mark.parametrize("op", _ops())
def test_every_op_names_its_peer_or_says_why_not(op):
    meta = json.loads((BENCH_OPS / op / "meta.json").read_text())
    assert "peer" in meta, f"{op}: meta.json has no peer field"
    info = peer_of(meta)
    if info is None:
        assert len(meta.get("peer_why", "")) > 20, f"{op}: peer null without a reason"
        return
    cls = peer_class(info)  # the named class exists (importing it imports no GPU library)
    assert callable(getattr(cls, "forward", None)) and info.what


def test_a_malformed_peer_entry_is_a_clear_error():
    with pytest.raises(PeerError, match="module:Class"):
        peer_of({"peer": {"impl": "no_colon", "library": "torch"}})
    with pytest.raises(PeerError):
        peer_of({"peer": "cuBLAS"})


@pytest.mark.parametrize("op", ["gemm_bf16", "prefill_attention", "fused_moe", "softmax", "paged_decode_attention",
                                "softcap_window_decode_attention", "mla_decode_attention"])
def test_cpu_peers_pass_the_candidates_check_against_the_reference(op):
    """F.linear, SDPA per sequence, grouped_mm MoE (with EP's -1 ids in s2), torch.softmax and
    flex_attention over the paged pool (eager here; s2 has 8-token pages and no GQA; with soft-cap
    and window for the Gemma op; one 576-wide key head shared by every query head for MLA), on every
    small shape: >= 3 draws, the outlier draw, inputs untouched."""
    res = evaluate_baselines(op, shapes="small", config=EvalConfig(device="cpu", seed=5))
    assert res.env["peer"]["library"] == "torch" and res.env["peer"]["version"] == library_version("torch")
    for s in res.shapes:
        assert s.peer_status == "pass", (s.id, s.peer_reason)
        assert s.peer_rel_err is not None and s.peer_us is None  # checked, never timed on a CPU


def test_gpu_only_peers_say_why_on_a_cpu():
    res = evaluate_baselines("fp8_block_scaled_gemm", shapes="s0", config=EvalConfig(device="cpu"))
    (s,) = res.shapes
    assert s.peer_status == "unavailable" and "CUDA" in s.peer_reason
    assert res.env["peer"]["unavailable"] == s.peer_reason


def _variant(tmp_path, impl: str, name: str):
    """gemm_bf16 under another name with its peer replaced, one small shape."""
    d = tmp_path / "ops" / name
    shutil.copytree(BENCH_OPS / "gemm_bf16", d)
    meta = json.loads((d / "meta.json").read_text())
    meta["name"] = name
    meta["small_shapes"] = {"s2": meta["small_shapes"]["s2"]}
    meta["peer"] = {"impl": impl, "library": "torch", "what": "a test peer"}
    (d / "meta.json").write_text(json.dumps(meta))
    return d


WRONG = {"scaled": ("ScaledLinear", "incorrect", "draw 0"),
         "clamped": ("ClampedLinear", "incorrect", "outlier draw"),
         "mutating": ("MutatingLinear", "incorrect", "modified its input 'x'"),
         "raising": ("RaisingLinear", "error", "peer library refused the shape"),
         "honest": ("HonestLinear", "pass", "")}


def test_a_wrong_peer_is_rejected_recorded_and_not_used(tmp_path):
    for name, (cls, _, _) in WRONG.items():
        _variant(tmp_path, f"tests.fixtures.peers.wrong:{cls}", name)
    out = tmp_path / "run"
    assert main(["bench", "run", "--suite", str(tmp_path / "ops"), "--impl", "peer", "--device", "cpu",
                 "--out", str(out)]) == 0
    rows = {r["op"]: r for r in load_records(out)}
    assert set(rows) == set(WRONG)
    for name, (_, status, why) in WRONG.items():
        r = rows[name]
        assert r["impl"] == "peer" and r["status"] == status and why in r["reason"], (name, r["status"], r["reason"])
        assert r["correct"] == (status == "pass") and r["time_us"] is None
        assert r["peer"] == WRONG[name][0] and r["peer_version"] == library_version("torch")
    assert "| peer |" in (out / "REPORT.md").read_text()


def test_unavailable_peer_records_are_measured_again_on_resume():
    assert retryable({"impl": "peer", "status": "unavailable", "device": "cpu"})
    assert not retryable({"impl": "peer", "status": "incorrect", "device": "cpu"})


def test_ops_without_a_peer_get_no_peer_records(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["bench", "run", "--impl", "peer", "--ops", "moe_sum", "--device", "cpu", "--out", str(out)]) == 0
    assert load_records(out) == [] and "nothing to record" in capsys.readouterr().err


def _rec(impl, shape, t, correct=True, speedup_peer=None, **kw):
    return dict(impl=impl, op="rms_norm", shape=shape, label=f"T={shape}", time_us=t, correct=correct,
                speedup_peer=speedup_peer, peer="RMSNormPeer", peer_library="liger_kernel", peer_version="0.8.5",
                gpu="NVIDIA H200", git_sha="abc", status="pass" if correct else "incorrect", **kw)


def test_peer_table_geomean_worst_shape_and_readme_section(tmp_path):
    from aka.bench.peers import BEGIN, END, markdown, peer_rows, update_readme
    recs = [_rec("peer", "1", 10.0), _rec("peer", "2", 8.0), _rec("peer", "3", 5.0, correct=False, reason="x"),
            _rec("kb", "1", 5.0), _rec("kb", "2", 0.0, speedup_peer=0.5),  # same-round ratio wins
            _rec("kb", "3", 4.0)]
    recs[4]["time_us"] = 16.0
    (row,) = peer_rows(recs)
    assert row["compared"] == 2 and row["shapes"] == 3 and row["peer_failed"] == 1
    assert row["geomean"] == pytest.approx((2.0 * 0.5) ** 0.5) and row["worst"] == 0.5
    assert row["worst_shape"].startswith("2 ")
    md = markdown([row])
    assert "| rms_norm | kb | RMSNormPeer (liger_kernel 0.8.5) | 2/3 | 1.00x | 0.50x 2 (T=2) | 1: incorrect: x | 0 |" in md
    # a kernel the judge failed: not compared, and the table says why
    bad = [_rec("peer", "1", 10.0), _rec("kb", "1", 5.0, correct=False, reason="[correctness] draw 1")]
    (brow,) = peer_rows(bad)
    assert brow["compared"] == 0 and brow["kernel_failed"] == 1
    assert "| 0 | 1: incorrect: [correctness] draw 1 |" in markdown([brow])
    readme = tmp_path / "README.md"
    readme.write_text("# bench\n\ntext\n")
    assert update_readme(readme, md) and update_readme(readme, md) is False  # idempotent
    text = readme.read_text()
    assert text.startswith("# bench\n\ntext\n") and text.count(BEGIN) == 1 and text.count(END) == 1
    assert update_readme(readme, md.replace("1.00x", "1.10x")) and "1.10x" in readme.read_text()


def test_a_peer_recorded_without_its_kernel_is_said_under_the_table():
    """A run cut off before the kernel's turn (results/h100/device-2026-12-07d call 1): no row, but a line."""
    from aka.bench.peers import markdown, peer_only, peer_rows
    recs = [_rec("peer", "1", 10.0), _rec("kb", "1", 5.0)]
    recs += [dict(_rec("peer", s, t, correct=ok), op="softmax", peer="SoftmaxPeer", peer_library="torch")
             for s, t, ok in (("1", 30.0, True), ("2", 10.0, True), ("3", 20.0, True), ("4", 5.0, False))]
    assert [r["op"] for r in peer_rows(recs)] == ["rms_norm"]
    (a,) = peer_only(recs)
    assert (a["op"], a["shapes"], a["passed"], a["timed"], a["median_us"]) == ("softmax", 4, 3, 3, 20.0)
    md = markdown(peer_rows(recs), alone=peer_only(recs))
    assert ("Peer recorded, no kernel beside it (not compared): softmax (SoftmaxPeer torch 0.8.5: passed the "
            "check on 3 of 4 shapes, timed on 3, median 20.0 us).") in md
    assert "not compared" not in markdown(peer_rows(recs))


def test_a_table_merging_two_commits_says_which_each_row_is_from():
    from aka.bench.peers import markdown, peer_rows
    old = [_rec("peer", "1", 10.0, date="2026-12-02T10:00:00"), _rec("kb", "1", 5.0, date="2026-12-02T10:00:00")]
    new = [dict(r, op="layer_norm", git_sha="def", date="2026-12-03T19:00:00") for r in old]
    md = markdown(peer_rows(old) + peer_rows(new))
    assert "git per row" in md and "| measured (git, date) |" in md
    assert "| abc, 2026-12-02 |" in md and "| def, 2026-12-03 |" in md
    assert "measured (git, date)" not in markdown(peer_rows(old))


def test_bench_peers_cli_without_records_is_a_user_error(tmp_path, capsys):
    assert main(["bench", "peers", str(tmp_path)]) == 2
    assert "no records" in capsys.readouterr().err


def test_bench_peers_over_a_stated_subset_of_shapes(tmp_path, capsys):
    """--shapes "op=ids": only those shapes of that op count, the others' ops as they are, and the
    heading says what was kept (fused_moe without its expert-parallel shapes, whose peer wasted work
    until 2026-12-08); a malformed spec or an op with no records is a usage error."""
    run = tmp_path / "run"
    run.mkdir()
    recs = [_rec("peer", "1", 10.0), _rec("kb", "1", 5.0), _rec("peer", "2", 90.0), _rec("kb", "2", 3.0)]
    recs += [dict(r, op="softmax") for r in recs[:2]]
    (run / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert main(["bench", "peers", str(run), "--shapes", "rms_norm=1"]) == 0
    md = capsys.readouterr().out
    assert "shapes kept: rms_norm 1" in md
    assert "| rms_norm | kb | RMSNormPeer (liger_kernel 0.8.5) | 1/1 | 2.00x |" in md
    assert "| softmax | kb |" in md and "| 1/1 | 2.00x |" in md.split("| softmax |")[1]
    assert main(["bench", "peers", str(run)]) == 0
    assert "| 2/2 | 7.75x |" in capsys.readouterr().out          # both shapes: sqrt(2 * 30)
    assert main(["bench", "peers", str(run), "--shapes", "rms_norm"]) == 2
    assert "not OP=ID" in capsys.readouterr().err
    assert main(["bench", "peers", str(run), "--shapes", "gemm_bf16=1"]) == 2
    assert "gemm_bf16" in capsys.readouterr().err


def test_liger_peers_need_a_gpu_or_the_extra():
    prob = load_problem("rms_norm")
    from aka.peers import unavailable
    why = unavailable(peer_of(prob.meta), "cpu")
    assert why and ("GPU" in why or "not installed" in why)


def _fake_fla(monkeypatch):
    """A stand-in `fla` package for a CPU (the real one loads a GPU driver on import): the five
    forward functions the fla peers call, written in torch from fla's documented contracts (shapes,
    layouts, return tuples), so these tests check the peers' own glue: views, argument order,
    grouped heads, dtypes."""
    import sys
    import types

    import torch
    import torch.nn.functional as F

    def l2norm_fwd(x, eps=1e-6, output_dtype=None):
        xf = x.float()
        rstd = torch.rsqrt(xf.pow(2).sum(-1) + eps)
        return (xf * rstd[..., None]).to(output_dtype or x.dtype), rstd

    def layer_norm_gated_fwd(x, g, weight, bias, activation="swish", eps=1e-5, residual=None, out_dtype=None,
                             residual_dtype=None, is_rms_norm=False):
        assert x.dim() == 2 and g.shape == x.shape and is_rms_norm and activation == "swish" and bias is None
        xf = x.float()
        rstd = torch.rsqrt(xf.pow(2).mean(-1) + eps)
        y = xf * rstd[:, None] * weight.float() * F.silu(g.float())
        return y.to(out_dtype or x.dtype), None, rstd, x

    def fused_recurrent_gated_delta_rule(q, k, v, g=None, beta=None, scale=None, initial_state=None,
                                         output_final_state=False, **kw):
        B, T, H, K = q.shape
        HV = v.shape[2]
        assert T == 1 and k.shape == q.shape and g.shape == (B, T, HV) and beta.shape == (B, T, HV)
        scale = K ** -0.5 if scale is None else scale
        rep = lambda t: t[:, 0].float().repeat_interleave(HV // H, dim=1)  # noqa: E731 - GVA
        qq, kk, vv = rep(q), rep(k), v[:, 0].float()
        s = initial_state.float() * torch.exp(g[:, 0].float())[..., None, None]
        d = beta[:, 0].float()[..., None] * (vv - (kk[..., None] * s).sum(-2))
        s = s + kk[..., None] * d[..., None, :]
        o = (qq[..., None] * s).sum(-2) * scale
        return o[:, None].to(q.dtype), (s if output_final_state else None)

    def causal_conv1d(x, weight=None, bias=None, residual=None, initial_state=None, output_final_state=False,
                      activation=None, backend="triton", **kw):
        B, T, D = x.shape                      # any strides, as fla's kernel takes them
        assert D == weight.shape[0], "x must come as [B, T, D]: channels last"
        W = weight.shape[1]
        xp = F.pad(x.float().transpose(1, 2), (W - 1, 0))          # [B, D, T + W - 1]
        y = bias.float()[None, :, None] + sum(weight.float()[None, :, j, None] * xp[:, :, j:j + T] for j in range(W))
        y = F.silu(y) if activation in ("silu", "swish") else y
        return y.transpose(1, 2).contiguous().to(x.dtype), None     # fla's output: [B, T, D] contiguous

    def rotary_embedding(x, cos, sin, interleaved=False, inplace=False, seqlen_offsets=0, cu_seqlens=None, **kw):
        B, T, H, D = x.shape                   # contiguous [B, T, H, D]; tables [TR, D/2] in x's dtype
        assert x.is_contiguous() and cos.shape == sin.shape and cos.shape[0] >= T and 2 * cos.shape[1] == D
        assert x.dtype == cos.dtype == sin.dtype, "Input and cos/sin must have the same dtype"
        c = cos[seqlen_offsets:seqlen_offsets + T].float()[None, :, None]
        s = sin[seqlen_offsets:seqlen_offsets + T].float()[None, :, None]
        xf = x.float()
        if interleaved:
            x0, x1 = xf[..., 0::2], xf[..., 1::2]
            return torch.stack((x0 * c - x1 * s, x1 * c + x0 * s), dim=-1).flatten(-2).to(x.dtype)
        x0, x1 = xf.chunk(2, dim=-1)
        return torch.cat((x0 * c - x1 * s, x1 * c + x0 * s), dim=-1).to(x.dtype)

    mods = {"fla": types.ModuleType("fla"), "fla.modules": types.ModuleType("fla.modules"),
            "fla.modules.rotary": types.SimpleNamespace(rotary_embedding=rotary_embedding),
            "fla.modules.causal_conv1d": types.SimpleNamespace(causal_conv1d=causal_conv1d),
            "fla.modules.norm": types.ModuleType("fla.modules.norm"),
            "fla.modules.norm.l2norm": types.SimpleNamespace(l2norm_fwd=l2norm_fwd),
            "fla.modules.norm.fused_norm_gate": types.SimpleNamespace(layer_norm_gated_fwd=layer_norm_gated_fwd),
            "fla.ops": types.ModuleType("fla.ops"),
            "fla.ops.gated_delta_rule": types.SimpleNamespace(
                fused_recurrent_gated_delta_rule=fused_recurrent_gated_delta_rule)}
    for name, mod in mods.items():
        monkeypatch.setitem(sys.modules, name, mod)


def _ref_and_inputs(op, spec):
    """The op's reference module and one draw of its inputs for a shape, on the CPU."""
    import importlib.util

    import torch
    mods = {}
    for name in ("reference", "input"):
        sp = importlib.util.spec_from_file_location(f"{op}_{name}_peer_test", BENCH_OPS / op / f"{name}.py")
        mods[name] = importlib.util.module_from_spec(sp)
        sp.loader.exec_module(mods[name])
    torch.manual_seed(7)
    return mods["reference"].Model(**spec.init_kwargs), mods["input"]._make_inputs(**spec.input_kwargs, device="cpu")


@pytest.mark.parametrize("op", ["l2_norm", "gated_rms_norm", "gated_delta_rule_decode", "causal_conv1d", "rope_neox",
                                "rope_interleaved"])
def test_fla_peers_hand_the_reference_inputs_to_fla_as_its_functions_take_them(op, monkeypatch):
    """The fla peers (aka/peers/fla.py) against each reference on every small shape, through a
    stand-in of fla's five functions: the right views ([B, 1, H, K] for the decode step, rows for
    the norms, [B, L, C] for the conv, one [1, T, H, D] sequence over the gathered cos/sin rows for
    rotary), grouped value heads, dtypes, tuple and dict outputs. The gate-first shapes of
    gated_rms_norm, which fla has no form for, raise a reason. Not a check of fla itself: on the GPU
    the harness checks the real peer against the reference before timing it."""
    import torch

    from aka.peers import unavailable
    _fake_fla(monkeypatch)
    prob = load_problem(op)
    info = peer_of(prob.meta)
    assert info.library == "fla" and unavailable(info, "cpu")  # the real one never runs on a CPU
    cls = peer_class(info)
    for spec in prob.select("small"):
        ref, inputs = _ref_and_inputs(op, spec)
        peer = cls(ref)
        if op == "gated_rms_norm" and not ref.norm_before_gate:
            with pytest.raises(NotImplementedError, match="before the gate"):
                peer(**inputs)
            continue
        want, got = ref(**inputs), peer(**inputs)
        pairs = ([(want[k], got[k]) for k in want] if isinstance(want, dict)
                 else list(zip(want, got)) if isinstance(want, tuple) else [(want, got)])
        for w, g in pairs:
            assert g.shape == w.shape and g.dtype == w.dtype, (spec.id, g.shape, w.shape, g.dtype)
            assert torch.allclose(g.float(), w.float(), atol=2e-2, rtol=2e-2), (spec.id, (g.float() - w.float()).abs().max())


def test_flex_paged_peer_says_it_takes_no_page_under_16_tokens_on_a_gpu():
    """Compiled flex_attention failed on 8-token pages (the H100, 2026-12-06, small shape s2): on a
    GPU the paged and MLA peers raise a reason instead of an Inductor compile error; a CPU's eager
    flex takes any page."""
    from aka.peers.attention import FlexPagedDecodePeer
    with pytest.raises(NotImplementedError, match="at least 16 tokens"):
        FlexPagedDecodePeer.require_page(8, "cuda")
    FlexPagedDecodePeer.require_page(16, "cuda")
    FlexPagedDecodePeer.require_page(8, "cpu")


def test_flex_paged_peer_rebuilds_its_block_mask_when_the_tables_change():
    """FlexPagedDecodePeer keeps one block mask per (block_tables, seq_lens) as long as neither
    changes; an in-place edit of either (a new decode step) builds a new one, so a stale mask can
    never answer for new tables."""
    import importlib.util

    import torch

    from aka.peers.attention import FlexPagedDecodePeer
    op = BENCH_OPS / "paged_decode_attention"
    spec = importlib.util.spec_from_file_location("paged_inp", op / "input.py")
    inp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(inp)
    ref_spec = importlib.util.spec_from_file_location("paged_ref", op / "reference.py")
    ref_mod = importlib.util.module_from_spec(ref_spec)
    ref_spec.loader.exec_module(ref_mod)
    torch.manual_seed(1)
    d = inp._make_inputs(3, 40, 4, 2, 32, 16, device="cpu")
    ref = ref_mod.Model(32 ** -0.5)
    peer = FlexPagedDecodePeer(ref)
    first = peer(**d)
    bm = peer._masks[-1][-1]
    assert torch.allclose(first.float(), ref(**d).float(), atol=2e-2)
    peer(**d)
    assert peer._masks[-1][-1] is bm and len(peer._masks) == 1     # unchanged inputs: the same mask
    d["seq_lens"][0] -= 5                                           # the next step's lengths, in place
    out = peer(**d)
    assert peer._masks[-1][-1] is not bm
    assert torch.allclose(out.float(), ref(**d).float(), atol=2e-2)
    # equal values in new tensors (a fresh input set, perhaps at a freed set's address) are a
    # new pair: identity, not address, is the key
    d2 = {k: v.clone() for k, v in d.items()}
    peer(**d2)
    assert peer._masks[-1][0] is d2["block_tables"] and len(peer._masks) == 3


@pytest.mark.parametrize("window", [None, 20, 9])
def test_flex_paged_block_lists_cover_exactly_what_the_query_sees(window):
    """The block-sparse lists the compiled kernel walks (a CPU's eager flex applies the mask_mod
    densely, so the correctness check above does not exercise them): per sequence the full
    blocks are the pages whose every position the query sees, the partial ones those it sees in
    part, and nothing else is listed; checked position by position against the definition."""
    from types import SimpleNamespace

    import torch

    from aka.peers.attention import FlexPagedDecodePeer
    torch.manual_seed(3)
    page, batch, max_blocks, spare = 4, 5, 8, 3
    seq = torch.tensor([1, 4, 13, 32, 7], dtype=torch.int32)
    used = (seq.long() + page - 1) // page
    perm = torch.randperm(int(used.sum()) + spare).to(torch.int32)
    tables = torch.zeros(batch, max_blocks, dtype=torch.int32)
    start = 0
    for b, u in enumerate(used.tolist()):
        tables[b, :u] = perm[start:start + u]
        start += u
    nb = int(used.sum()) + spare
    peer = FlexPagedDecodePeer(SimpleNamespace(scale=1.0, softcap=0.0, window=window))
    bm = peer._block_mask(tables, seq, nb, page)
    for b in range(batch):
        L = int(seq[b])
        lo = max(0, L - window) if window is not None else 0
        seen = {int(tables[b, p // page]) for p in range(lo, L)}
        whole = {int(tables[b, j]) for j in range(max_blocks)
                 if j * page >= lo and (j + 1) * page <= L}
        n_full, n_part = int(bm.full_kv_num_blocks[b, 0, 0]), int(bm.kv_num_blocks[b, 0, 0])
        full = bm.full_kv_indices[b, 0, 0, :n_full].tolist()
        part = bm.kv_indices[b, 0, 0, :n_part].tolist()
        assert set(full) == whole and len(full) == len(whole), (b, full, whole)
        assert set(part) == seen - whole and len(part) == len(seen - whole), (b, part, seen - whole)


def test_peer_vs_verdict_script_ratios_drift_and_missing_verdict(tmp_path):
    """scripts/peer_vs_verdict.py: peer-only records against a verdict (indicative), and two runs'
    peer times side by side."""
    import importlib.util
    from aka.problem import REPO_ROOT
    spec = importlib.util.spec_from_file_location("pvv", REPO_ROOT / "scripts" / "peer_vs_verdict.py")
    pvv = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pvv)
    for name, times in (("a", (10.0, 20.0)), ("b", (8.0, 25.0))):
        d = tmp_path / name
        d.mkdir()
        recs = [_rec("peer", str(i), t) for i, t in enumerate(times)] + [_rec("peer", "9", 5.0, correct=False)]
        (d / "records.jsonl").write_text("".join(json.dumps(dict(r, device="cuda")) + "\n" for r in recs))
    a, b = pvv.peer_times([tmp_path / "a"]), pvv.peer_times([tmp_path / "b"])
    assert a == {"rms_norm": {"0": 10.0, "1": 20.0}}            # the incorrect record is not a time
    (d,) = pvv.drift(a, b)
    assert d["n"] == 2 and d["min"] == pytest.approx(0.8) and d["max"] == pytest.approx(1.25)
    assert d["geomean"] == pytest.approx(1.0)
    # an empty knowledge base: no verdict to compare with, and the table says so
    (kb := tmp_path / "kb" / "kernels").mkdir(parents=True)
    rows = pvv.compare(a, kb.parent, "H100")
    assert rows == [{"op": "rms_norm", "kernel": None}]
    md = pvv.markdown(rows, [d], "H100", "a", "b")
    assert "| rms_norm | no current verdict on H100 |" in md and "Indicative only" in md
    assert "| rms_norm | 2 | 1.000 | 0.800-1.250 |" in md
    assert pvv.main([str(tmp_path / "nothing")] + ["--gpu", "H100"]) == 2


def test_runs_merged_for_one_op_pair_within_a_run_and_count_a_shape_once(tmp_path):
    """Two calls on one op (results/h100/device-2026-12-07d and 07e: eight shapes each): a kernel record
    is set against its own run's peer, never the other run's, and a shape in both runs counts once."""
    import json as _json

    from aka.bench.peers import write
    a, b = tmp_path / "a", tmp_path / "b"
    for d, rows in ((a, [_rec("peer", "1", 10.0), _rec("kb", "1", 5.0), _rec("peer", "2", 6.0), _rec("peer", "4", 9.0),
                         _rec("kb", "2", 3.0)]),
                    (b, [_rec("peer", "2", 30.0), _rec("kb", "2", 10.0), _rec("peer", "3", 8.0),
                         _rec("kb", "3", 2.0), _rec("kb", "4", 1.0)])):
        d.mkdir()
        stamp = "2026-12-07T10:00:00" if d == a else "2026-12-07T16:00:00"
        (d / "records.jsonl").write_text("".join(_json.dumps(dict(r, date=stamp)) + "\n" for r in rows))
    md = write([a, b], tmp_path / "P.md", None)
    (row,) = _json.loads((tmp_path / "P.json").read_text())
    # shape 1 from a (2.0), shape 2 from b only (30/10 = 3.0: not a's 6/3, not b's kernel over a's peer 0.6),
    # shape 3 from b (4.0); shape 4's kernel (b) has no peer in its own run: not compared, though a has one
    assert (row["shapes"], row["compared"], row["runs"], row["superseded"]) == (4, 3, 2, 1)
    assert row["geomean"] == pytest.approx((2.0 * 3.0 * 4.0) ** (1 / 3))
    assert "| 3/4 |" in md and "2026-12-07" in md
    assert "rms_norm kb: 2 runs, 1 older records left out" in md


def test_figures_the_harness_noted_as_host_bound_are_named_under_the_table(tmp_path):
    import json as _json

    from aka.bench.peers import write
    note = "host-bound timing: a call took 2700 us on the host"
    rows = [_rec("peer", "1", 10.0), dict(_rec("kb", "1", 5.0), timing_note=note), _rec("peer", "2", 6.0),
            _rec("kb", "2", 3.0), dict(_rec("peer", "3", 8.0), timing_note=note), _rec("kb", "3", 2.0)]
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "records.jsonl").write_text("".join(_json.dumps(r) + "\n" for r in rows))
    md = write([tmp_path / "r"], tmp_path / "P.md", None)
    (row,) = _json.loads((tmp_path / "P.json").read_text())
    assert row["host_bound"] == ["1 (kernel)", "3 (peer)"]
    assert "noted as host-bound" in md and "rms_norm kb: shapes 1 (kernel), 3 (peer)." in md
    (tmp_path / "r" / "records.jsonl").write_text("".join(_json.dumps({k: v for k, v in r.items() if k != "timing_note"})
                                                          + "\n" for r in rows))
    assert "host-bound" not in write([tmp_path / "r"], tmp_path / "Q.md", None)   # none noted: no line


def test_peer_plan_takes_given_shapes_for_the_ops_it_names(tmp_path, capsys):
    """gpu_peers.sh's AKA_PEER_SHAPES reaches the plan itself (plan.txt and plan.json agree)."""
    from aka.problem import REPO_ROOT
    import importlib.util
    import json as _json
    spec = importlib.util.spec_from_file_location("peer_plan", REPO_ROOT / "scripts" / "peer_plan.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    plan = tmp_path / "plan.json"
    assert mod.main([str(tmp_path / "cand"), str(plan), "--ops", "rms_norm,silu_and_mul", "--small",
                     "--shapes", "rms_norm=s1"]) == 0
    assert capsys.readouterr().out.splitlines() == ["rms_norm s1", "silu_and_mul s0,s1,s2"]
    assert {k: v["shapes"] for k, v in _json.loads(plan.read_text()).items()} == {
        "rms_norm": ["s1"], "silu_and_mul": ["s0", "s1", "s2"]}


@pytest.mark.parametrize("sync_elems", [0, 1 << 40])
def test_moe_peer_at_expert_parallel_shapes_drops_other_ranks_pairs_or_masks_them_alike(sync_elems):
    """GroupedMMMoEPeer above SYNC_ELEMS works on this rank's pairs only (one host sync; at DeepSeek-V3
    EP 32 it had combined every T * k row, 16.8x slower than the kernel); below it masks them. Both
    paths against the reference, with ids of -1 (EP 4) and with every pair on another rank."""
    import importlib.util

    import torch

    from aka.peers.dense import GroupedMMMoEPeer

    def load(name):
        spec = importlib.util.spec_from_file_location(f"moe_{name}", BENCH_OPS / "fused_moe" / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    mod, ref = load("input"), load("reference").Model()
    torch.manual_seed(3)
    peer = GroupedMMMoEPeer()
    peer.SYNC_ELEMS = sync_elems
    inp = mod._make_inputs(24, 64, 32, 4, 2, ep_size=4, device="cpu")
    assert (inp["topk_ids"] < 0).any() and (inp["topk_ids"] >= 0).any()
    want = ref(**inp).float()
    got = peer(**inp).float()
    assert torch.allclose(got, want, atol=2e-2, rtol=2e-2), (got - want).abs().max()
    inp["topk_ids"] = torch.full_like(inp["topk_ids"], -1)
    assert torch.count_nonzero(peer(**inp)) == 0 and torch.count_nonzero(ref(**inp)) == 0
