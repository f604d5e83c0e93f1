#!/usr/bin/env bash
# RAN as results/h100/device-2026-12-06g/call1 (H100, 2026-12-06, fifteenth session); prepared as the call after ../device-2026-12-06g/call_paged.sh.
# (Rewritten twice on 2026-12-06 in the fifteenth session before it ran: gemm_bf16's cuBLAS-like deep
# narrow tiles and fused_moe's A-by-TMA rows added; the fp8 KV decode A/B and the kb verify of the rest
# dropped for time.)
# 1. fused_moe's prefill tune on either card, the A-by-TMA rows (grouped_dispatch TMA_ACT, GATHER_X)
#    right after the table's two rows: predicted faster GEMMs at the prefill shapes, most at shape 14
#    (16 N tiles re-read each A row). Its winners baked into the scratch copy's table for this GPU
#    (here the same bake of the call's moe_tune.json reproduces the file: baked_moe.sha256), then
#    grouped_dispatch through the harness alone: its verdict is stale on both cards (200-240 s did not
#    hold it on an H100 twice; about 180 s on the H200).
# 2. gemm_bf16 at the shapes under 0.9x of cuBLAS (7: M 96, 4: M 256, 6: M 8, 15: M 512) with
#    scripts/gpu_tune_gemm.py's DEEP_NARROW tiles (what cuBLAS runs at M 96: one wave of narrow tiles,
#    whole K, a deep pipeline); predicted: a DEEP_NARROW config wins shape 7. On an H200 the winners are
#    baked into the scratch copy (baked_gemm.sha256) and that copy's dispatch judged.
#   here: bash scripts/pre_device.sh; the device, carrying .gpucache and .whl:
#   OUT=$OUT bash results/h100/device-2026-12-06f/next_call.sh
#   after: untar out.tgz; mkdir -p /tmp/kbvN/results/kb && tar xzf <folder>/kbv.tgz -C /tmp/kbvN/results/kb
#   python scripts/collect_kbverify.py callN=/tmp/kbvN --since <start> --out <folder>/kbverify.tsv --merge
#   python scripts/bake_dispatch_moe.py <folder>/tune_moe/moe_tune.json (and on an H200
#   python scripts/bake_dispatch.py <folder>/tune_gemm/tune.json --ops gemm_bf16 --merge): sha256sums must match
set -uo pipefail
. scripts/device_lib.sh
call_begin 560
kb_copy /tmp/kbv; touch /tmp/kbv/stamp
timeout 115 python3 scripts/gpu_tune_moe.py $OUT/tune_moe --deadline 100 --shapes 14,10,13,12,9,15,11,8 \
  > $OUT/tune_moe.log 2>&1
echo "[tune moe rc=$? $(( $(date +%s) - T0 ))s]"; tail -12 $OUT/tune_moe.log
python3 scripts/bake_dispatch_moe.py $OUT/tune_moe/moe_tune.json \
  --kernel /tmp/kbv/knowledge_base/kernels/fused_moe/grouped_dispatch.py > $OUT/bake_moe.log 2>&1 && \
  sha256sum /tmp/kbv/knowledge_base/kernels/fused_moe/grouped_dispatch.py > $OUT/baked_moe.sha256
echo "[bake moe rc=$?]"; tail -3 $OUT/bake_moe.log
mkdir -p /tmp/kbv_moe && mv /tmp/kbv/knowledge_base/kernels/fused_moe/{atomic_combine,sorted_grouped}.py /tmp/kbv_moe/
if (( ON_H200 )); then MOE_S=220; else MOE_S=300; fi
kbv $MOE_S 1 --op fused_moe                   # grouped_dispatch alone
mv /tmp/kbv_moe/*.py /tmp/kbv/knowledge_base/kernels/fused_moe/
timeout 60 python3 scripts/gpu_tune_gemm.py $OUT/tune_gemm --deadline 45 --ops gemm_bf16 --shapes 7,4,6,15 \
  > $OUT/tune_gemm.log 2>&1
echo "[tune gemm rc=$? $(( $(date +%s) - T0 ))s]"; tail -8 $OUT/tune_gemm.log
if (( ON_H200 )); then
  python3 scripts/bake_dispatch.py $OUT/tune_gemm/tune.json --ops gemm_bf16 --merge \
    --kernels /tmp/kbv/knowledge_base/kernels > $OUT/bake_gemm.log 2>&1 && \
    sha256sum /tmp/kbv/knowledge_base/kernels/gemm_bf16/dispatch.py > $OUT/baked_gemm.sha256
  echo "[bake gemm rc=$?]"; tail -3 $OUT/bake_gemm.log
  mkdir -p /tmp/kbv_gm && mv /tmp/kbv/knowledge_base/kernels/gemm_bf16/{grouped_tiles,splitk_small_m}.py /tmp/kbv_gm/
  (( $(left) > 60 )) && kbv $(( $(left) - 15 )) 1 --op gemm_bf16       # dispatch alone
  mv /tmp/kbv_gm/*.py /tmp/kbv/knowledge_base/kernels/gemm_bf16/
fi
( cd /tmp/kbv/results/kb && find kernels -newer /tmp/kbv/stamp -type f | tar czf $OUT/kbv.tgz -T - )
tar tzf $OUT/kbv.tgz | wc -l; echo "deferred: $(grep -c ': deferred' $OUT/kbverify.log)"
grep -v ': deferred\|━' $OUT/kbverify.log | tail -20
echo "wall $(( $(date +%s) - T0 ))"
