#!/usr/bin/env bash
# PREPARED, not yet run: the next session's first call (either card). ../device-2026-12-06f/next_call.sh as
# it ran here (call 1), with grouped_dispatch's kb verify given 430 s on an H100 (300 s did not hold it,
# the third time) and the MoE and gemm tunes on an H200 only (the H100 has measured both: README here).
# On an H200: fused_moe's prefill tune with the A-by-TMA rows baked into the scratch copy's H200 table
# and judged; gemm_bf16's four shapes under 0.9x of cuBLAS re-tuned with the deep narrow tiles (on the
# H100 they took M 96 from 0.86x to 0.97x of cuBLAS), baked and judged.
#   here: bash scripts/pre_device.sh; the device, carrying .gpucache and .whl:
#   OUT=$OUT bash results/h100/device-2026-12-06g/next_call.sh
#   after: untar out.tgz; mkdir -p /tmp/kbvN/results/kb && tar xzf <folder>/kbv.tgz -C /tmp/kbvN/results/kb
#   python scripts/collect_kbverify.py callN=/tmp/kbvN --since <start> --out <folder>/kbverify.tsv --merge
#   python scripts/bake_dispatch_moe.py <folder>/tune_moe/moe_tune.json (and on an H200
#   python scripts/bake_dispatch.py <folder>/tune_gemm/tune.json --ops gemm_bf16 --merge): sha256sums must match
set -uo pipefail
. scripts/device_lib.sh
call_begin 560
kb_copy /tmp/kbv
if (( ON_H200 )); then   # the H100 table holds this session's H100 tune already
  timeout 115 python3 scripts/gpu_tune_moe.py $OUT/tune_moe --deadline 100 --shapes 14,10,13,12,9,15,11,8 \
    > $OUT/tune_moe.log 2>&1
  echo "[tune moe rc=$? $(( $(date +%s) - T0 ))s]"; tail -12 $OUT/tune_moe.log
  python3 scripts/bake_dispatch_moe.py $OUT/tune_moe/moe_tune.json \
    --kernel /tmp/kbv/knowledge_base/kernels/fused_moe/grouped_dispatch.py > $OUT/bake_moe.log 2>&1 && \
    sha256sum /tmp/kbv/knowledge_base/kernels/fused_moe/grouped_dispatch.py > $OUT/baked_moe.sha256
  echo "[bake moe rc=$?]"; tail -3 $OUT/bake_moe.log
fi
mkdir -p /tmp/kbv_moe && mv /tmp/kbv/knowledge_base/kernels/fused_moe/{atomic_combine,sorted_grouped}.py /tmp/kbv_moe/
if (( ON_H200 )); then MOE_S=220; else MOE_S=430; fi
kbv $MOE_S 1 --op fused_moe                   # grouped_dispatch alone
mv /tmp/kbv_moe/*.py /tmp/kbv/knowledge_base/kernels/fused_moe/
if (( ON_H200 )); then
  timeout 60 python3 scripts/gpu_tune_gemm.py $OUT/tune_gemm --deadline 45 --ops gemm_bf16 --shapes 7,4,6,15 \
    > $OUT/tune_gemm.log 2>&1
  echo "[tune gemm rc=$? $(( $(date +%s) - T0 ))s]"; tail -8 $OUT/tune_gemm.log
  python3 scripts/bake_dispatch.py $OUT/tune_gemm/tune.json --ops gemm_bf16 --merge \
    --kernels /tmp/kbv/knowledge_base/kernels > $OUT/bake_gemm.log 2>&1 && \
    sha256sum /tmp/kbv/knowledge_base/kernels/gemm_bf16/dispatch.py > $OUT/baked_gemm.sha256
  echo "[bake gemm rc=$?]"; tail -3 $OUT/bake_gemm.log
  mkdir -p /tmp/kbv_gm && mv /tmp/kbv/knowledge_base/kernels/gemm_bf16/{grouped_tiles,splitk_small_m}.py /tmp/kbv_gm/
  (( $(left) > 60 )) && kbv $(( $(left) - 15 )) 1 --op gemm_bf16       # dispatch alone
  mv /tmp/kbv_gm/*.py /tmp/kbv/knowledge_base/kernels/gemm_bf16/
fi
kbv_pack
tar tzf $OUT/kbv.tgz | wc -l; echo "deferred: $(grep -c ': deferred' $OUT/kbverify.log)"
grep -v ': deferred\|━' $OUT/kbverify.log | tail -20
echo "wall $(( $(date +%s) - T0 ))"
