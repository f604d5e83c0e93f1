#!/usr/bin/env bash
# Fourteenth session, call 2 (H100): fused_moe with the table call 1 measured on this card.
# 1. GPU time per kernel at shapes 14, 10, 13 again, now under DISPATCH_BY_GPU["NVIDIA H100 80GB HBM3"]
#    (call 1's tune, baked here): what the new configs move, kernel by kernel.
#    and the slot sum with whole rows per program (predicted at shape 14: 77.0 -> about 45 us).
# 2. kb verify of grouped_dispatch alone (a scratch copy without fused_moe's two other kernels, whose
#    175-184 s evaluations deferred it in call 1), through the harness with its H100 table.
# 3. In what is left, call3.sh's question (the first GPU run of `aka eval --ncu-stalls`: v_words against
#    f16_mma); two failed starts left too little budget for a third call (issue 17's one-GPU half,
#    scripts/gpu_scaling.sh, stays unrun).
#   here: bash scripts/pre_device.sh; the device, carrying .gpucache and .whl:
#   AKA_DEADLINE_S=470 OUT=$OUT bash results/h100/device-2026-12-06f/call2.sh
set -uo pipefail
. scripts/device_lib.sh
call_begin 560
timeout 90 python3 scripts/probe_kernel_launches.py fused_moe grouped_dispatch --shapes 14,10,13 --reps 10 \
  --out $OUT/moe_launches.json > $OUT/moe_launches.log 2>&1
echo "[moe launches rc=$? $(( $(date +%s) - T0 ))s]"; cut -c1-400 $OUT/moe_launches.log | tail -4
kb_copy /tmp/kbv; touch /tmp/kbv/stamp
rm /tmp/kbv/knowledge_base/kernels/fused_moe/{atomic_combine,sorted_grouped}.py
timeout --signal=INT --kill-after=10 250 python3 -m aka.cli kb verify --kb /tmp/kbv/knowledge_base --device cuda \
  --shapes all --jobs 1 --timeout 240 --budget 240 --op fused_moe >> $OUT/kbverify.log 2>&1
echo "[kb verify fused_moe rc=$? $(( $(date +%s) - T0 ))s]"
( cd /tmp/kbv/results/kb && find kernels -newer /tmp/kbv/stamp -type f | tar czf $OUT/kbv.tgz -T - )
grep -v ': deferred\|━' $OUT/kbverify.log | tail -8
NCU_STALLS=1 NCU_TIMEOUT=$(( ($(left) - 10) / 2 )) bash scripts/gpu_ncu_probe.sh fp8_kv_decode_attention:v_words:2 \
  fp8_kv_decode_attention:f16_mma:2
for j in $OUT/ncu/ncu_*.json; do
  [[ -s $j ]] && python3 -c "import json,sys; from aka.evaluate.report import ncu_line
d=json.load(open(sys.argv[1])); print(sys.argv[1].split('/')[-1], [ncu_line(s['ncu']) for s in d['shapes'] if s.get('ncu')])" "$j"
done
tail -3 $OUT/ncu/*.log
echo "wall $(( $(date +%s) - T0 ))"
