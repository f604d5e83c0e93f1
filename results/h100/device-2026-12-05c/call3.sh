# 2026-12-05 (seventh session) call 3: GPU adversarial subset (covers the cost-vars harness change) beside kb verify of fp8 (wide_halves) and the stale queue
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 AKA_GIT_SHA=$(cat .gpucache/source_sha)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
AKA_CACHE_DIR=$PWD/.gpucache OUT=$OUT AKA_DEADLINE_S=560 AKA_VT_TUNE_S=0 AKA_VT_PARTS="" AKA_VT_KBV_JOBS=3 AKA_VT_ADV_N=6 AKA_VT_ADV_K="$(cat .gpucache/adv_k.txt)" \
  AKA_VT_KBV_OPS=fp8_block_scaled_gemm,fused_moe,rms_norm,qk_norm,l2_norm,gated_rms_norm,embedding,fp8_per_token_quant,fused_qkv_rope,fused_rms_norm_fp8_quant,gated_delta_rule_decode,moe_sum,reshape_and_cache,rope_interleaved,rope_neox,silu_and_mul_fp8_quant,layer_norm,fused_add_rms_norm,silu_and_mul,gelu_and_mul \
  bash scripts/gpu_verify_tables.sh > $OUT/vt.log 2>&1
tail -30 $OUT/vt.log; echo "wall $SECONDS"
