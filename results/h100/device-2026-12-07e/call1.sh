#!/usr/bin/env bash
# The session's second call, either card.
# On an H200 (AKA_CALL_S seconds, default 480): the GEMM dispatch kernels' verify first, then fused_moe
# grouped_dispatch's all-shape verify, then kb verify of what has no verdict on the card.
# On an H100: call 1 timed the flex peers of paged and softcap decode (as 2026-12-07c's call 1 had), but the
# kernels beside them were never timed in 527 s: four ops at once, and MLA's flex peer still in its
# first stage when the deadline came. Here paged and softcap alone, two jobs, the kernels' compiles off the lock.
#   OUT=$OUT bash results/h100/device-2026-12-07d/call2.sh   (carry .gpucache and .whl)
set -uo pipefail
T0=$(date +%s)
CALL_S=${AKA_CALL_S:-480}
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  # the GEMM dispatch kernels' stale H200 verdicts first (the suite figure's largest item: 0.455 with
  # them stale, 0.543 before), then fused_moe grouped_dispatch over all shapes, then what has no verdict
  ( . scripts/device_lib.sh; OUT=$OUT/g; mkdir -p $OUT; call_begin 110; kb_copy /tmp/kbv
    KBV_BUDGET=0 kbv 95 2 --op gemm_bf16,fp8_block_scaled_gemm --first gemm_bf16,fp8_block_scaled_gemm
    kbv_pack
    cp -r /tmp/kbv/results/kb/kernels/. results/kb/kernels/ )
  L=$(( CALL_S - ($(date +%s) - T0) ))
  (( L > 200 )) && AKA_MOE_NO_BASELINES=1 AKA_DEADLINE_S=$(( L - 10 )) OUT=$OUT/a bash scripts/gpu_moe_verify.sh
  L=$(( CALL_S - ($(date +%s) - T0) ))
  (( L > 90 )) && AKA_DEADLINE_S=$L OUT=$OUT/b bash results/h100/device-2026-12-06g/call_rest.sh
else
  AKA_PEER_OPS=${AKA_PEER_OPS:-paged_decode_attention,softcap_window_decode_attention} AKA_PEER_UNLOCK=1 \
    AKA_PEER_JOBS=2 AKA_DEADLINE_S=$CALL_S bash scripts/gpu_peers.sh
fi
echo "call wall $(( $(date +%s) - T0 ))"
