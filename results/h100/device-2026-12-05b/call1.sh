# first device call of 2026-12-05 (sixth session): MLA page_tile tuned on every shape (alone on the GPU),
# its table baked there, then aka kb verify of MLA (page_tile baked, split_dispatch beside) and the 20 stale ops,
# the paged page-prefetch A/B (cf65409) beside, the ncu GPU test last
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 AKA_GIT_SHA=$(cat .gpucache/source_sha)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $OUT/t
timeout 175 python3 scripts/gpu_tune_attn.py $OUT/t --ops mla_decode_attention --kernels page_tile --deadline 160 > $OUT/t/tune.log 2>&1; tail -22 $OUT/t/tune.log
python3 scripts/bake_dispatch_attn.py $OUT/t/tune_attn.json --kernel page_tile > $OUT/t/bake.log 2>&1; tail -3 $OUT/t/bake.log
cp knowledge_base/kernels/mla_decode_attention/page_tile.py $OUT/t/page_tile_baked.py
( D=$(( 470 - SECONDS )); mkdir -p $OUT/pf/cur/paged_decode_attention
  cp knowledge_base/kernels/paged_decode_attention/split_dispatch.py $OUT/pf/cur/paged_decode_attention/
  cp -r .gpucache/pf $OUT/pf/pf
  timeout --signal=INT $D python3 -m aka.cli bench run --impl $OUT/pf/cur,$OUT/pf/pf --ops paged_decode_attention \
    --shapes 0,6,1,5 --no-beside --timeout $D --out $OUT/pf/run > $OUT/pf/run.log 2>&1; echo "pf rc=$?" >> $OUT/pf/run.log ) &
AKA_CACHE_DIR=$PWD/.gpucache OUT=$OUT AKA_DEADLINE_S=$(( 480 - SECONDS )) AKA_VT_TUNE_S=0 AKA_VT_PARTS="" AKA_VT_KBV_JOBS=4 \
  AKA_VT_KBV_OPS=mla_decode_attention,causal_conv1d,softmax,rms_norm,fused_add_rms_norm,silu_and_mul,gelu_and_mul,layer_norm,qk_norm,l2_norm,gated_rms_norm,embedding,fp8_per_token_quant,fused_qkv_rope,fused_rms_norm_fp8_quant,gated_delta_rule_decode,moe_sum,reshape_and_cache,rope_interleaved,rope_neox,silu_and_mul_fp8_quant \
  bash scripts/gpu_verify_tables.sh > $OUT/vt.log 2>&1
wait
tail -3 $OUT/pf/run.log
(timeout $(( 585 - SECONDS )) python3 -m pytest -q -m gpu tests/test_ncu_confine.py -p no:cacheprovider -rA > $OUT/t/gputests.log 2>&1; echo "rc=$?" >> $OUT/t/gputests.log)
tail -3 $OUT/t/gputests.log
cd $OUT && tar czf ta.tgz t pf && rm -rf t pf; ls -la $OUT; echo "wall $SECONDS"
