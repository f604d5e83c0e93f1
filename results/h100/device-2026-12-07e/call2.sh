#!/usr/bin/env bash
# The session's second call, either card.
# On an H200 (AKA_CALL_S seconds, default 540): the GEMM dispatch kernels' verify first (their H200
# verdicts went stale with the per-GPU tables: the suite figure 0.455, 0.543 before), then fused_moe
# grouped_dispatch's all-shape verify, then kb verify of what has no verdict on the card (MLA page_tile first).
# On an H100: fused_cross_entropy/chunked_lse LANE 8 beside LANE 1 (one kb verify); fused_moe grouped_dispatch against torch._grouped_mm on the eight large shapes that two
# earlier calls (2026-12-07c and 07d) left without the kernel's time beside the peer's (2,3,6,7,10,11,14,15),
# fused_moe alone; then kb verify of the kernels with no current H100 verdict (page_tile, stale there, first).
#   AKA_CALL_S=540 OUT=$OUT bash results/h100/device-2026-12-07e/call2.sh   (carry .gpucache and .whl)
set -uo pipefail
T0=$(date +%s)
CALL_S=${AKA_CALL_S:-540}
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  # its H200 branch: the GEMM dispatch verify, fused_moe grouped_dispatch over all shapes, call_rest.sh
  AKA_CALL_S=$CALL_S bash results/h100/device-2026-12-07d/call2.sh
else
  # fused_cross_entropy/chunked_lse with 8 logits a lane (LANE 8, committed) beside the one-logit update
  # (LANE 1, what its H200 verdict measured) in one kb verify: the exp2 unit's load halves (offline sm_90a,
  # 16 -> 9 MUFU a thread a step), so the big shapes should move from ~0.74 of the roofline towards DRAM's
  ( . scripts/device_lib.sh; OUT=$OUT/x; mkdir -p $OUT; call_begin 120; kb_copy /tmp/kbx
    K=/tmp/kbx/knowledge_base/kernels/fused_cross_entropy
    python3 scripts/params_variant.py $K/chunked_lse.py LANE=1 \
      | sed 's#^id: kernels/fused_cross_entropy/chunked_lse$#id: kernels/fused_cross_entropy/chunked_lse_lane1#' > $K/chunked_lse_lane1.py
    KBV_DIR=/tmp/kbx KBV_BUDGET=0 kbv 100 3 --op fused_cross_entropy
    kbv_pack /tmp/kbx )
  mkdir -p $OUT/p
  AKA_PEER_OPS=fused_moe AKA_PEER_SHAPES="fused_moe=${AKA_MOE_SHAPES:-2,3,6,7,10,11,14,15}" AKA_PEER_UNLOCK=1 \
    AKA_PEER_JOBS=1 AKA_DEADLINE_S=${AKA_PEER_S:-270} OUT=$OUT/p bash scripts/gpu_peers.sh
  L=$(( CALL_S - ($(date +%s) - T0) ))
  (( L > 90 )) && AKA_DEADLINE_S=$L OUT=$OUT/b bash results/h100/device-2026-12-06g/call_rest.sh
fi
echo "call wall $(( $(date +%s) - T0 ))"
