#!/usr/bin/env bash
# Nsight Compute through the harness (`aka eval --ncu`, the confined profile) for a few
# op:kernel:shape triples, one after another, each a full evaluation of that one shape (verdict,
# timing, then the profile). For the kernels whose gap to the ceiling is not explained by what
# the records hold (DRAM-bound or issue-bound?). Each JSON lands in $NCU_OUT (default $OUT/ncu).
#
#   device: OUT=$OUT bash scripts/gpu_ncu_probe.sh paged_decode_attention:split_dispatch:0 ...
#   NCU_STALLS=1: `--ncu-stalls`, the warp-state stall reasons too (what the warps wait on)
# Each ncu_<op>_<kernel>_<shape>.json is the evaluation's JSON; the profiled shape's entry under
# `shapes` carries `ncu` (aka/evaluate/ncu.py summarize_ncu): dram_pct and sm_pct (% of peak,
# launch-weighted), occupancy_pct, l2_hit_pct, DRAM bytes against the op's minimum, registers,
# spills, launches per kernel. Off a GPU the evaluation runs and `ncu` stays empty (CPU-checked).
set -uo pipefail
: "${OUT:?set OUT to a results folder}"
cd "$(dirname "$0")/.."
D=${NCU_OUT:-$OUT/ncu}; mkdir -p "$D"
for t in "$@"; do
  IFS=: read -r op k s <<< "$t"
  j=$D/ncu_${op}_${k}_${s}.json; s0=$(date +%s)
  timeout ${NCU_TIMEOUT:-180} python3 -m aka.cli eval "$op" "knowledge_base/kernels/$op/$k.py" --shapes "$s" \
    --ncu --ncu-shape "$s" ${NCU_STALLS:+--ncu-stalls} --no-peer --draws 3 --json "$j" > "$D/ncu_${op}_${k}_${s}.log" 2>&1
  echo "[ncu $op $k shape $s rc=$? wall=$(( $(date +%s) - s0 ))s]" | tee -a "$D/steps.txt"
done
