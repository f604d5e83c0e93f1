#!/usr/bin/env bash
# A call (either card). paged_decode_attention's split path with the fused merge (7435508): the tuner
# times every split config beside its FUSED 1 twin at the four shapes under 0.80 of the measured
# ceiling on the H200 (0, 6, 5, 1; 0 and 6 take the split path), predicted: the fused twin wins 0 and 6
# by about the combine's GPU time (5.4 / 3.7 us on the H100). On an H200 the winners are baked into the
# scratch copy (baked_paged.sha256; here the same bake of tune_attn.json must reproduce it) and that
# copy judged, then the fp8 GEMM's prefill tune, bake and verdict (../device-2026-12-06e/next_call.sh's
# H200 branch) with what is left. On an H100: split_dispatch's H100 verdict for the new code, then
# kb verify of the rest, kernels with no verdict on this card first.
#   OUT=$OUT bash <this file>   (carry .gpucache and .whl; run scripts/pre_device.sh here first)
set -uo pipefail
. scripts/device_lib.sh
call_begin 560
kb_copy /tmp/kbv
timeout 90 python3 scripts/gpu_tune_attn.py $OUT/tune_paged --deadline 75 --ops paged_decode_attention \
  --shapes 0,6,5,1 > $OUT/tune_paged.log 2>&1
echo "[tune paged rc=$? $(( $(date +%s) - T0 ))s]"; tail -8 $OUT/tune_paged.log
if (( ON_H200 )); then
  python3 scripts/bake_dispatch_attn.py $OUT/tune_paged/tune_attn.json --kb /tmp/kbv/knowledge_base \
    > $OUT/bake_paged.log 2>&1 && \
    sha256sum /tmp/kbv/knowledge_base/kernels/paged_decode_attention/split_dispatch.py > $OUT/baked_paged.sha256
  echo "[bake paged rc=$?]"; tail -3 $OUT/bake_paged.log
  mkdir -p /tmp/kbv_pd && mv /tmp/kbv/knowledge_base/kernels/paged_decode_attention/{one_pass,split_kv,balanced_split}.py /tmp/kbv_pd/
  kbv 200 1 --op paged_decode_attention
  mv /tmp/kbv_pd/*.py /tmp/kbv/knowledge_base/kernels/paged_decode_attention/
  if (( $(left) > 200 )); then
    timeout 130 python3 scripts/gpu_tune_gemm.py $OUT/tune_fp8 --deadline 95 --ops fp8_block_scaled_gemm \
      --shapes 7,9,10,11,12,13,14,15 > $OUT/tune_fp8.log 2>&1
    echo "[tune fp8 rc=$? $(( $(date +%s) - T0 ))s]"; tail -12 $OUT/tune_fp8.log
    python3 scripts/bake_dispatch.py $OUT/tune_fp8/tune.json --ops fp8_block_scaled_gemm --merge \
      --kernels /tmp/kbv/knowledge_base/kernels > $OUT/bake.log 2>&1 && \
      sha256sum /tmp/kbv/knowledge_base/kernels/fp8_block_scaled_gemm/dispatch.py > $OUT/baked.sha256
    echo "[bake fp8 rc=$?]"
    mkdir -p /tmp/kbv_f8 && mv /tmp/kbv/knowledge_base/kernels/fp8_block_scaled_gemm/{grouped_tiles,splitk_small_m,wide_halves}.py /tmp/kbv_f8/ 2>/dev/null
    kbv $(( $(left) - 20 )) 1 --op fp8_block_scaled_gemm
    mv /tmp/kbv_f8/*.py /tmp/kbv/knowledge_base/kernels/fp8_block_scaled_gemm/ 2>/dev/null
  fi
else
  mkdir -p /tmp/kbv_pd && mv /tmp/kbv/knowledge_base/kernels/paged_decode_attention/{one_pass,split_kv,balanced_split}.py /tmp/kbv_pd/
  kbv 160 1 --op paged_decode_attention
  mv /tmp/kbv_pd/*.py /tmp/kbv/knowledge_base/kernels/paged_decode_attention/
  (( $(left) > 85 )) && kbv $(( $(left) - 25 )) 4 --first "$KBV_ORDER" --missing-first
fi
kbv_pack
tar tzf $OUT/kbv.tgz | wc -l; echo "deferred: $(grep -c ': deferred' $OUT/kbverify.log)"
grep -v ': deferred\|━' $OUT/kbverify.log | tail -20
echo "wall $(( $(date +%s) - T0 ))"
