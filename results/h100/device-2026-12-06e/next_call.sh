#!/usr/bin/env bash
# PREPARED, not yet run: the next session's first device call (either card; replaces
# ../device-2026-12-06d/next_call.sh, which ran as call 1 here).
# 1. fused_moe after 1465ce5 (alignment chunks sized to the SM count): GPU time per kernel at shapes 10, 13
#    and 3 (call 2 here: _scatter 75.6 us at shape 10 with 32 chunks; predicted ~20 us with 256 chunks), then
#    grouped_dispatch through the harness.
# 2. Why f16_mma (a third fewer loop instructions) runs 1.19x slower than v_words: both profiled at bench
#    shape 2 with the warp-state stall reasons (`aka eval --ncu-stalls`, gpu_ncu_probe.sh NCU_STALLS=1).
# 3. fp8_kv_decode_attention/split_kv_fp8 alone (call 2 here: out of GPU memory beside three other
#    evaluations), so the H100 has all three fp8-cache kernels side by side.
# 4. kb verify of the rest, ops by suite weight, kernels with no verdict on this card first, within --budget.
# On an H200 steps 2 and 3 give way to the fp8 GEMM: its prefill tune (the two-programs-per-SM tiles won 5
# of 8 shapes on an H100 here, by 1-12%), those winners baked into the scratch copy's table (--merge) and
# the baked dispatch judged; here the same bake of call's tune.json reproduces the file (baked.sha256).
#   here: bash scripts/pre_device.sh; the device, carrying .gpucache and .whl:
#   OUT=$OUT bash results/h100/device-2026-12-06e/next_call.sh
#   after: untar out.tgz; mkdir -p /tmp/kbvN/results/kb && tar xzf <folder>/kbv.tgz -C /tmp/kbvN/results/kb
#   python scripts/collect_kbverify.py callN=/tmp/kbvN --since <start> --out <folder>/kbverify.tsv --merge
#   python scripts/kernels_side_by_side.py fp8_kv_decode_attention v_words,f16_mma,split_kv_fp8 --base v_words --gpu <card>
set -uo pipefail
. scripts/device_lib.sh
call_begin 560
timeout 90 python3 scripts/probe_kernel_launches.py fused_moe grouped_dispatch --shapes 10,13,3 --reps 10 \
  --out $OUT/moe_launches.json > $OUT/moe_launches.log 2>&1
echo "[moe launches rc=$? $(( $(date +%s) - T0 ))s]"; cut -c1-400 $OUT/moe_launches.log | tail -3
kb_copy /tmp/kbv; touch /tmp/kbv/stamp
kbv() {  # kbv SECONDS JOBS ARGS...: one kb verify within SECONDS
  local t=$1 j=$2; shift 2
  timeout --signal=INT --kill-after=10 $(( t + 10 )) python3 -m aka.cli kb verify --kb /tmp/kbv/knowledge_base \
    --device cuda --shapes all --jobs "$j" --unlock-compiles --timeout "$t" --budget "$t" "$@" >> $OUT/kbverify.log 2>&1
  echo "[kb verify $* rc=$? $(( $(date +%s) - T0 ))s]"
}
if (( ON_H200 )); then
  timeout 150 python3 scripts/gpu_tune_gemm.py $OUT/tune_fp8 --deadline 110 --ops fp8_block_scaled_gemm \
    --shapes 7,9,10,11,12,13,14,15 > $OUT/tune_fp8.log 2>&1
  echo "[tune fp8 rc=$? $(( $(date +%s) - T0 ))s]"; tail -12 $OUT/tune_fp8.log
  python3 scripts/bake_dispatch.py $OUT/tune_fp8/tune.json --ops fp8_block_scaled_gemm --merge \
    --kernels /tmp/kbv/knowledge_base/kernels > $OUT/bake.log 2>&1 && \
    sha256sum /tmp/kbv/knowledge_base/kernels/fp8_block_scaled_gemm/dispatch.py > $OUT/baked.sha256
  echo "[bake rc=$?]"
  kbv 130 1 --op fp8_block_scaled_gemm
else
  NCU_STALLS=1 NCU_TIMEOUT=150 bash scripts/gpu_ncu_probe.sh fp8_kv_decode_attention:v_words:2 \
    fp8_kv_decode_attention:f16_mma:2
  for j in $OUT/ncu/ncu_*.json; do python3 -c "import json,sys; from aka.evaluate.report import ncu_line
d=json.load(open(sys.argv[1])); print(sys.argv[1].split('/')[-1], [ncu_line(s['ncu']) for s in d['shapes'] if s.get('ncu')])" "$j"; done
fi
kbv 200 3 --op fused_moe
(( ON_H200 )) || kbv 150 1 --op fp8_kv_decode_attention
kbv $(( $(left) - 25 )) 4 --first "$KBV_ORDER" --missing-first
( cd /tmp/kbv/results/kb && find kernels -newer /tmp/kbv/stamp -type f | tar czf $OUT/kbv.tgz -T - )
tar tzf $OUT/kbv.tgz | wc -l; echo "deferred: $(grep -c ': deferred' $OUT/kbverify.log)"
grep -v ': deferred\|━' $OUT/kbverify.log | tail -20
echo "wall $(( $(date +%s) - T0 ))"
