#!/usr/bin/env bash
# GPU work for one device session; everything lands in $OUT/results.tgz (the device returns at
# most 8 files) plus $OUT/summary.txt. Then, here:
#   tar xzf /work/.device/N/results.tgz -C /tmp/gpu && python scripts/collect_gpu.py /tmp/gpu/harness
#
#   device: bash scripts/gpu_run.sh MODE...    MODE: harness | bench1 | bench2 | kb | agent
# One device call runs 10 minutes at most: run the modes in separate calls. Estimates (H200):
# harness ~6 min, bench1/bench2 (half the operators each, --jobs 12) ~7 min each, kb ~8 min,
# agent ~8 min. Merge the two bench halves: cat */bench/run/records.jsonl > run/records.jsonl,
# then `aka bench report run`.
set -uo pipefail
: "${OUT:?set OUT to a results folder}"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 AKA_CACHE_DIR=${AKA_CACHE_DIR:-/tmp/aka-cache}
W=$OUT/work; mkdir -p "$W"
modes=" ${*:-harness} "
prov() {
  { nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
    python3 -c "import torch,triton,sys;print('torch',torch.__version__,'triton',triton.__version__,'python',sys.version.split()[0])"
    git rev-parse --short=12 HEAD 2>/dev/null; date -u +%FT%TZ; } > "$1/provenance.txt" 2>&1
}
if [[ $modes == *" harness "* ]]; then
  d=$W/harness; mkdir -p "$d"; prov "$d"; export AKA_GPU_RESULTS=$d/gpu_results.jsonl
  python3 -m aka.cli hw calibrate > "$d/calibration.json" 2> "$d/calibration.err"
  python3 -m pytest -m gpu tests/gpu tests/test_adversarial.py tests/test_agent_e2e.py -q -p no:cacheprovider \
    --junitxml="$d/junit_gpu.xml" 2>&1 | tee "$d/pytest_gpu.log" | tail -25
  python3 -m aka.cli eval rms_norm knowledge_base/kernels/rms_norm/rowwise.py --shapes 0,1,2,3,4,5,6,7,8,9 \
    --json "$d/eval_rms_norm_10shapes.json" > "$d/eval10.txt" 2>&1
  python3 -m aka.cli eval rms_norm knowledge_base/kernels/rms_norm/rowwise.py --shapes 12 --ncu \
    --json "$d/eval_rms_norm_ncu.json" > "$d/evalncu.txt" 2>&1
  unset AKA_GPU_RESULTS
fi
if [[ $modes == *" kb "* ]]; then
  d=$W/kb; mkdir -p "$d"; prov "$d"
  python3 -m aka.cli kb verify --device cuda 2>&1 | tee "$d/kb_verify.log" | tail -15
  tar czf "$d/results_json.tgz" knowledge_base/kernels/*/*.results.json 2>/dev/null
fi
if [[ $modes == *" agent "* ]]; then
  d=$W/agent; mkdir -p "$d"; prov "$d"
  python3 -m aka.cli optimize op=rms_norm shape=4096x4096 model=offline iters=12 runs_dir="$d/runs" \
    run_id=rms_norm-4096 live=off 2>&1 | tee "$d/optimize.log" | tail -12
  python3 experiments/offline_sweep.py --iters 8 --out "$d/sweep" \
    --ops rms_norm,fused_add_rms_norm,silu_and_mul,gelu_and_mul,softmax,rope_neox,fp8_per_token_group_quant,l2_norm \
    2>&1 | tee "$d/sweep.log" | tail -12
fi
for half in 1 2; do
  [[ $modes == *" bench$half "* ]] || continue
  ops=$(ls bench/ops | awk -v h=$half 'NR % 2 == h % 2' | paste -sd,)
  d=$W/bench$half; mkdir -p "$d"; prov "$d"
  start=$(date +%s)
  python3 -m aka.cli bench run --impl reference,compile --jobs 12 --ops "$ops" --out "$d/run" 2>&1 | tail -15
  echo "bench$half wall seconds: $(( $(date +%s) - start ))" | tee "$d/wall.txt"
done
tar czf "$OUT/results.tgz" -C "$W" . && rm -rf "$W"
ls -la "$OUT"
