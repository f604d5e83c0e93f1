#!/usr/bin/env bash
# One device session's worth of GPU work; every figure lands under $OUT (then
# scripts/collect_gpu.py turns it into committed tables with provenance).
#   device: bash scripts/gpu_run.sh [harness|bench|kb|all]
set -uo pipefail
: "${OUT:?set OUT to a results folder}"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 AKA_CACHE_DIR=${AKA_CACHE_DIR:-/tmp/aka-cache}
export AKA_GPU_RESULTS=$OUT/gpu_results.jsonl
what=${1:-harness}
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
  python3 -c "import torch,triton,sys;print('torch',torch.__version__,'triton',triton.__version__,'python',sys.version.split()[0])"
  git rev-parse --short=12 HEAD 2>/dev/null; date -u +%FT%TZ; } > "$OUT/provenance.txt" 2>&1
if [[ $what == harness || $what == all ]]; then
  python3 -m aka.cli hw calibrate > "$OUT/calibration.json" 2> "$OUT/calibration.err"
  tests=$(ls -d tests/gpu tests/test_adversarial.py 2>/dev/null)
  python3 -m pytest -m gpu $tests -q -p no:cacheprovider \
    --junitxml="$OUT/junit_gpu.xml" 2>&1 | tee "$OUT/pytest_gpu.log" | tail -25
  python3 -m aka.cli eval rms_norm knowledge_base/kernels/rms_norm/rowwise.py --shapes 0,1,2,3,4,5,6,7,8,9 \
    --json "$OUT/eval_rms_norm_10shapes.json" > /dev/null 2>&1
  python3 -m aka.cli eval rms_norm knowledge_base/kernels/rms_norm/rowwise.py --shapes 12 --ncu \
    --json "$OUT/eval_rms_norm_ncu.json" > /dev/null 2>&1
fi
if [[ $what == bench || $what == all ]]; then
  python3 -m aka.cli bench run --impl reference,compile --out "$OUT/bench" 2>&1 | tail -15
fi
ls -la "$OUT"
