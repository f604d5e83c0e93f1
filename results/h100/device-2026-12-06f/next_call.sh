#!/usr/bin/env bash
# PREPARED, not yet run: the next session's call after ../device-2026-12-06g/call_paged.sh (either card).
# (Rewritten 2026-12-06 in the fifteenth session before it ran: gemm_bf16's cuBLAS-like deep narrow
# tiles added, the kb verify of the rest dropped for time.)
# 1. grouped_dispatch (fused_moe, 0.249 of the suite's weight) through the harness, alone: its verdict is
#    stale on both cards since 1465ce5 (the SM-sized alignment chunks) and the per-GPU tables, and twice
#    200-240 s did not hold its evaluation on an H100 (eager and compiled per-expert reference over 16
#    shapes; about 180 s on the H200). On an H200 first the mid-rows tune of the eight prefill shapes
#    baked into the scratch copy's H200 table, so the verdict is of the tuned kernel; here the same
#    bake of the call's moe_tune.json reproduces the file (baked_moe.sha256).
# 2. gemm_bf16 at the shapes under 0.9x of cuBLAS (7: M 96, 4: M 256, 6: M 8, 15: M 512) with
#    scripts/gpu_tune_gemm.py's DEEP_NARROW tiles (what cuBLAS runs at M 96: one wave of narrow tiles,
#    whole K, a deep pipeline); predicted: a DEEP_NARROW config wins shape 7. On an H200 the winners are
#    baked into the scratch copy (baked_gemm.sha256) and that copy's dispatch judged.
# 3. On an H100 instead of the bakes: f16_mma at 8 warps against its default and v_words (below).
#   here: bash scripts/pre_device.sh; the device, carrying .gpucache and .whl:
#   OUT=$OUT bash results/h100/device-2026-12-06f/next_call.sh
#   after: untar out.tgz; mkdir -p /tmp/kbvN/results/kb && tar xzf <folder>/kbv.tgz -C /tmp/kbvN/results/kb
#   python scripts/collect_kbverify.py callN=/tmp/kbvN --since <start> --out <folder>/kbverify.tsv --merge
#   on an H200: python scripts/bake_dispatch_moe.py <folder>/tune_moe/moe_tune.json and
#   python scripts/bake_dispatch.py <folder>/tune_gemm/tune.json --ops gemm_bf16 --merge; sha256sums must match
set -uo pipefail
. scripts/device_lib.sh
call_begin 560
kb_copy /tmp/kbv; touch /tmp/kbv/stamp
tune_gemm() {  # tune_gemm DEADLINE: the four shapes under 0.9x of cuBLAS
  timeout $(( $1 + 15 )) python3 scripts/gpu_tune_gemm.py $OUT/tune_gemm --deadline $1 --ops gemm_bf16 \
    --shapes 7,4,6,15 > $OUT/tune_gemm.log 2>&1
  echo "[tune gemm rc=$? $(( $(date +%s) - T0 ))s]"; tail -8 $OUT/tune_gemm.log
}
if (( ON_H200 )); then
  timeout 75 python3 scripts/gpu_tune_moe.py $OUT/tune_moe --deadline 60 --shapes 14,10,13,12,9,15,11,8 \
    > $OUT/tune_moe.log 2>&1
  echo "[tune moe rc=$? $(( $(date +%s) - T0 ))s]"; tail -12 $OUT/tune_moe.log
  python3 scripts/bake_dispatch_moe.py $OUT/tune_moe/moe_tune.json \
    --kernel /tmp/kbv/knowledge_base/kernels/fused_moe/grouped_dispatch.py > $OUT/bake_moe.log 2>&1 && \
    sha256sum /tmp/kbv/knowledge_base/kernels/fused_moe/grouped_dispatch.py > $OUT/baked_moe.sha256
  echo "[bake moe rc=$?]"; tail -3 $OUT/bake_moe.log
  tune_gemm 60
  python3 scripts/bake_dispatch.py $OUT/tune_gemm/tune.json --ops gemm_bf16 --merge \
    --kernels /tmp/kbv/knowledge_base/kernels > $OUT/bake_gemm.log 2>&1 && \
    sha256sum /tmp/kbv/knowledge_base/kernels/gemm_bf16/dispatch.py > $OUT/baked_gemm.sha256
  echo "[bake gemm rc=$?]"; tail -3 $OUT/bake_gemm.log
  MOE_S=220
else
  MOE_S=330
fi
mkdir -p /tmp/kbv_moe && mv /tmp/kbv/knowledge_base/kernels/fused_moe/{atomic_combine,sorted_grouped}.py /tmp/kbv_moe/
kbv $MOE_S 1 --op fused_moe                   # grouped_dispatch alone
mv /tmp/kbv_moe/*.py /tmp/kbv/knowledge_base/kernels/fused_moe/
if (( ON_H200 )); then
  mkdir -p /tmp/kbv_gm && mv /tmp/kbv/knowledge_base/kernels/gemm_bf16/{grouped_tiles,splitk_small_m}.py /tmp/kbv_gm/
  (( $(left) > 60 )) && kbv $(( $(left) - 15 )) 1 --op gemm_bf16       # dispatch alone
  mv /tmp/kbv_gm/*.py /tmp/kbv/knowledge_base/kernels/gemm_bf16/
else
  # fp8 KV decode, f16_mma at 8 warps (128 registers offline, twice its default's resident warps) beside
  # its default and v_words, shapes 2 (batch 64 x 16k), 0 and 7: the stall profile's occupancy reading, tested.
  python3 scripts/params_variant.py knowledge_base/kernels/fp8_kv_decode_attention/f16_mma.py num_warps=8 > /tmp/f16_mma_w8.py
  for k in knowledge_base/kernels/fp8_kv_decode_attention/v_words.py knowledge_base/kernels/fp8_kv_decode_attention/f16_mma.py /tmp/f16_mma_w8.py; do
    n=$(basename $k .py)
    timeout 100 python3 -m aka.cli eval fp8_kv_decode_attention $k --shapes 2,0,7 --no-peer --json $OUT/ab_$n.json > $OUT/ab_$n.log 2>&1
    echo "[eval $n rc=$? $(( $(date +%s) - T0 ))s]"; grep -m1 "device cuda" $OUT/ab_$n.log
  done
  (( $(left) > 55 )) && tune_gemm $(( $(left) - 25 ))
fi
( cd /tmp/kbv/results/kb && find kernels -newer /tmp/kbv/stamp -type f | tar czf $OUT/kbv.tgz -T - )
tar tzf $OUT/kbv.tgz | wc -l; echo "deferred: $(grep -c ': deferred' $OUT/kbverify.log)"
grep -v ': deferred\|━' $OUT/kbverify.log | tail -20
echo "wall $(( $(date +%s) - T0 ))"
