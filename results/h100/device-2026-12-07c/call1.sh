#!/usr/bin/env bash
# The session's first call (twenty-first session), either card.
# On an H200: fused_moe/grouped_dispatch's all-shape kb verify (results/h100/device-2026-12-07b's call 1,
# 287 s on the H100), then kb verify of what has no H200 verdict (device-2026-12-06g/call_rest.sh).
# On an H100 (grouped_dispatch and most kernels have H100 verdicts): the production peers on the
# large shapes of the ops that carry the suite's weight and of the attention ops whose flex peers were
# never timed on a GPU (scripts/gpu_peers.sh), against each op's best H100 kernel.
#   OUT=$OUT bash results/h100/device-2026-12-07c/call1.sh   (carry .gpucache and .whl)
set -uo pipefail
T0=$(date +%s)
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  AKA_MOE_NO_BASELINES=1 AKA_DEADLINE_S=330 OUT=$OUT/a bash scripts/gpu_moe_verify.sh
  AKA_DEADLINE_S=$(( 565 - ($(date +%s) - T0) )) OUT=$OUT/b bash results/h100/device-2026-12-06g/call_rest.sh
else
  AKA_PEER_OPS=${AKA_PEER_OPS:-paged_decode_attention,gemm_bf16,fused_moe,prefill_attention,mla_decode_attention,softcap_window_decode_attention,fp8_block_scaled_gemm,rms_norm,silu_and_mul} \
    AKA_PEER_JOBS=4 AKA_DEADLINE_S=${AKA_DEADLINE_S:-560} bash scripts/gpu_peers.sh
fi
echo "call wall $(( $(date +%s) - T0 ))"
