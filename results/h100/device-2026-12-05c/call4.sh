# 2026-12-05 (seventh session) call 4: kb verify of the stale queue's tail (the part call 3 did not reach)
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 AKA_GIT_SHA=$(cat .gpucache/source_sha)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
AKA_CACHE_DIR=$PWD/.gpucache OUT=$OUT AKA_DEADLINE_S=370 AKA_VT_TUNE_S=0 AKA_VT_PARTS="" AKA_VT_KBV_JOBS=4 \
  AKA_VT_KBV_OPS=gelu_and_mul,silu_and_mul,fused_add_rms_norm,layer_norm,silu_and_mul_fp8_quant,rope_neox,rope_interleaved,reshape_and_cache,moe_sum,gated_delta_rule_decode \
  bash scripts/gpu_verify_tables.sh > $OUT/vt.log 2>&1
tail -30 $OUT/vt.log; echo "wall $SECONDS"
