#!/usr/bin/env bash
# PREPARED, not yet run: the next session's first device call. It replaces ../device-2026-12-06/next_call.sh
# (its steps ran on 2026-12-06, README beside this file). What it does depends on the card that comes:
# - an H200: `aka kb verify` of every kernel without a current all-shape H200 verdict (32 on 2026-12-06),
#   ops in the order of their suite weight, so fused_moe's grouped_dispatch and MLA's page_tile come
#   first; kb verify no longer checks peers (ff7a058), which had cost four MLA kernels 283 s each.
# - an H100: the gemm_bf16 `aka optimize` run cut off on 2026-12-06 resumes with only its closing
#   dispatch round left (the H100 re-tune was fastest beyond noise on 7 of 16 shapes; about 300 s),
#   then the peers' GPU tests that call 1 did not reach (fla's gated norms and conv1d, rope).
#   here: bash scripts/pre_device.sh; the device, carrying .gpucache and .whl:
#   OUT=$OUT bash results/h100/device-2026-12-06c/next_call.sh
#   everything comes back as out.tgz: tar xzf <files_at>/out.tgz -C <a results folder>; on an H100 also
#   bash scripts/device_between.sh <that folder> (opt.tgz holds the run store)
set -uo pipefail
T0=$(date +%s); DEADLINE=${AKA_DEADLINE_S:-560}
export AKA_CACHE_DIR=$PWD/.gpucache
. scripts/device_lib.sh
trap pack_out EXIT
device_open
if (( ON_H200 )); then
  kb_copy /tmp/kbv; touch /tmp/kbv/stamp
  FIRST=fused_moe,fp8_block_scaled_gemm,mla_decode_attention,fused_add_rms_norm,moe_sum,gated_delta_rule_decode
  FIRST=$FIRST,silu_and_mul,causal_conv1d,gelu_and_mul,qk_norm,rope_interleaved,rope_neox,gated_rms_norm
  FIRST=$FIRST,silu_and_mul_fp8_quant,rms_norm,fp8_per_token_quant,reshape_and_cache,fused_qkv_rope
  FIRST=$FIRST,fused_rms_norm_fp8_quant,top_k_top_p_filter,l2_norm,softmax,layer_norm,embedding
  t=$(( $(left) - 25 ))
  timeout --signal=INT --kill-after=10 "$t" python3 -m aka.cli kb verify --kb /tmp/kbv/knowledge_base --device cuda \
    --shapes all --jobs 4 --unlock-compiles --first "${AKA_KBV_FIRST:-$FIRST}" --timeout "$t" > $OUT/kbverify.log 2>&1
  echo "[kb verify rc=$? $(( $(date +%s) - T0 ))s]"
  ( cd /tmp/kbv/results/kb && find kernels -newer /tmp/kbv/stamp -type f | tar czf $OUT/kbv.tgz -T - )
  tar tzf $OUT/kbv.tgz | wc -l; tail -30 $OUT/kbverify.log
else
  AKA_DEADLINE_S=$(( $(left) - 110 )) AKA_OPT_OPS=gemm_bf16 AKA_OPT_WALL=340 bash scripts/gpu_optimize.sh \
    > $OUT/optimize.log 2>&1
  echo "[optimize gemm_bf16 rc=$? $(( $(date +%s) - T0 ))s]"; tail -12 $OUT/optimize.log
  t=$(( $(left) - 15 ))
  (( t > 40 )) && { AKA_GPU_RESULTS=$OUT/peers_gpu.jsonl timeout "$t" python3 -m pytest -q -p no:cacheprovider -m gpu \
    tests/gpu/test_peers_gpu.py -k "gpu_only and (gated or causal or rope)" -rA --junitxml=$OUT/junit_peers.xml \
    > $OUT/peers_gpu.log 2>&1; echo "[peers rc=$? $(( $(date +%s) - T0 ))s]"; tail -6 $OUT/peers_gpu.log; }
fi
echo "wall $(( $(date +%s) - T0 ))"
