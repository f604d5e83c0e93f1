#!/usr/bin/env bash
# The session's second call (either card), after call 1 (../../h200/device-2026-12-08/call1.sh) ran on an H100:
# 1. rope_interleaved/strided_pairs alone through `aka eval`, every shape: call 1's kb verify rejected it (it
#    passed on the H200 on 2026-12-03) and the record and log with the reason were lost to the nested pack_out.
# 2. The judge's GPU tests (escapes with the static check bypassed, the honest candidate end to end, forged
#    samples, the host-bound candidate on its one-call graph): none finished in call 1's 240 s.
# 3. The GPU adversarial cases call 1 did not reach (its 17 passed are deselected).
# 4. fused_moe at its expert-parallel shapes beside the fixed grouped_mm peer (this rank's pairs only).
#   OUT=$OUT bash results/h100/device-2026-12-08/call2.sh   (carry .gpucache and .whl); all in $OUT/out.tgz
set -uo pipefail
. scripts/device_lib.sh
T0=$(date +%s); DEADLINE=${AKA_CALL_S:-530}
device_env; use_xdist; trap pack_out EXIT
device_provenance > "$OUT/provenance.txt" 2>&1; cat "$OUT/provenance.txt"
timeout --signal=INT --kill-after=10 100 python3 -m aka.cli eval rope_interleaved \
  knowledge_base/kernels/rope_interleaved/strided_pairs.py --shapes all --device cuda --no-peer \
  --json "$OUT/strided_pairs.json" > "$OUT/strided_pairs.log" 2>&1
echo "[strided_pairs rc=$? $(( $(date +%s) - T0 ))s]"; grep -v "━" "$OUT/strided_pairs.log" | grep -i "pass\|reject\|incorrect\|claims\|floor" | head -5
XD=(); python3 -c "import xdist" 2>/dev/null && XD=(-n 4)
timeout --signal=INT --kill-after=8 170 python3 -m pytest -m gpu -v "${XD[@]}" -p no:cacheprovider -rA \
  --junitxml="$OUT/junit_judge.xml" tests/gpu/test_judge_gpu.py \
  "tests/gpu/test_measurement_gpu.py::test_an_honest_host_bound_candidate_is_timed_on_the_gpu_and_passes_the_judges_clock" \
  > "$OUT/judge_tests.log" 2>&1
echo "[judge tests rc=$? $(( $(date +%s) - T0 ))s]"; grep -E "PASSED|FAILED|ERROR" "$OUT/judge_tests.log" | sed 's/.*\(PASSED\|FAILED\|ERROR\)/\1/' | sort | uniq -c | head -20
DONE=(atomic_partial_sum atrex_fused_add_rms_norm decorative_kernel huge_allocation illegal_memory_access kb_linear_relu
      kb_linear_relu_reordered kernel_body_torch matmul pre_run_hook_fallback race_program_order rms_norm side_stream
      softmax_rows topk_ids vec_add vendor_named_kernels)
DES=(); for n in "${DONE[@]}"; do DES+=(--deselect "tests/test_adversarial.py::test_gpu_verdict[$n]"); done
B=$(( $(left) - 150 )); (( B > 140 )) && B=140
(( B > 40 )) && timeout --signal=INT --kill-after=8 $B python3 -m pytest -m gpu -v -n 8 -p no:cacheprovider -rA \
  --junitxml="$OUT/junit_adv.xml" "tests/test_adversarial.py::test_gpu_verdict" "${DES[@]}" > "$OUT/adversarial.log" 2>&1
echo "[adversarial rc=$? $(( $(date +%s) - T0 ))s]"; grep -cE "PASSED" "$OUT/adversarial.log"; grep -E "FAILED|ERROR " "$OUT/adversarial.log" | head
mkdir -p "$OUT/moe"
(( $(left) > 60 )) && AKA_CACHE_DIR=/tmp/cache_moe AKA_PEER_OPS=fused_moe AKA_PEER_SHAPES="fused_moe=14,6,13,7,15" \
  AKA_PEER_UNLOCK=1 AKA_PEER_JOBS=1 AKA_DEADLINE_S=$(( $(left) - 10 )) OUT=$OUT/moe bash scripts/gpu_peers.sh > "$OUT/moe.log" 2>&1
echo "[moe rc=$? $(( $(date +%s) - T0 ))s]"; tail -3 "$OUT/moe.log"
echo "call wall $(( $(date +%s) - T0 ))"
