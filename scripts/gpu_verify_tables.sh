#!/usr/bin/env bash
# One device call: (1) rank the memory-bound ops' kernels and parameters beside their peers
# (scripts/gpu_tune_rowops.py, alone on the GPU), then (2) judge the dispatch kernels whose tables
# were baked from the last tuner run (fused_moe, paged decode, MLA decode, prefill) through the
# harness, `aka bench run --impl [peer,]<kernel>`, several evaluations at once (the GPU lock takes
# their timed rounds in turn). fused_moe's 16 shapes are cut into parts, one evaluation each: in
# one evaluation they did not finish in 503 s (results/h200/peers-2026-12-03).
# Everything lands in $OUT/vt.tgz. Then, here: tar xzf <files_at>/vt.tgz -C /tmp/vt
#
#   device: AKA_CACHE_DIR=$PWD/.gpucache OUT=$OUT bash scripts/gpu_verify_tables.sh
# A kernel named KERNEL@KEY=VAL in a part is an A/B copy with one AKA_PARAMS entry changed
# (scripts/params_variant.py), timed in its own folder beside the committed kernel.
#
#   env: AKA_DEADLINE_S (default 560), AKA_VT_JOBS (default 4), AKA_VT_TUNE_S (default 150, 0 skips
#        the row-op tuner), AKA_VT_ROWOPS (the tuner's ops), AKA_VT_PARTS (which harness parts, keys
#        of PART below; set and empty: none), AKA_VT_KBV_OPS (ops whose kernels `aka kb verify` runs on every shape beside),
#        (in that order; AKA_VT_KBV_JOBS kernels at once, default 2),
#        AKA_VT_ADV_N (xdist workers for the GPU adversarial suite beside; unset: not run),
#        AKA_VT_ADV_K (a pytest -k expression: only those adversarial cases, e.g. the ones a cut-off
#        call did not reach),
#        AKA_VT_TUNE_CONFIGS / AKA_VT_TUNE_SHAPES / AKA_VT_TUNE_KERNELS (the tuner's --max-configs /
#        --shapes / --kernels)
set -uo pipefail
: "${OUT:?set OUT to a results folder}"
cd "$(dirname "$0")/.."
T0=$(date +%s)
DEADLINE=${AKA_DEADLINE_S:-560}
JOBS=${AKA_VT_JOBS:-4}
TUNE_S=${AKA_VT_TUNE_S:-150}
ROWOPS=${AKA_VT_ROWOPS:-fused_add_rms_norm,layer_norm,softmax,silu_and_mul,gelu_and_mul,qk_norm}
PARTS=${AKA_VT_PARTS-moe_a moe_b moe_c moe_d paged mla prefill}
. scripts/device_lib.sh
device_env
W=$OUT/vt; mkdir -p "$W/runs"
pack() {
  echo "total wall seconds: $(( $(date +%s) - T0 ))" | tee -a "$W/steps.txt"
  python3 -m aka.cli bench peers "$W"/runs/*/ --out "$W/PEERS.md" > "$W/peers_table.log" 2>&1
  tar czf "$OUT/vt.tgz" -C "$OUT" vt && rm -rf "$W"
  ls -la "$OUT"
}
trap pack EXIT
device_provenance > "$W/provenance.txt" 2>&1
liger_install "$W/provenance.txt" "$W/install.log"

# 0. the measured ceilings (copy bandwidth, matmul rates) the fractions "of the measured ceiling" use
timeout 120 python3 -m aka.cli hw calibrate > "$W/calibration.json" 2> "$W/calibration.log"
echo "[calibrate rc=$?]" | tee -a "$W/steps.txt"

# 1. the row-op tuner, alone on the GPU (its timings take no lock)
if (( TUNE_S > 0 )); then
  s=$(date +%s)
  timeout $(( TUNE_S + 30 )) python3 scripts/gpu_tune_rowops.py "$W/rowops" --ops "$ROWOPS" --deadline "$TUNE_S" \
    --max-configs "${AKA_VT_TUNE_CONFIGS:-4}" --shapes "${AKA_VT_TUNE_SHAPES:-large}" \
    ${AKA_VT_TUNE_KERNELS:+--kernels "$AKA_VT_TUNE_KERNELS"} > "$W/rowops.log" 2>&1
  echo "[rowops tuner rc=$? wall=$(( $(date +%s) - s ))s ops $ROWOPS]" | tee -a "$W/steps.txt"
fi

# 2. the harness: part -> "op kernel impls shapes"
K=knowledge_base/kernels
declare -A PART=(
  [moe_a]="fused_moe grouped_dispatch peer 0,1,2,3"
  [moe_b]="fused_moe grouped_dispatch peer 4,5,6,7"
  [moe_c]="fused_moe grouped_dispatch peer 8,9,10,11"
  [moe_d]="fused_moe grouped_dispatch peer 12,13,14,15"
  [paged]="paged_decode_attention split_dispatch peer all"
  [mla]="mla_decode_attention split_dispatch peer all"
  [prefill]="prefill_attention flash_dispatch peer 0,1,2,3,5,6,7,8,9,10,11,12,13,14"
  # memory-bound ops: the row-op tuner's picks (2026-12-04) on the large shapes scripts/peer_plan.py lists
  [add_rms]="fused_add_rms_norm row_tile peer 7,8,9,10,11,12,13,14"
  [layer_norm]="layer_norm row_tile peer 10,11,13,14,15"
  [softmax]="softmax split_row,row_in_registers peer 4,6,7,8,9,11,12,13"
  [silu]="silu_and_mul rowmajor peer 8,9,10,11,12,13,14,15"
  [gelu]="gelu_and_mul rowmajor peer 7,8,9,10,11,12,13,14"
  [qk_norm]="qk_norm flat_rows peer 9,10,11,12,13,14,15"
  # the split-K fixup A/B (2026-12-04): dispatch as committed (FIXUP 1) beside its second-launch form
  [fixup_gemm]="gemm_bf16 dispatch,dispatch@FIXUP=0 peer 0,1,2,4,7"
  [fixup_fp8]="fp8_block_scaled_gemm dispatch,dispatch@FIXUP=0 peer 0,1,2,5,6,8")
one() {
  local part=$1 op ks peer shapes impls="" t s k
  read -r op ks peer shapes <<< "${PART[$part]}"
  for k in ${ks//,/ }; do   # one impl folder per kernel (bench run takes one candidate per op per folder)
    if [[ $k == *@* ]]; then  # KERNEL@KEY=VAL: a copy with one AKA_PARAMS entry changed (an A/B)
      local base=${k%%@*} kv=${k#*@} d="$W/c_${k//[@=]/_}"
      mkdir -p "$d/$op" && python3 scripts/params_variant.py "$K/$op/$base.py" "$kv" > "$d/$op/$base.py" || return 1
      impls="$impls,$d"
    else
      mkdir -p "$W/c_$k/$op" && cp "$K/$op/$k.py" "$W/c_$k/$op/"; impls="$impls,$W/c_$k"
    fi
  done
  impls=${impls#,}; [[ $peer == peer ]] && impls="peer,$impls"
  t=$(( $(left) - 25 ))
  if (( t < 30 )); then echo "skipped (deadline): $part" | tee -a "$W/steps.txt"; return 0; fi
  s=$(date +%s)
  timeout --signal=INT --kill-after=10 "$t" python3 -m aka.cli bench run --impl "$impls" --ops "$op" \
    --shapes "$shapes" --no-beside --timeout "$t" --out "$W/runs/$part" > "$W/runs/$part.log" 2>&1
  echo "[$part rc=$? wall=$(( $(date +%s) - s ))s $op $k shapes $shapes]" | tee -a "$W/steps.txt"
}
# 3. optionally, beside the harness parts: `aka kb verify --device cuda` of some ops' kernels on
#    every shape, in a scratch copy of the knowledge base (AKA_VT_KBV_OPS; results in kbv/results)
if [[ -n ${AKA_VT_KBV_OPS:-} ]]; then
  ( kb_copy "$W/kbv"; t=$(( $(left) - 30 ))
    timeout --signal=INT --kill-after=10 "$t" python3 -m aka.cli kb verify --kb "$W/kbv/knowledge_base" --device cuda \
      --op "$AKA_VT_KBV_OPS" --first "$AKA_VT_KBV_OPS" --shapes all --jobs "${AKA_VT_KBV_JOBS:-2}" --timeout "$t" \
      > "$W/kbv/kbverify.log" 2>&1
    echo "[kb verify rc=$? wall=$(( $(date +%s) - T0 ))s since start, ops $AKA_VT_KBV_OPS]" | tee -a "$W/steps.txt" ) &
  sleep 2
fi
# 4. optionally, beside: the GPU adversarial suite (AKA_VT_ADV_N xdist workers, cut at the deadline;
#    junit_adv.xml says which cases were reached and their verdicts)
if [[ -n ${AKA_VT_ADV_N:-} ]]; then
  use_xdist
  ( t=$(( $(left) - 30 ))
    AKA_GPU_RESULTS=$W/adv_results.jsonl timeout --signal=INT "$t" python3 -m pytest -m gpu tests/test_adversarial.py \
      ${AKA_VT_ADV_K:+-k "$AKA_VT_ADV_K"} -q -n "$AKA_VT_ADV_N" -p no:cacheprovider -rA --durations=15 --junitxml="$W/junit_adv.xml" > "$W/adv.log" 2>&1
    echo "[adversarial rc=$? wall=$(( $(date +%s) - T0 ))s since start]" | tee -a "$W/steps.txt" ) &
  sleep 2
fi
for part in $PARTS; do
  while (( $(jobs -rp | wc -l) >= JOBS )); do wait -n; done
  one "$part" &
  sleep 2
done
wait
