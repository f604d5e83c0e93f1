#!/usr/bin/env bash
# The next session's first call, either card: what this session's one call (call1.sh) left.
# 1. The judge's escapes and the whole GPU adversarial suite (pytest -m gpu -n 8, now -v so a budget cut
#    still names each verdict), with the host-bound candidate test as mended after call 1 beside them.
# 2. With the time left: on an H200, 07d's queue (../device-2026-12-07d/call2.sh: the GEMM and fp8 dispatch
#    verify, fused_moe grouped_dispatch, kernels with no H200 verdict); on an H100, 07f's next call
#    (fused_moe beside its peer at shapes 14, 15 and 3, then ops with no H100 verdict).
#   bash scripts/pre_device.sh here; on the device: OUT=$OUT bash results/h100/device-2026-12-07g/next_call.sh
#   (carry .gpucache and .whl); results in $OUT/judge.tgz and $OUT/q/out.tgz
set -uo pipefail
T0=$(date +%s)
CALL_S=${AKA_CALL_S:-570}
AKA_T_COST=0 AKA_T_COST1=0 AKA_T_KBCOST=0 AKA_T_TIMING=0 AKA_T_KBV=0 AKA_T_PAR=${AKA_T_PAR:-330} AKA_PYTEST_N=8 \
  AKA_PAR_TESTS="tests/gpu/test_measurement_gpu.py::test_an_honest_host_bound_candidate_is_timed_on_the_gpu_and_passes_the_judges_clock tests/gpu/test_judge_gpu.py tests/test_adversarial.py" \
  OUT=$OUT bash scripts/gpu_judge_accept.sh > "$OUT/judge_accept.log" 2>&1
echo "[judge accept rc=$? $(( $(date +%s) - T0 ))s]"; grep '^\[' "$OUT/judge_accept.log"
L=$(( CALL_S - ($(date +%s) - T0) - 10 ))
mkdir -p "$OUT/q"
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  (( L > 120 )) && AKA_CALL_S=$L OUT=$OUT/q bash results/h100/device-2026-12-07d/call2.sh > "$OUT/q/queue.log" 2>&1
else
  (( L > 120 )) && AKA_CALL_S=$L AKA_MOE_S=$(( L / 2 )) OUT=$OUT/q bash results/h100/device-2026-12-07f/next_call.sh > "$OUT/q/queue.log" 2>&1
fi
tail -5 "$OUT/q/queue.log" 2>/dev/null
( cd "$OUT/q" && tar czf ../q.tgz . ) && rm -rf "$OUT/q"
echo "call wall $(( $(date +%s) - T0 ))"
