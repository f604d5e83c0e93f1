#!/usr/bin/env bash
# PREPARED, not yet run: the next session's first device call. It replaces ../device-2026-12-06c/next_call.sh
# (its H100 branch ran on 2026-12-06 as call 1 here).
# Either card: `aka kb verify --budget` with fp8_kv_decode_attention first, so f16_mma (fp16 MMAs, a third
# fewer instructions per cached token than split_kv_fp8 in the offline sm_90a compile, never timed) gets its
# first GPU verdict beside split_kv_fp8 and v_words on the same card; then the ops by suite weight, kernels
# with no verdict on this card first (on an H200: the 32 without a current H200 verdict; on an H100, most).
# --budget defers a kernel whose last recorded evaluation would not finish, instead of killing it.
#   here: bash scripts/pre_device.sh; the device, carrying .gpucache and .whl:
#   OUT=$OUT bash results/h100/device-2026-12-06d/next_call.sh
#   after: mkdir -p <folder>/kbv/results/kb && tar xzf <files_at>/out.tgz -C <folder> && tar xzf <folder>/kbv.tgz -C <folder>/kbv/results/kb
#   python scripts/collect_kbverify.py call1=<folder>/kbv --since <the call's date> --out <folder>/kbverify.tsv --merge
#   python scripts/kernels_side_by_side.py fp8_kv_decode_attention f16_mma,split_kv_fp8,v_words --base split_kv_fp8 --gpu <H100 or H200>
set -uo pipefail
T0=$(date +%s); DEADLINE=${AKA_DEADLINE_S:-560}
export AKA_CACHE_DIR=$PWD/.gpucache
. scripts/device_lib.sh
trap pack_out EXIT
device_open
FIRST=fp8_kv_decode_attention,fused_moe,paged_decode_attention,gemm_bf16,fp8_block_scaled_gemm,mla_decode_attention
FIRST=$FIRST,fused_add_rms_norm,moe_sum,softcap_window_decode_attention,prefill_attention,gated_delta_rule_decode,silu_and_mul
FIRST=$FIRST,fp8_per_token_group_quant,causal_conv1d,gelu_and_mul,qk_norm,rope_interleaved,awq_w4a16_gemm,rope_neox
FIRST=$FIRST,gated_rms_norm,silu_and_mul_fp8_quant,rms_norm,fp8_per_token_quant,reshape_and_cache,fused_qkv_rope
FIRST=$FIRST,fused_rms_norm_fp8_quant,top_k_top_p_filter,gumbel_max_sample,l2_norm
kb_copy /tmp/kbv; touch /tmp/kbv/stamp
t=$(( $(left) - 25 ))
timeout --signal=INT --kill-after=10 $(( t + 10 )) python3 -m aka.cli kb verify --kb /tmp/kbv/knowledge_base --device cuda \
  --shapes all --jobs 4 --unlock-compiles --first "$FIRST" --missing-first --timeout "$t" --budget "$t" > $OUT/kbverify.log 2>&1
echo "[kb verify rc=$? $(( $(date +%s) - T0 ))s]"
( cd /tmp/kbv/results/kb && find kernels -newer /tmp/kbv/stamp -type f | tar czf $OUT/kbv.tgz -T - )
tar tzf $OUT/kbv.tgz | wc -l; echo "deferred: $(grep -c ': deferred' $OUT/kbverify.log)"
grep -v ': deferred\|━' $OUT/kbverify.log | tail -16
echo "wall $(( $(date +%s) - T0 ))"
