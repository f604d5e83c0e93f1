#!/usr/bin/env bash
# PREPARED, not yet run: the next session's first device call. It replaces ../device-2026-12-06/next_call.sh
# (its steps ran on 2026-12-06, README beside this file). What it does depends on the card that comes:
# - an H200: `aka kb verify` of every kernel without a current all-shape H200 verdict (32 on 2026-12-06),
#   ops in the order of their suite weight, so fused_moe's grouped_dispatch and MLA's page_tile come
#   first; kb verify no longer checks peers (ff7a058), which had cost four MLA kernels 283 s each.
# - an H100: the gemm_bf16 `aka optimize` run cut off on 2026-12-06 resumes with only its closing
#   dispatch round left (the H100 re-tune was fastest beyond noise on 7 of 16 shapes; about 300 s),
#   then kb verify of what lacks an H100 verdict for the rest of the call (the records keep each card's
#   verdict since 9f4a82e, so H100 verdicts no longer displace the H200's; 101 of 120 lacked one).
#   AKA_PEERS=1 runs the peers' GPU tests call 1 did not reach (fla's gated norms and conv1d, rope) instead.
#   here: bash scripts/pre_device.sh; the device, carrying .gpucache and .whl:
#   OUT=$OUT bash results/h100/device-2026-12-06c/next_call.sh
#   everything comes back as out.tgz: tar xzf <files_at>/out.tgz -C <a results folder>; on an H100 also
#   bash scripts/device_between.sh <that folder> (opt.tgz holds the run store); then
#   mkdir -p <folder>/kbv/results/kb && tar xzf <folder>/kbv.tgz -C <folder>/kbv/results/kb and
#   python scripts/collect_kbverify.py call1=<folder>/kbv --since <the call's date> --out <folder>/kbverify.tsv --merge
set -uo pipefail
T0=$(date +%s); DEADLINE=${AKA_DEADLINE_S:-560}
export AKA_CACHE_DIR=$PWD/.gpucache
. scripts/device_lib.sh
trap pack_out EXIT
device_open
# ops in the order of their suite weight: where the verify's time goes first
FIRST=fused_moe,paged_decode_attention,gemm_bf16,fp8_block_scaled_gemm,mla_decode_attention,fused_add_rms_norm
FIRST=$FIRST,moe_sum,softcap_window_decode_attention,prefill_attention,gated_delta_rule_decode,silu_and_mul
FIRST=$FIRST,fp8_kv_decode_attention,fp8_per_token_group_quant,causal_conv1d,gelu_and_mul,qk_norm,rope_interleaved
FIRST=$FIRST,awq_w4a16_gemm,rope_neox,gated_rms_norm,silu_and_mul_fp8_quant,rms_norm,fp8_per_token_quant
FIRST=$FIRST,reshape_and_cache,fused_qkv_rope,fused_rms_norm_fp8_quant,top_k_top_p_filter,gumbel_max_sample,l2_norm
kbv() {   # kb verify of what lacks a current verdict on this card, for the call's remaining time
  kb_copy /tmp/kbv; touch /tmp/kbv/stamp
  local t=$(( $(left) - 25 ))
  (( t > 60 )) || { echo "[kb verify skipped: ${t}s left]"; return; }
  timeout --signal=INT --kill-after=10 "$t" python3 -m aka.cli kb verify --kb /tmp/kbv/knowledge_base --device cuda \
    --shapes all --jobs 4 --unlock-compiles --first "${AKA_KBV_FIRST:-$FIRST}" --timeout "$t" > $OUT/kbverify.log 2>&1
  echo "[kb verify rc=$? $(( $(date +%s) - T0 ))s]"
  ( cd /tmp/kbv/results/kb && find kernels -newer /tmp/kbv/stamp -type f | tar czf $OUT/kbv.tgz -T - )
  tar tzf $OUT/kbv.tgz | wc -l; tail -30 $OUT/kbverify.log
}
if (( ON_H200 )); then
  kbv
else
  AKA_DEADLINE_S=$(( $(left) - ${AKA_AFTER_OPT_S:-150} )) AKA_OPT_OPS=gemm_bf16 AKA_OPT_WALL=340 \
    bash scripts/gpu_optimize.sh > $OUT/optimize.log 2>&1
  echo "[optimize gemm_bf16 rc=$? $(( $(date +%s) - T0 ))s]"; tail -12 $OUT/optimize.log
  if [[ ${AKA_PEERS:-0} == 1 ]]; then
    t=$(( $(left) - 15 ))
    AKA_GPU_RESULTS=$OUT/peers_gpu.jsonl timeout "$t" python3 -m pytest -q -p no:cacheprovider -m gpu \
      tests/gpu/test_peers_gpu.py -k "gpu_only and (gated or causal or rope)" -rA --junitxml=$OUT/junit_peers.xml \
      > $OUT/peers_gpu.log 2>&1; echo "[peers rc=$? $(( $(date +%s) - T0 ))s]"; tail -6 $OUT/peers_gpu.log
  else
    kbv
  fi
fi
echo "wall $(( $(date +%s) - T0 ))"
