#!/usr/bin/env bash
# One device call (2026-12-03 session): the kernels the judge's clock rejected, re-verified under load
# (beside the Llama conversion), the Llama block converted, applied and timed end to end, then the
# ablation grid resumed for what the call has left. Everything lands in $OUT (verify.tgz,
# convert.tgz, exp.tgz).
#   device: AKA_TOTAL_S=440 bash scripts/gpu_rest.sh     (carry .gpucache, .whl, experiments/runs/h200_dropout_retrieval)
set -uo pipefail
: "${OUT:?set OUT to a results folder}"
cd "$(dirname "$0")/.."
T0=$(date +%s); TOTAL=${AKA_TOTAL_S:-440}
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 AKA_CACHE_DIR=$PWD/.gpucache
[[ -s .gpucache/source_sha ]] && export AKA_GIT_SHA=$(cat .gpucache/source_sha)
V=.gl/kbv; rm -rf $V; mkdir -p $V/results "$OUT/v"; cp -r knowledge_base $V/; cp -r results/kb $V/results/
timeout --signal=INT 220 python3 -m aka.cli kb verify --device cuda --kb $V/knowledge_base --op "${AKA_REVERIFY_OPS:-fp8_per_token_quant}" \
  --shapes first --force --jobs 4 --timeout 200 > "$OUT/v/verify.log" 2>&1 &
AKA_DEADLINE_S=${AKA_LLAMA_S:-260} bash scripts/gpu_convert.sh llama > "$OUT/v/convert.out" 2>&1
wait
tar czf "$OUT/verify.tgz" -C "$OUT" v -C "$PWD/$V" results && rm -rf "$OUT/v"
left=$(( TOTAL - ($(date +%s) - T0) ))
echo "exp gets ${left}s"
(( left > 90 )) && AKA_DEADLINE_S=$left bash scripts/gpu_exp.sh > /dev/null 2>&1
ls -la "$OUT"
