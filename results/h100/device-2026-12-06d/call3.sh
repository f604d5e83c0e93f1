#!/usr/bin/env bash
# Third call of 2026-12-06 (twelfth session). On an H100: the fp8_kv_decode_attention `aka optimize`
# run of call 2 resumes straight into its closing dispatch round (split_kv_fp8 and v_words, the latter
# fastest beyond noise on 7 of 12 shapes in call 2; call 2 spent its last 4 minutes keying the shapes
# on the CPU, fixed since), then `aka kb verify --budget` of what lacks a verdict on this card for the
# rest of the call (kernels that would not finish are deferred, not killed). On an H200 the cached
# H100 run is set aside by gpu_optimize.sh and a new run starts.
#   here: bash scripts/pre_device.sh; the device, carrying .gpucache and .whl:
#   OUT=$OUT bash results/h100/device-2026-12-06d/call3.sh   (run 2026-12-06 as AKA_DEADLINE_S=430 AKA_AFTER_OPT_S=15:
#   the session had 545 s of device time left)
set -uo pipefail
T0=$(date +%s); DEADLINE=${AKA_DEADLINE_S:-560}
export AKA_CACHE_DIR=$PWD/.gpucache
. scripts/device_lib.sh
trap pack_out EXIT
device_open
# 380 s of wall: less than round 3 plus the closing round would need (2 x 197 s), so the loop goes
# straight to the dispatch round
AKA_DEADLINE_S=$(( $(left) - ${AKA_AFTER_OPT_S:-80} )) AKA_OPT_OPS=fp8_kv_decode_attention AKA_OPT_WALL=380 \
  bash scripts/gpu_optimize.sh > $OUT/optimize.log 2>&1
echo "[optimize fp8_kv_decode_attention rc=$? $(( $(date +%s) - T0 ))s]"; tail -14 $OUT/optimize.log
FIRST=fused_moe,paged_decode_attention,gemm_bf16,fp8_block_scaled_gemm,mla_decode_attention,fused_add_rms_norm
FIRST=$FIRST,moe_sum,softcap_window_decode_attention,prefill_attention,gated_delta_rule_decode,silu_and_mul
kb_copy /tmp/kbv; touch /tmp/kbv/stamp
t=$(( $(left) - 25 ))
if (( t > 60 )); then
  timeout --signal=INT --kill-after=10 $(( t + 10 )) python3 -m aka.cli kb verify --kb /tmp/kbv/knowledge_base --device cuda \
    --shapes all --jobs 4 --unlock-compiles --first "$FIRST" --timeout "$t" --budget "$t" > $OUT/kbverify.log 2>&1
  echo "[kb verify rc=$? $(( $(date +%s) - T0 ))s]"
  ( cd /tmp/kbv/results/kb && find kernels -newer /tmp/kbv/stamp -type f | tar czf $OUT/kbv.tgz -T - )
  grep -c deferred $OUT/kbverify.log; grep -v "deferred\|━" $OUT/kbverify.log | tail -12
fi
echo "wall $(( $(date +%s) - T0 ))"
