"""Peers on the GPU: checked, then timed by the shape's method in the same rounds as the candidate
(peer_us, speedup_peer), and a peer that only a GPU runs (blockwise fp8 scaled_mm) either passes the
check or says why not."""
import pytest

from aka.evaluate.api import EvalConfig, evaluate, evaluate_baselines
from aka.problem import REPO_ROOT


def test_cublas_peer_is_timed_beside_a_candidate_by_the_shapes_method(record):
    cand = sorted((REPO_ROOT / "knowledge_base" / "kernels" / "gemm_bf16").glob("*.py"))[0]
    res = evaluate("gemm_bf16", cand, shapes="0,9", config=EvalConfig(device="cuda", seed=3, baselines=False))
    record("peer_gemm_candidate", status=res.status, reason=res.reason[:300], peer=res.env.get("peer"),
           shapes=[{"id": s.id, "time_us": s.time_us, "peer_us": s.peer_us, "speedup_peer": s.speedup_peer,
                    "methods": s.baseline_methods, "method": s.timing_method} for s in res.shapes])
    assert res.status == "pass", res.reason
    assert res.env["peer"]["name"] == "LinearPeer"
    for s in res.shapes:
        assert s.peer_status == "pass" and s.peer_us and s.peer_us > 0
        assert s.speedup_peer == s.peer_us / s.time_us
        assert s.baseline_methods["peer"] == s.timing_method  # one method per shape


# one test per op, so that a device call can take the ones a cut-off call left (the flex_attention
# peers compile per shape: on 2026-12-06 the loop over all twelve passed 200 s at l2_norm)
GPU_ONLY = ("fp8_block_scaled_gemm", "fused_moe", "prefill_attention", "paged_decode_attention",
            "softcap_window_decode_attention", "mla_decode_attention", "l2_norm", "gated_rms_norm",
            "gated_delta_rule_decode", "causal_conv1d", "rope_neox", "rope_interleaved")


@pytest.mark.parametrize("op", GPU_ONLY)
def test_gpu_only_peers_are_checked_or_say_why(record, op):
    res = evaluate_baselines(op, shapes="small", config=EvalConfig(device="cuda", seed=4, baselines=False))
    record("peer_baselines", op=op, status=res.status, peer=res.env.get("peer"),
           shapes=[{"id": s.id, "peer_status": s.peer_status, "reason": s.peer_reason[:200], "peer_us": s.peer_us}
                   for s in res.shapes])
    for s in res.shapes:
        # torch's blockwise recipes take whole 128-blocks only: the odd small fp8 shapes raise, said
        # and fla's gated RMSNorm has no gate-first form (gated_rms_norm's Mamba2 shapes)
        # and flex_attention takes no 8-token pages (the small shapes' s2)
        flex = op in ("paged_decode_attention", "softcap_window_decode_attention", "mla_decode_attention")
        allowed = ("pass", "error") if op in ("fp8_block_scaled_gemm", "gated_rms_norm") or flex else ("pass",)
        assert s.peer_status in allowed, (op, s.id, s.peer_status, s.peer_reason)
        if op == "gated_rms_norm" and s.peer_status == "error":
            assert "before the gate" in s.peer_reason
        if flex and s.peer_status == "error":
            assert "at least 16 tokens" in s.peer_reason, (op, s.id, s.peer_reason)
        assert (s.peer_us is not None) == (s.peer_status == "pass"), (op, s.id)
        if s.peer_status == "error":
            assert s.peer_reason


@pytest.mark.parametrize("op, shapes", [("paged_decode_attention", "0,2"), ("mla_decode_attention", "0,5")])
def test_flex_paged_peer_on_a_bench_shape(record, op, shapes):
    """The paged decode peer (compiled flex_attention over the pool with a page-granular block
    mask) on a large bench shape: checked against the reference and timed. Written 2026-12-05 on a
    CPU; its first GPU run says whether compiled flex decoding takes 16-token KV blocks."""
    res = evaluate_baselines(op, shapes=shapes, config=EvalConfig(device="cuda", seed=4))
    record("peer_flex_paged", op=op, status=res.status, peer=res.env.get("peer"),
           shapes=[{"id": s.id, "peer_status": s.peer_status, "reason": s.peer_reason[:300], "peer_us": s.peer_us,
                    "compile_us": s.compile_us, "eager_us": s.eager_us} for s in res.shapes])
    for s in res.shapes:
        assert s.peer_status == "pass" and s.peer_us and s.peer_us > 0, (s.id, s.peer_status, s.peer_reason)
