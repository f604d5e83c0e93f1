#!/usr/bin/env bash
# The session's second call (twenty-sixth session), either card.
# On an H200: fused_moe/grouped_dispatch's first all-shape H200 kb verify (0.76 of the measured ceiling on the
# H100; the H200's best verdict is still sorted_grouped's 0.51, and fused_moe carries 24% of the suite's
# weight), then mla_decode_attention/page_tile's first H200 verdict (1.31x split_dispatch on the H100; MLA is
# issue 21's 0.28 of the measured ceiling) and any other kernel with no H200 verdict, with what is left.
# On an H100: results/h100/device-2026-12-07f/next_call.sh (fused_moe beside its peer, then call_rest).
#   OUT=$OUT bash results/h200/device-2026-12-08/call2.sh   (carry .gpucache and .whl)
#   after: untar a/out.tgz and b/out.tgz; kbv.tgz in each as in call_rest.sh
set -uo pipefail
T0=$(date +%s)
CALL_S=${AKA_CALL_S:-570}
if ! nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  AKA_CALL_S=$CALL_S OUT=$OUT bash results/h100/device-2026-12-07f/next_call.sh
  exit
fi
AKA_MOE_NO_BASELINES=1 AKA_DEADLINE_S=${AKA_MOE_S:-330} OUT=$OUT/a bash scripts/gpu_moe_verify.sh
L=$(( CALL_S - ($(date +%s) - T0) ))
(( L > 90 )) && AKA_FIRST_OPS=mla_decode_attention AKA_DEADLINE_S=$L OUT=$OUT/b bash results/h100/device-2026-12-06g/call_rest.sh
echo "call wall $(( $(date +%s) - T0 ))"
