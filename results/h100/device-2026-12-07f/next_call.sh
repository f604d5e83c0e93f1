#!/usr/bin/env bash
# The next session's first call, either card.
# On an H200: 07d's call2.sh, its H200 branch (the GEMM and fp8 dispatch verify, which restores about +0.09 of
# the H200 suite figure; fused_moe grouped_dispatch over all shapes; then the kernels with no H200 verdict).
# On an H100: fused_moe's kernel beside the peer in one run at the shapes no run has paired yet (14, 15) and at
# shape 3 (07e's 0.26x, which 07f did not reproduce with the kernel alone), 300 s so the kernel's first
# evaluation (128-expert reference) finishes; records now carry the harness's host-bound note (timing_note).
# Then kb verify of the ops with no H100 verdict, for the rest of the call.
#   AKA_CALL_S=540 OUT=$OUT bash results/h100/device-2026-12-07f/next_call.sh   (carry .gpucache and .whl)
# Everything comes back in $OUT/out.tgz (07f's call 1 lost three loose files).
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 \
  && exec env AKA_CALL_S="${AKA_CALL_S:-540}" bash results/h100/device-2026-12-07d/call2.sh
set -uo pipefail
T0=$(date +%s)
CALL_S=${AKA_CALL_S:-540}
. scripts/device_lib.sh
trap pack_out EXIT
mkdir -p "$OUT/moe"
AKA_CACHE_DIR=/tmp/cache_moe AKA_PEER_OPS=fused_moe AKA_PEER_SHAPES="fused_moe=14,15,3" AKA_PEER_UNLOCK=1 \
  AKA_PEER_JOBS=1 AKA_DEADLINE_S=${AKA_MOE_S:-300} OUT=$OUT/moe bash scripts/gpu_peers.sh > "$OUT/moe.log" 2>&1
echo "[moe rc=$? $(( $(date +%s) - T0 ))s]"
L=$(( CALL_S - ($(date +%s) - T0) - 15 ))
(( L > 90 )) && KBV_BUDGET=0 AKA_DEADLINE_S=$L OUT=$OUT/rest \
  AKA_FIRST_OPS=rope_interleaved,fp8_per_token_quant,fused_rms_norm_fp8_quant,gated_delta_rule_decode,embedding,reshape_and_cache \
  bash results/h100/device-2026-12-06g/call_rest.sh > "$OUT/rest.log" 2>&1
echo "call wall $(( $(date +%s) - T0 ))"
