#!/usr/bin/env bash
# The twenty-second session's first call, either card.
# On an H200: results/h100/device-2026-12-07c/call1.sh's H200 branch (fused_moe grouped_dispatch
# all-shape verify, the GEMM dispatch kernels' stale verdicts, then what has no current H200 verdict).
# On an H100: the production peers the last H100 call's deadline cut (results/h100/device-2026-12-07c
# PEERS.md): paged, MLA and softcap decode against their flex_attention peers (that call timed the paged
# and softcap peers but not the kernels beside them; the peers compile first, hence the longer deadline)
# and fused_moe's other shapes.
#   OUT=$OUT bash results/h100/device-2026-12-07d/call1.sh   (carry .gpucache and .whl)
set -uo pipefail
T0=$(date +%s)
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  bash results/h100/device-2026-12-07c/call1.sh
else
  AKA_PEER_OPS=${AKA_PEER_OPS:-paged_decode_attention,mla_decode_attention,softcap_window_decode_attention,fused_moe} \
    AKA_PEER_JOBS=4 AKA_DEADLINE_S=${AKA_CALL_S:-560} bash scripts/gpu_peers.sh
fi
echo "call wall $(( $(date +%s) - T0 ))"
