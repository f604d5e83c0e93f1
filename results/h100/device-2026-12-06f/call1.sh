#!/usr/bin/env bash
# Fourteenth session, call 1 (either card; replaces ../device-2026-12-06e/next_call.sh, whose two start
# attempts this session got no machine).
# 1. fused_moe after 1465ce5 (alignment chunks sized to the SM count): GPU time per kernel at shapes 14, 10
#    and 13, the three at about 256 rows per expert (0.31-0.44 of the H200's measured ceiling). Predicted:
#    _scatter at shape 10 from 75.6 us (32 chunks) to ~20 us; GEMM1 there still 359-376 TFLOP/s.
# 2. The MoE tuner's new mid-rows grid (scripts/gpu_tune_moe.py MID: 64-row blocks, 8 warps, a fourth
#    stage) on the eight shapes above 64 rows per expert. Predicted: 64-row blocks win at 256 rows per
#    expert (padding 12 % instead of 25 %), 128-row blocks keep 1024-2048.
# 3. On an H200 the winners baked into the scratch copy's table (bake_dispatch_moe.py merges) and
#    grouped_dispatch judged with it; on an H100 the committed kernel judged (its table is the H200's).
# 4. kb verify of the rest by suite weight, kernels with no verdict on this card first, within the budget.
#   here: bash scripts/pre_device.sh; the device, carrying .gpucache and .whl:
#   OUT=$OUT bash results/h100/device-2026-12-06f/call1.sh
set -uo pipefail
. scripts/device_lib.sh
call_begin 560
timeout 90 python3 scripts/probe_kernel_launches.py fused_moe grouped_dispatch --shapes 14,10,13 --reps 10 \
  --out $OUT/moe_launches.json > $OUT/moe_launches.log 2>&1
echo "[moe launches rc=$? $(( $(date +%s) - T0 ))s]"; cut -c1-400 $OUT/moe_launches.log | tail -4
timeout 170 python3 scripts/gpu_tune_moe.py $OUT/tune_moe --deadline 150 --shapes 14,10,13,12,9,15,11,8 \
  > $OUT/tune_moe.log 2>&1
echo "[tune moe rc=$? $(( $(date +%s) - T0 ))s]"; tail -40 $OUT/tune_moe.log
kb_copy /tmp/kbv; touch /tmp/kbv/stamp
kbv() {  # kbv SECONDS JOBS ARGS...: one kb verify within SECONDS
  local t=$1 j=$2; shift 2
  timeout --signal=INT --kill-after=10 $(( t + 10 )) python3 -m aka.cli kb verify --kb /tmp/kbv/knowledge_base \
    --device cuda --shapes all --jobs "$j" --unlock-compiles --timeout "$t" --budget "$t" "$@" >> $OUT/kbverify.log 2>&1
  echo "[kb verify $* rc=$? $(( $(date +%s) - T0 ))s]"
}
if (( ON_H200 )); then
  python3 scripts/bake_dispatch_moe.py $OUT/tune_moe/moe_tune.json \
    --kernel /tmp/kbv/knowledge_base/kernels/fused_moe/grouped_dispatch.py > $OUT/bake_moe.log 2>&1 && \
    sha256sum /tmp/kbv/knowledge_base/kernels/fused_moe/grouped_dispatch.py > $OUT/baked_moe.sha256
  echo "[bake moe rc=$?]"; tail -3 $OUT/bake_moe.log
fi
kbv 200 3 --op fused_moe
kbv $(( $(left) - 25 )) 4 --first "$KBV_ORDER" --missing-first
( cd /tmp/kbv/results/kb && find kernels -newer /tmp/kbv/stamp -type f | tar czf $OUT/kbv.tgz -T - )
tar tzf $OUT/kbv.tgz | wc -l; echo "deferred: $(grep -c ': deferred' $OUT/kbverify.log)"
grep -v ': deferred\|━' $OUT/kbverify.log | tail -20
echo "wall $(( $(date +%s) - T0 ))"
