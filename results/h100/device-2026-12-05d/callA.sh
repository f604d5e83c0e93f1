# 2026-12-05 (eighth session), an H200 call: `aka kb verify` of the kernels with no current H200 verdict
# (most important ops first), the GPU adversarial subset beside it; everything under $OUT
set -uo pipefail
T0=$(date +%s); DEADLINE=${AKA_DEADLINE_S:-575}
. scripts/device_lib.sh; device_env; use_xdist
device_provenance > $OUT/provenance.txt 2>&1; liger_install $OUT/provenance.txt $OUT/install.log
cat $OUT/provenance.txt
timeout 120 python3 -m aka.cli hw calibrate > $OUT/calibration.json 2> $OUT/calibration.log; echo "[calibrate rc=$? $(( $(date +%s) - T0 ))s]"
FIRST=mla_decode_attention,causal_conv1d,softmax,rms_norm,silu_and_mul,gelu_and_mul,fused_add_rms_norm,l2_norm,layer_norm,qk_norm,gated_rms_norm,fused_qkv_rope,embedding,fp8_per_token_quant,fused_rms_norm_fp8_quant,gated_delta_rule_decode,moe_sum,reshape_and_cache,rope_interleaved,rope_neox,silu_and_mul_fp8_quant,fused_moe,fp8_block_scaled_gemm
kb_copy /tmp/kbv
( t=$(( $(left) - 20 ))
  timeout --signal=INT --kill-after=10 "$t" python3 -m aka.cli kb verify --kb /tmp/kbv/knowledge_base --device cuda \
    --op "$FIRST" --first "$FIRST" --shapes all --jobs ${AKA_KBV_JOBS:-5} --unlock-compiles --timeout "$t" > $OUT/kbverify.log 2>&1
  echo "[kb verify rc=$? $(( $(date +%s) - T0 ))s]" ) &
if [[ -n ${AKA_ADV_K:-} ]]; then
( t=$(( $(left) - 25 ))
  AKA_GPU_RESULTS=$OUT/adv_results.jsonl timeout --signal=INT "$t" python3 -m pytest -m gpu tests/test_adversarial.py \
    -k "$AKA_ADV_K" -q -n 4 -p no:cacheprovider -rA --durations=15 --junitxml=$OUT/junit_adv.xml > $OUT/adv.log 2>&1
  echo "[adversarial rc=$? $(( $(date +%s) - T0 ))s]" ) &
fi
wait
mkdir -p $OUT/kbv; for op in ${FIRST//,/ }; do cp -r /tmp/kbv/results/kb/kernels/$op $OUT/kbv/ 2>/dev/null; done
tail -40 $OUT/kbverify.log; tail -5 $OUT/adv.log 2>/dev/null; echo "wall $(( $(date +%s) - T0 ))"
