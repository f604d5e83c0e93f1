#!/usr/bin/env bash
# The session's second call, either card.
# On an H200: results/h100/device-2026-12-07c/call1.sh's H200 branch, as call1.sh.
# On an H100: call 1 timed the flex peers of paged and softcap decode (first time on a GPU), but the
# kernels beside them never got the GPU lock in 527 s: four ops at once, and MLA's flex peer compiled
# for the whole call. Here paged and softcap alone, two jobs, the kernels' compiles off the lock.
#   OUT=$OUT bash results/h100/device-2026-12-07d/call2.sh   (carry .gpucache and .whl)
set -uo pipefail
T0=$(date +%s)
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  bash results/h100/device-2026-12-07c/call1.sh
else
  AKA_PEER_OPS=${AKA_PEER_OPS:-paged_decode_attention,softcap_window_decode_attention} AKA_PEER_UNLOCK=1 \
    AKA_PEER_JOBS=2 AKA_DEADLINE_S=${AKA_CALL_S:-480} bash scripts/gpu_peers.sh
fi
echo "call wall $(( $(date +%s) - T0 ))"
