#!/usr/bin/env bash
# One device call for a session with little device time, every part under its own budget in
# seconds so that one overrunning never eats the next (AKA_T_<PART>; 0 skips a part):
#   smoke   an honest kernel through judge and runner; if it fails, the harness parts are skipped
#   cost    `aka eval` of rms_norm's first 10 shapes, alone, empty cache (issue 18's cost figure)
#   timing  the timing tests (spread, method per shape, graph vs events), alone
#   par     the judge's escapes and the adversarial suite (pytest-xdist) beside gpu_peers.sh (peers
#           against the best kernels through the harness); timed regions take the GPU lock
#   gemm, attn, moe   the tuners (in-process timings; see each script)
# Everything lands in $OUT/session.tgz (and gpu_peers.sh's $OUT/peers.tgz).
#   before: bash scripts/pre_device.sh
#   device: AKA_CACHE_DIR=$PWD/.gpucache bash scripts/gpu_session.sh     (carry .gpucache, .whl)
set -uo pipefail
: "${OUT:?set OUT to a results folder}"
cd "$(dirname "$0")/.."
T0=$(date +%s)
export PYTORCH_CUDA_ALLOC_CONF=${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True} PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
export AKA_CACHE_DIR=${AKA_CACHE_DIR:-/tmp/aka-cache}
mkdir -p "$AKA_CACHE_DIR"
[[ -s $AKA_CACHE_DIR/source_sha ]] && export AKA_GIT_SHA=$(cat "$AKA_CACHE_DIR/source_sha")
S=$OUT/s; mkdir -p "$S"
if ls .whl/pytest_xdist*.whl >/dev/null 2>&1 && ! python3 -c "import xdist" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/pytest_xdist*.whl .whl/execnet*.whl \
    && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export AKA_GPU_RESULTS=$S/gpu_results.jsonl
. scripts/gpu_parts.sh
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
  python3 -c "import torch,triton,sys;print('torch',torch.__version__,'triton',triton.__version__,'python',sys.version.split()[0])"
  echo "source ${AKA_GIT_SHA:-unknown}"; date -u +%FT%TZ; } > "$S/provenance.txt" 2>&1
part calibrate 30 bash -c "python3 -m aka.cli hw calibrate > '$S/calibration.json'"
part smoke "${AKA_T_SMOKE:-35}" python3 -m aka.cli eval rms_norm knowledge_base/kernels/rms_norm/rowwise.py \
  --shapes 0 --no-peer --json "$S/smoke.json"
H=1; python3 -c "import json,sys; sys.exit(json.load(open(sys.argv[1]))['status'] != 'pass')" "$S/smoke.json" 2>/dev/null \
  || { H=0; echo "smoke did not pass: harness parts skipped" | tee -a "$S/parts.txt"; }
if (( H )); then
  s=$(date +%s)
  part cost "${AKA_T_COST:-55}" env AKA_CACHE_DIR=/tmp/cost-new python3 -m aka.cli eval rms_norm \
    knowledge_base/kernels/rms_norm/rowwise.py --shapes 0,1,2,3,4,5,6,7,8,9 --no-peer --json "$S/cost_new.json"
  echo "cost new: $(( $(date +%s) - s )) s" | tee -a "$S/cost.txt"
  part timing "${AKA_T_TIMING:-55}" python3 -m pytest -m gpu -q -p no:cacheprovider --junitxml="$S/junit_timing.xml" \
    "tests/gpu/test_measurement_gpu.py::test_same_kernel_timed_twice_agrees" \
    "tests/gpu/test_measurement_gpu.py::test_one_timing_method_per_shape_and_a_syncing_call_says_so" \
    "tests/gpu/test_measurement_gpu.py::test_a_slow_call_is_graphed_over_few_sets_and_measures_what_events_measure"
  TP=${AKA_T_PAR:-100}
  XD=(); python3 -c "import xdist" 2>/dev/null && XD=(-n "${AKA_PYTEST_N:-6}")
  part par_judge "$TP" python3 -m pytest -m gpu -q "${XD[@]}" -p no:cacheprovider --durations=10 \
    --junitxml="$S/junit_judge.xml" tests/gpu/test_judge_gpu.py tests/test_adversarial.py &
  if [[ -f scripts/gpu_peers.sh ]]; then
    part par_peers "$TP" env AKA_DEADLINE_S=$(( TP - 6 )) AKA_PEER_JOBS=${AKA_PEER_JOBS:-4} bash scripts/gpu_peers.sh &
  fi
  wait
  # gpu_peers.sh packs $OUT/work itself; if it was killed first, keep what it left
  [[ -d $OUT/work ]] && tar czf "$S/peers_partial.tgz" -C "$OUT" work && rm -rf "$OUT/work"
fi
unset AKA_GPU_RESULTS
[[ -f scripts/gpu_tune_gemm.py ]] && part gemm "${AKA_T_GEMM:-50}" python3 scripts/gpu_tune_gemm.py "$S/gemm" --deadline $(( ${AKA_T_GEMM:-50} - 6 ))
[[ -f scripts/gpu_tune_attn.py ]] && part attn "${AKA_T_ATTN:-45}" python3 scripts/gpu_tune_attn.py "$S/attn" --deadline $(( ${AKA_T_ATTN:-45} - 6 ))
[[ -f scripts/gpu_tune_moe.py ]] && part moe "${AKA_T_MOE:-30}" python3 scripts/gpu_tune_moe.py "$S/moe" --deadline $(( ${AKA_T_MOE:-30} - 6 ))
echo "session wall seconds: $(( $(date +%s) - T0 ))" | tee -a "$S/parts.txt"
tar czf "$OUT/session.tgz" -C "$OUT" s && rm -rf "$S"
ls -la "$OUT"
