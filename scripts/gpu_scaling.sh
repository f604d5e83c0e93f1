#!/usr/bin/env bash
# Issue 17 on a multi-GPU host (nvidia-h200-x2 or larger): the same `aka bench run` and the same
# `aka convert` batch on GPU 0 alone, then on every GPU of the host, and scripts/scaling_report.py
# over the pairs (wall time, evaluations per hour, scaling efficiency, per-GPU timing agreement).
# The four runs live in the carried cache ($AKA_CACHE_DIR/scaling/), so a call cut by its deadline
# resumes in the next one (bench runs from their records, convert from its library) and the walls
# add up without the time between calls. Everything lands in $OUT/scaling.tgz. Then, here:
#   tar xzf <files_at>/scaling.tgz -C /tmp/sc && rm -rf .gpucache/scaling && cp -r /tmp/sc/scaling/runs .gpucache/scaling
#
#   device: AKA_CACHE_DIR=$PWD/.gpucache OUT=$OUT bash scripts/gpu_scaling.sh
#   env: AKA_DEADLINE_S (default 560), AKA_SC_OPS (the ops; default below), AKA_SC_JOBS (evaluations
#        at once per GPU, default 4), AKA_SC_ITERS (convert rounds per op, default 2), AKA_SC_PARTS
#        (default "bench1 benchN convert1 convertN"; "bench1 convert1" on a one-GPU host: the
#        report then gives the one-GPU rows alone), AKA_SC_DEVICE=cpu (a smoke test of the script here:
#        small shapes under the interpreter, no GPUs, nothing timed)
set -uo pipefail
: "${OUT:?set OUT to a results folder}"
cd "$(dirname "$0")/.."
T0=$(date +%s)
DEADLINE=${AKA_DEADLINE_S:-560}
. scripts/device_lib.sh
device_env
export NCCL_NVLS_ENABLE=0   # NVLink multicast stays off (KINDS.md); nothing here uses NCCL, this only makes sure
OPS=${AKA_SC_OPS:-rms_norm,fused_add_rms_norm,layer_norm,silu_and_mul,softmax,rope_neox,qk_norm,embedding,moe_sum,l2_norm,gemm_bf16,paged_decode_attention}
JOBS=${AKA_SC_JOBS:-4}
DEV=${AKA_SC_DEVICE:-cuda}
PARTS=${AKA_SC_PARTS-bench1 benchN convert1 convertN}
W=$OUT/scaling; R=$AKA_CACHE_DIR/scaling; mkdir -p "$W" "$R"
pack() {
  echo "total wall seconds: $(( $(date +%s) - T0 ))" | tee -a "$W/steps.txt"
  [[ -n ${have_b:-}${have_c:-} ]] && python3 scripts/scaling_report.py ${have_b:+--bench "$R/bench1" ${bN:+"$R/benchN"}} \
    ${have_c:+--convert "$R/convert1" ${cN:+"$R/convertN"}} --out "$W/SCALING.md" > "$W/report.log" 2>&1
  rm -rf "$W/runs"; cp -r "$R" "$W/runs"
  tar czf "$OUT/scaling.tgz" -C "$OUT" scaling && rm -rf "$W"
  ls -la "$OUT"
}
trap pack EXIT
device_provenance > "$W/provenance.txt" 2>&1
nvidia-smi -L >> "$W/provenance.txt" 2>&1
ALL=$(python3 -c "from aka.executors import detect_gpus; print(','.join(detect_gpus()))")
echo "GPUs: ${ALL:-none}" | tee -a "$W/steps.txt"
python3 scripts/suite_plan.py "$R/best" "$R/plan.json" --ops "$OPS" > "$W/plan.txt" 2>&1

run() {  # run PART: one of the four, with what is left of the deadline
  local part=$1 t s gpus
  t=$(( $(left) - 40 ))
  if (( t < 30 )); then echo "skipped (deadline): $part" | tee -a "$W/steps.txt"; return 0; fi
  [[ $part == *1 ]] && gpus=0 || gpus=$ALL
  local bargs=(--gpus "$gpus" --device cuda) cargs=(--gpus "$gpus" --jobs-per-gpu "$JOBS" --device cuda --shape last)
  if [[ $DEV == cpu ]]; then
    bargs=(--device cpu --shapes small); cargs=(--gpus none --workers 2 --device cpu --shape small)
  fi
  s=$(date +%s)
  case $part in
    bench*) timeout --signal=INT --kill-after=15 "$t" python3 -m aka.cli bench run --impl "$R/best" --ops "$OPS" \
              "${bargs[@]}" --jobs "$JOBS" --no-beside --timeout "$t" --out "$R/$part" > "$W/$part.log" 2>&1 ;;
    convert*) timeout --signal=INT --kill-after=15 "$t" python3 -m aka.cli convert bench --library "$R/$part" \
              --ops "$OPS" "${cargs[@]}" --model offline --iters "${AKA_SC_ITERS:-2}" --timeout 300 \
              > "$W/$part.log" 2>&1 ;;
  esac
  echo "[$part rc=$? wall=$(( $(date +%s) - s ))s gpus $gpus]" | tee -a "$W/steps.txt"
}
have_b=; have_c=; bN=; cN=   # a one-GPU host runs only "bench1 convert1": the report then has their rows alone
for part in $PARTS; do
  run "$part"
  [[ -d $R/bench1 ]] && have_b=1
  [[ -d $R/benchN ]] && bN=1
  [[ -f $R/convert1/batch.jsonl ]] && have_c=1
  [[ -f $R/convertN/batch.jsonl ]] && cN=1
done
exit 0
