#!/usr/bin/env bash
# One device call: the judge's GPU tests (AKA_JUDGE_TESTS; 2026-12-02c: those its first call did not
# reach), beside a kb verify of AKA_REVERIFY_OPS (empty skips it); then the Llama block converted, applied and timed
# end to end, alone; then the ablation grid resumed for what the call has left. Everything lands in $OUT (verify.tgz,
# convert.tgz, exp.tgz).
#   device: AKA_TOTAL_S=440 bash scripts/gpu_rest.sh
#   2026-12-03: AKA_REVERIFY_OPS= AKA_T_JUDGE=330 AKA_PYTEST_N=8 AKA_JUDGE_TESTS="tests/gpu/test_judge_gpu.py tests/test_adversarial.py" AKA_LLAMA_S=230 AKA_TOTAL_S=590     (carry .gpucache, .whl, experiments/runs/h200_dropout_retrieval)
set -uo pipefail
: "${OUT:?set OUT to a results folder}"
cd "$(dirname "$0")/.."
T0=$(date +%s); TOTAL=${AKA_TOTAL_S:-440}
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 AKA_CACHE_DIR=$PWD/.gpucache
[[ -s .gpucache/source_sha ]] && export AKA_GIT_SHA=$(cat .gpucache/source_sha)
. scripts/device_lib.sh
use_xdist
V=.gl/kbv; kb_copy $V; mkdir -p "$OUT/v"
device_provenance > "$OUT/v/provenance.txt" 2>&1
RO=${AKA_REVERIFY_OPS-fp8_per_token_quant}   # empty: no kb verify beside the tests
[[ -n $RO ]] && timeout --signal=INT 220 python3 -m aka.cli kb verify --device cuda --kb $V/knowledge_base --op "$RO" \
  --shapes first --force --jobs 4 --timeout 200 > "$OUT/v/verify.log" 2>&1 &
# the judge's GPU tests (AKA_JUDGE_TESTS, a pytest argument list; default: those the first call of
# 2026-12-02c did not reach, and the crash whose reason was mended), AKA_T_JUDGE seconds, AKA_PYTEST_N workers
read -ra JT <<< "${AKA_JUDGE_TESTS:-tests/gpu/test_judge_gpu.py::test_forged_samples_are_rejected_by_the_judges_clock tests/gpu/test_judge_gpu.py::test_a_second_candidates_runner_starts_with_the_judges_driver_module}"
AKA_GPU_RESULTS=$OUT/v/gpu_results.jsonl timeout --signal=INT "${AKA_T_JUDGE:-200}" python3 -m pytest -m gpu -q -n "${AKA_PYTEST_N:-4}" \
  -p no:cacheprovider -rA --durations=20 --junitxml="$OUT/v/junit_judge.xml" "${JT[@]}" > "$OUT/v/judge.log" 2>&1
wait
echo "[checks wall=$(( $(date +%s) - T0 ))s]" | tee -a "$OUT/v/steps.txt"
# alone on the GPU: the end-to-end timing must not share it with evaluations outside its lock
AKA_DEADLINE_S=${AKA_LLAMA_S:-240} bash scripts/gpu_convert.sh llama > "$OUT/v/convert.out" 2>&1
tar czf "$OUT/verify.tgz" -C "$OUT" v -C "$PWD/$V" results && rm -rf "$OUT/v"
left=$(( TOTAL - ($(date +%s) - T0) ))
echo "exp gets ${left}s"
(( left > 90 )) && AKA_DEADLINE_S=$left bash scripts/gpu_exp.sh > /dev/null 2>&1
ls -la "$OUT"
